#!/usr/bin/env bash
# run_python_test.sh: runs a Python test of the binding under Bazel with Debian's python3, from
# the workspace's runfiles, with python/ (the tilerun package) on the import path.
#
# Under --config=asan libtilerun.so and the backends are built with AddressSanitizer and UBSan,
# whose runtimes must be loaded first: they are preloaded into python3. Leak checking is off
# there (the interpreter keeps memory to its exit by design); the test checks that outputs are
# freed by itself.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${PWD}/python${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONDONTWRITEBYTECODE=1
preload=$(ldd python/libtilerun.so | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
if [ -n "$preload" ]; then
  export LD_PRELOAD="${preload}${LD_PRELOAD:+:${LD_PRELOAD}}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+${ASAN_OPTIONS}:}detect_leaks=0"
  export TILERUN_TEST_SANITIZED=1
fi
exec /usr/bin/python3 "$@"

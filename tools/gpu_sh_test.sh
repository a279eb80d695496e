#!/usr/bin/env bash
# gpu_sh_test.sh: tools/gpu.sh's arguments, its A/B alternation and its test runner, on a fake .gpu/
# folder and a fake nvidia-smi (no GPU, no Bazel needed).
# shellcheck disable=SC2001,SC2016  # sed over captured output; commands quoted for the child shell
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/gpu.sh
[ -f "$script" ] || { echo "no tools/gpu.sh beside this test" >&2; exit 1; }
fails=0
check() {  # check NAME EXPECTED_STATUS PATTERN COMMAND...: the status, and PATTERN in the output
  local name=$1 want=$2 pattern=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: exit $rc (want $want), output:"; sed 's/^/    /' <<<"$out"; fails=$((fails + 1))
  else
    echo "ok: $name"
  fi
}

root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
mkdir -p "$root/repo/tools" "$root/bin" "$root/out"
cp "$script" "$root/repo/tools/gpu.sh"
g="$root/repo/tools/gpu.sh"
printf '#!/bin/sh\n' >"$root/bin/nvidia-smi"  # lists no GPU
chmod +x "$root/bin/nvidia-smi"
export PATH="$root/bin:$PATH"

check "help" 0 "^Usage:" "$g" --help
check "no command" 2 "Usage:" "$g"
check "unknown command" 2 "unknown command 'frob'" "$g" frob
check "a COPT before any --variant" 2 "'-DX': expected --variant NAME COPT" "$g" pack -DX
check "a variant's name with a space" 2 "got 'a b'" "$g" pack --variant "a b" -DX
check "ab without --" 2 "usage: tools/gpu.sh ab" "$g" ab v true
check "ab with no rounds" 2 "--rounds takes a positive whole number; got '0'" "$g" ab --rounds 0 v -- true
check "ab with no .gpu" 2 "no .gpu/ here" "$g" ab v -- true
check "test with no GPU" 2 "no GPU is visible" "$g" test
check "run with no command" 2 "run takes a COMMAND" "$g" run

# a packed folder: a library and a variant's (empty files: nothing loads them here)
mkdir -p "$root/repo/.gpu/bin" "$root/repo/.gpu/lib" "$root/repo/.gpu/var/v"
: >"$root/repo/.gpu/lib/libtilerun.so"
: >"$root/repo/.gpu/var/v/libtilerun.so"
check "ab with an unknown variant" 2 "no variant 'w' in .gpu/var/" "$g" ab w -- true
out=$("$g" ab --rounds 2 v -- sh -c 'echo "used $TILERUN_LIBRARY"' 2>&1)
used=$(grep '^used ' <<<"$out" | sed "s|$root/repo/||" | tr '\n' ' ')
if [ "$used" = "used .gpu/lib/libtilerun.so used .gpu/var/v/libtilerun.so used .gpu/lib/libtilerun.so used .gpu/var/v/libtilerun.so " ]; then
  echo "ok: ab alternates the packed library and the variant's, round by round"
else
  echo "FAIL: ab ran: $used"; sed 's/^/    /' <<<"$out"; fails=$((fails + 1))
fi
check "ab passes a failing command's failure on" 1 "round 1/1, variant v" "$g" ab --rounds 1 v -- false
check "run sets the packed environment" 0 "^$root/repo/python manifest/spec$" \
  "$g" run sh -c 'echo "$PYTHONPATH ${TILERUN_MANIFEST_DIR#"$PWD"/}"'

# one GPU, and tests that pass, fail and hang
printf '#!/bin/sh\necho "GPU 0: Fake (UUID: GPU-0)"\n' >"$root/bin/nvidia-smi"
printf '#!/bin/sh\nexit 0\n' >"$root/repo/.gpu/bin/probe_test"
printf '#!/bin/sh\necho "device guard broke"\nexit 3\n' >"$root/repo/.gpu/bin/device_guard_test"
printf '#!/bin/sh\nsleep 30\n' >"$root/repo/.gpu/bin/cuda_ops_test"
printf '#!/bin/sh\nexit 0\n' >"$root/repo/.gpu/bin/tilerun"
chmod +x "$root/repo/.gpu/bin/"*
check "test: a pass" 0 "\[1/1\] probe_test +PASS" env OUT="$root/out" "$g" test probe
check "test: a failure, with its log's end" 1 "device_guard_test +FAIL \(exit 3\).*" \
  env OUT="$root/out" "$g" test guard
check "test: the failing log shown" 1 "    device guard broke" env OUT="$root/out" "$g" test guard
check "test: a time limit" 1 "cuda_ops_test +TIMEOUT after 1 s" env OUT="$root/out" TEST_TIMEOUT=1 "$g" test cuda_ops
check "test: one GPU names the two-card tests not run" 1 "two_gpu_test and test_two_gpus.py are NOT run" \
  env OUT="$root/out" TEST_TIMEOUT=1 "$g" test probe guard
check "test: no test by that name" 2 "no GPU test's name holds: nothing" env OUT="$root/out" "$g" test nothing
check "test: a bad time limit" 2 "TEST_TIMEOUT is a number of seconds; got 'soon'" \
  env OUT="$root/out" TEST_TIMEOUT=soon "$g" test probe
if grep -q "probe_test" "$root/out/summary.txt" && grep -q "device_guard_test" "$root/out/summary.txt"; then
  echo "ok: the summary is kept in \$OUT"
else
  echo "FAIL: summary.txt:"; cat "$root/out/summary.txt"; fails=$((fails + 1))
fi

[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))

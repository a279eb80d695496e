#!/usr/bin/env bash
# run_fuzz.sh: runs a libFuzzer binary over its seed corpus for a bounded time (Bazel sh_test).
# Usage: run_fuzz.sh FUZZER SEED...
# The seeds are copied to a writable directory (runfiles are read-only; libFuzzer adds the inputs
# it finds there). Exits non-zero when libFuzzer does: a crash, a leak, undefined behaviour (the
# binary is built with -fno-sanitize-recover=all, so UBSan aborts), a timeout or running out of
# memory. The input that failed is kept in Bazel's undeclared outputs (test.outputs/).
# TILERUN_FUZZ_SECONDS (default 20) bounds the run; longer runs need a longer test timeout:
#   bazel test --test_env=TILERUN_FUZZ_SECONDS=600 --test_timeout=660 //manifest/fuzz/...
set -euo pipefail

fuzzer=$1
shift
seconds=${TILERUN_FUZZ_SECONDS:-20}
case $seconds in
  '' | *[!0-9]*) echo "run_fuzz.sh: TILERUN_FUZZ_SECONDS must be a number of seconds, got '$seconds'" >&2; exit 2 ;;
esac

work=$(mktemp -d "${TEST_TMPDIR:-${TMPDIR:-/tmp}}/fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
cp "$@" "$work/corpus/"
artifacts=${TEST_UNDECLARED_OUTPUTS_DIR:-$work}/

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "run_fuzz.sh: $(basename "$fuzzer") on $# seeds for ${seconds}s" >&2
"$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 -detect_leaks=1 \
  -print_final_stats=1 -artifact_prefix="$artifacts" "$work/corpus"

#!/usr/bin/env bash
# test.sh: the test command. Installs what is missing (Debian packages), then:
#   1. bazel test //...            every package's Catch2 tests (GPU tests only where a GPU is);
#   2. bazel test --config=asan    the same under AddressSanitizer and UBSan;
#   3. bazel test, CUDA hidden     proves the workspace builds and tests where no CUDA Toolkit is
#                                  (CUDA targets are then SKIPPED, never passed).
# Exits non-zero when any step fails. Extra arguments go to both `bazel test` runs.
set -euo pipefail
cd "$(dirname "$0")"
./tools/ensure-deps.sh

filters=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "tilerun: a GPU is visible: GPU tests run too" >&2
else
  filters=(--test_tag_filters=-gpu)
  gpu_tests=$(bazel query --noshow_progress 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null || true)
  if [ -n "$gpu_tests" ]; then
    echo "tilerun: no GPU here: these tests need one and are NOT run (run them on the GPU" >&2
    echo "machine, docs/testing-on-a-gpu.md):" >&2
    echo "$gpu_tests" | sed 's/^/  /' >&2
  fi
fi

echo "== 1/3 bazel test //..." >&2
bazel test --noshow_progress "${filters[@]}" "$@" //...
# The fuzz and valgrind tests ran in step 1; steps 2 and 3 leave them out (valgrind cannot run
# a sanitized binary, and the fuzzer has its own sanitizers).
no_fuzz=--test_tag_filters=-fuzz,-valgrind
[ "${#filters[@]}" -gt 0 ] && no_fuzz=--test_tag_filters=-gpu,-fuzz,-valgrind
echo "== 2/3 bazel test --config=asan //... (AddressSanitizer + UBSan)" >&2
bazel test --noshow_progress --config=asan "$no_fuzz" "$@" //...
echo "== 3/3 bazel test //... with CUDA hidden (TILERUN_CUDA_PATH=none)" >&2
bazel test --noshow_progress --repo_env=TILERUN_CUDA_PATH=none --test_tag_filters=-gpu,-fuzz,-valgrind //...
echo "tilerun: all test steps passed" >&2

#!/usr/bin/env bash
# run_valgrind_test.sh: the binding under valgrind (cpu, NumPy): 100 and then 10,000 rounds of
# calls (call_into, op(), the __dlpack__ route, an error) must leave the same bytes lost, so the
# calls leak nothing (what the interpreter itself keeps to its exit is the same in both runs).
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
export PYTHONPATH="${PWD}/python" PYTHONDONTWRITEBYTECODE=1 PYTHONMALLOC=malloc
export TILERUN_MANIFEST_DIR="${PWD}/manifest/spec" TILERUN_BACKEND_PATH="${PWD}/backends/cpu"
export OPENBLAS_NUM_THREADS=1
lost() {  # prints "definitely indirectly" lost bytes of a run of N rounds
  local log="${TEST_TMPDIR}/valgrind.$1.log"
  valgrind --leak-check=full --show-leak-kinds=definite,indirect --log-file="$log" \
    /usr/bin/python3 python/tests/calls_for_valgrind.py "$1" >&2
  local d i
  d=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d ,)
  i=$(sed -n 's/.*indirectly lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d ,)
  echo "${d:-0} ${i:-0}"
}
few=$(lost 100)
many=$(lost 10000)
echo "lost bytes (definitely, indirectly): 100 rounds: $few; 10000 rounds: $many" >&2
if [ "$few" != "$many" ]; then
  echo "FAIL: the calls leak: more is lost after 10000 rounds than after 100" >&2
  grep -B2 -A25 "definitely lost in" "${TEST_TMPDIR}/valgrind.10000.log" | head -120 >&2 || true
  exit 1
fi
echo "PASS: nothing lost grows with the calls" >&2

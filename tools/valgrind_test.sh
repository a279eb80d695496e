#!/usr/bin/env bash
# valgrind_test.sh: runs a test binary under valgrind's memcheck; fails on any memory error or
# definite/indirect leak. Used by the `valgrind`-tagged tests (never under --config=asan).
set -euo pipefail
binary="$1"
shift
exec valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect \
  --error-exitcode=9 "$binary" "$@"

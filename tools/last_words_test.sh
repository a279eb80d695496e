#!/usr/bin/env bash
# last_words_test.sh: a backend whose code ends the process is named by the tilerun command on the
# way out: exit(0) in its init gives status 70 (not a success), a crash in its init or in its
# detector ends as the crash would (a signal's status; a sanitizer's report and status under one),
# with the backend and what it was doing on stderr.
set -uo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
fail() { echo "last_words_test: $*" >&2; exit 1; }
lib="$PWD/tests/plugin_api/libending_plugin.so"
dir="${TEST_TMPDIR}/backends"
mkdir -p "$dir"
printf 'name: ending\nlibrary: %s\n' "$lib" > "$dir/ending.yaml"
export TILERUN_BACKEND_PATH="$dir" TILERUN_MANIFEST_DIR="$PWD/manifest/spec"

err=$(TR_ENDING_MODE=exit tools/tilerun targets 2>&1 >/dev/null); rc=$?
[ "$rc" = 70 ] || fail "exit(0) in init: status $rc, want 70 ($err)"
[ "$err" = "tilerun: backend 'ending' ($lib): its init ended the process (it called exit)" ] ||
  fail "exit(0) in init said: $err"

err=$(TR_ENDING_MODE=crash tools/tilerun targets 2>&1 >/dev/null); rc=$?
[ "$rc" != 0 ] && [ "$rc" != 70 ] || fail "a crash in init: status $rc, want the crash's ($err)"
echo "$err" | grep -qF "tilerun: backend 'ending' ($lib): its init crashed the process (SIGSEGV)" ||
  fail "a crash in init said: $err"

# the detector runs when a call settles its target: a run of one op on cpu asks it
err=$(TR_ENDING_MODE=detect tools/tilerun run --ops AddFwdOp --smallest --device cpu 2>&1 >/dev/null); rc=$?
[ "$rc" != 0 ] && [ "$rc" != 70 ] || fail "a crash in a detector: status $rc, want the crash's ($err)"
echo "$err" | grep -qF "tilerun: backend 'ending': the detector of target 'ending' crashed the process (SIGSEGV)" ||
  fail "a crash in a detector said: $err"

# an init that does not return for 12 s: named after 10 s, and the command goes on when it returns
err=$(TR_ENDING_MODE=hang timeout 60 tools/tilerun targets 2>&1 >/dev/null); rc=$?
[ "$rc" = 0 ] || fail "a slow init: status $rc ($err)"
echo "$err" | grep -qF "tilerun: backend 'ending' ($lib): its init has not returned for 10 s" ||
  fail "a slow init said: $err"

# the same command with a backend that behaves: no last words, its own status
err=$(TR_ENDING_MODE=none tools/tilerun targets 2>&1 >/dev/null); rc=$?
[ "$rc" = 0 ] || fail "a plain targets: status $rc ($err)"
echo "$err" | grep -q "ended the process\|crashed the process\|has not returned" && fail "last words where none were due: $err"
echo "last_words_test: passed"

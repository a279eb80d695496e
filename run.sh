#!/usr/bin/env bash
# run.sh: the main job. Installs what is missing (Debian packages), builds the `tilerun` command
# with Bazel and runs `tilerun run`; extra arguments are passed to it (try --help).
set -euo pipefail
cd "$(dirname "$0")"
./tools/ensure-deps.sh
echo "tilerun: building //tools:tilerun and the CPU backend (the first build takes a few minutes)" >&2
bazel build --noshow_progress -c opt //tools:tilerun //backends/cpu:installed
# The CPU backend is found like any plugin: its descriptor and library sit in bazel-bin.
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
export TILERUN_BACKEND_PATH="$bin/backends/cpu${TILERUN_BACKEND_PATH:+:$TILERUN_BACKEND_PATH}"
# the repository's manifest unless the arguments name one (an option is given once)
manifest=(--manifest manifest/spec)
for arg in "$@"; do [ "$arg" != --manifest ] || manifest=(); done
exec "$bin/tools/tilerun" run "${manifest[@]}" "$@"

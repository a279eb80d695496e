#!/usr/bin/env bash
# run.sh: the main job. Installs what is missing (Debian packages), builds the `tilerun` command
# with Bazel and runs `tilerun run`; extra arguments are passed to it (try --help).
set -euo pipefail
cd "$(dirname "$0")"
./tools/ensure-deps.sh
echo "tilerun: building //tools:tilerun (the first build takes a few minutes)" >&2
bazel build --noshow_progress //tools:tilerun
exec bazel-bin/tools/tilerun run --manifest manifest/spec "$@"

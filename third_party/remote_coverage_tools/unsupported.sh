#!/bin/sh
# unsupported.sh: stands in for Bazel's coverage tools, which are not available offline.
echo "tilerun: bazel coverage is not supported offline (remote_coverage_tools is a stand-in)" >&2
exit 1

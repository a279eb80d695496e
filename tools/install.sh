#!/usr/bin/env bash
# install.sh: builds tilerun (bazel build -c opt) and installs it into a prefix, /usr/local by
# default: the library (libtilerun.so.0), the public headers, a pkg-config file, the `tilerun`
# command, the CPU backend and the manifest (the layout: tools/install_files.sh). Run from
# anywhere in the repository; installs into /usr/local need root (or sudo).
set -euo pipefail
prefix=/usr/local
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix)
      if [ $# -lt 2 ]; then echo "install.sh: --prefix takes a DIR (see --help)" >&2; exit 2; fi
      prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    -h|--help)
      echo "usage: tools/install.sh [--prefix DIR]"
      echo "  builds tilerun with bazel -c opt and installs it into DIR (default /usr/local); then"
      echo "  cc app.c \$(pkg-config --cflags --libs tilerun) builds against it (PKG_CONFIG_PATH=DIR/lib/pkgconfig"
      echo "  where DIR is not on pkg-config's path); such programs find the manifest and backends with no environment variable."
      exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
# checked, made absolute (relative: to where it was run from) and writable before the build
prefix=$("$here/tools/install_files.sh" --check-prefix "$prefix") || exit $?
cd "$here"
./tools/ensure-deps.sh
bazel build -c opt //python:libtilerun.so //tools:tilerun //backends/cpu:installed
out=$(bazel info -c opt bazel-bin)
exec ./tools/install_files.sh --prefix "$prefix" --lib "$out/python/libtilerun.so" --headers include/tilerun \
  --tilerun "$out/tools/tilerun" --backend-dir "$out/backends/cpu" --manifest-dir manifest/spec

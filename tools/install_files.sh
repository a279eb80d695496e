#!/usr/bin/env bash
# install_files.sh: lays out a built tilerun under a prefix (what tools/install.sh runs after its
# build; the install test runs it on the test's own build):
#   PREFIX/lib/libtilerun.so.0.M.P, libtilerun.so.0 and libtilerun.so (links)
#   PREFIX/include/tilerun/*.h            the public headers (with version.h)
#   PREFIX/lib/pkgconfig/tilerun.pc       cc $(pkg-config --cflags --libs tilerun)
#   PREFIX/bin/tilerun                    the command
#   PREFIX/lib/tilerun/backends/          the CPU backend and its descriptor
#   PREFIX/share/tilerun/manifest/*.yaml  the manifest
# The installed library finds the manifest and the backends under its own prefix, so an
# installed tilerun needs no environment variable (TILERUN_MANIFEST_DIR and
# TILERUN_BACKEND_PATH still override).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/install_files.sh --prefix DIR --lib LIBTILERUN_SO --headers DIR --tilerun BIN
                              --backend-dir DIR --manifest-dir DIR [--version X.Y.Z]
Copies a built tilerun into DIR (see the comment at the top of this file for the layout).
EOF
}

# A prefix tilerun can be installed into: absolute or relative, and writable into tilerun.pc so
# that `cc $(pkg-config --cflags --libs tilerun)` works (the shell splits that output at spaces,
# and pkg-config reads '#' as a comment). Prints why not and returns 1.
check_prefix() {
  local p="$1" why=""
  if [ -z "$p" ]; then why="it is empty"
  elif [[ "$p" == -* ]]; then why="it begins with '-' (an option given where the folder was expected?)"
  elif [[ "$p" == "~"* ]]; then why="it begins with '~', which the shell did not expand here (write \$HOME/...)"
  elif [[ "$p" =~ [[:space:]] || "$p" == *[\#\"\'\\\$\`]* ]]; then
    why='it holds a space or one of these: # " '"'"' \ $ `, which tilerun.pc cannot carry through $(pkg-config ...)'
  fi
  if [ -n "$why" ]; then
    echo "install: --prefix '$p': $why" >&2
    return 1
  fi
}

# Sets `prefix` to the absolute folder to install into, made if missing; exits 2 for a prefix
# check_prefix refuses (as given, and made absolute: the folder this runs from may hold a space),
# 1 for one that cannot be written.
settle_prefix() {
  check_prefix "$1" || exit 2
  case "$1" in /*) prefix="$1" ;; *) prefix="$PWD/$1" ;; esac  # tilerun.pc needs it absolute
  check_prefix "$prefix" || exit 2
  if ! mkdir -p "$prefix" 2>/dev/null || [ ! -w "$prefix" ]; then
    echo "install: cannot write into '$prefix' (not a folder, or no permission: run as root, or choose --prefix)" >&2
    exit 1
  fi
}

prefix="" lib="" headers="" tilerun="" backend_dir="" manifest_dir="" version=""
if [ "${1:-}" = "--check-prefix" ]; then  # tools/install.sh asks before it builds: the prefix to use
  [ $# -eq 2 ] || { echo "install_files.sh: --check-prefix takes one DIR" >&2; exit 2; }
  settle_prefix "$2"
  echo "$prefix"
  exit 0
fi
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --lib) lib="$2"; shift 2 ;;
    --headers) headers="$2"; shift 2 ;;
    --tilerun) tilerun="$2"; shift 2 ;;
    --backend-dir) backend_dir="$2"; shift 2 ;;
    --manifest-dir) manifest_dir="$2"; shift 2 ;;
    --version) version="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install_files.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
for v in prefix lib headers tilerun backend_dir manifest_dir; do
  if [ -z "${!v}" ]; then
    echo "install_files.sh: --${v//_/-} is required" >&2
    usage >&2
    exit 2
  fi
done
settle_prefix "$prefix"
if [ -z "$version" ]; then
  version=$(sed -n 's/^#define TILERUN_VERSION "\(.*\)"$/\1/p' "$headers/version.h")
fi
major=${version%%.*}

echo "tilerun: installing $version into $prefix" >&2
install -d "$prefix/lib/pkgconfig" "$prefix/include/tilerun" "$prefix/bin" "$prefix/lib/tilerun/backends" \
  "$prefix/share/tilerun/manifest"
install -m 0755 "$lib" "$prefix/lib/libtilerun.so.$version"
ln -sf "libtilerun.so.$version" "$prefix/lib/libtilerun.so.$major"
ln -sf "libtilerun.so.$major" "$prefix/lib/libtilerun.so"
install -m 0644 "$headers"/*.h "$prefix/include/tilerun/"
install -m 0755 "$tilerun" "$prefix/bin/tilerun"
install -m 0644 "$backend_dir/cpu.yaml" "$prefix/lib/tilerun/backends/cpu.yaml"
install -m 0755 "$backend_dir/libtilerun_cpu.so" "$prefix/lib/tilerun/backends/libtilerun_cpu.so"
# the manifest folder is tilerun's: a file an earlier version installed and this one does not
# would declare its ops again
rm -f "$prefix/share/tilerun/manifest/"*.yaml
install -m 0644 "$manifest_dir"/*.yaml "$prefix/share/tilerun/manifest/"
# dlpack.h comes from Debian's libdlpack-dev (/usr/include); the rpath lets a program built
# against a prefix outside the loader's path run without LD_LIBRARY_PATH.
cat >"$prefix/lib/pkgconfig/tilerun.pc" <<EOF
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tilerun
Description: dispatches tensor ops declared in a YAML manifest to kernels
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltilerun -Wl,-rpath,\${libdir}
EOF
echo "tilerun: installed; build with: cc \$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs tilerun)" >&2

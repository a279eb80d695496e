#!/usr/bin/env bash
# install_test.sh: installs this build into a temporary prefix (tools/install_files.sh), then
# checks what a user of the install gets: the soname, only the public API exported, and a C
# program built outside the repository with pkg-config that runs an op on the installed CPU
# backend and manifest with no tilerun environment variable.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
root=$PWD
prefix="${TEST_TMPDIR}/prefix"
app="${TEST_TMPDIR}/app"
rm -rf "$prefix" "$app"
mkdir -p "$app"
tools/install_files.sh --prefix "$prefix" --lib python/libtilerun.so --headers include/tilerun \
  --tilerun tools/tilerun --backend-dir backends/cpu --manifest-dir manifest/spec
lib="$prefix/lib/libtilerun.so.0"
fail() { echo "install_test: $*" >&2; exit 1; }

# the soname carries the major version
readelf -d "$lib" | grep -q 'Library soname: \[libtilerun.so.0\]' || fail "no soname libtilerun.so.0: $(readelf -d "$lib" | grep SONAME)"
# only tr_ functions, none internal (tr__*): exactly the functions the public headers declare
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort)
stray=$(echo "$exported" | grep -v '^tr_' || true)
internal=$(echo "$exported" | grep '^tr__' || true)
[ -z "$stray" ] || fail "non-API symbols exported: $(echo $stray | head -c 400)"
[ -z "$internal" ] || fail "internal tr__ symbols exported: $(echo $internal | head -c 400)"
# the headers without their comments (the compiler's own removal: a name in a comment is no
# declaration), then each top-level line's tr_name( that is not static
declared=$(for h in "$prefix"/include/tilerun/*.h; do cc -fpreprocessed -dD -E -P -w "$h" || exit 1; done |
           grep -v '^static' | grep -v '^ ' | grep -v '^#' |
           grep -oE '\btr_[a-z0-9_]+\s*\(' | sed 's/\s*($//' | sort -u) || fail "cc could not read the headers"
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$missing" ] || fail "declared in the public headers but not exported: $(echo $missing)"
undeclared=$(comm -13 <(echo "$declared") <(echo "$exported"))
[ -z "$undeclared" ] || fail "exported but declared in no public header: $(echo $undeclared)"

# a program outside the repository, built with pkg-config alone
cp tools/install/app.c "$app/"
cd "$app"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs tilerun)
[ "$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --modversion tilerun)" = \
  "$(sed -n 's/^#define TILERUN_VERSION "\(.*\)"$/\1/p' "$prefix/include/tilerun/version.h")" ] || fail "pkg-config version"
cc -std=c11 -Wall -Werror app.c $flags -o app
# under --config=asan the library is sanitized: its runtimes load first, leak checking off
preload=$(ldd "$lib" | awk '/lib(asan|ubsan)\.so/ {print $3}' | paste -sd: -)
out=$(env -u TILERUN_MANIFEST_DIR -u TILERUN_BACKEND_PATH -u LD_LIBRARY_PATH ${preload:+LD_PRELOAD=$preload} \
      ASAN_OPTIONS=detect_leaks=0 ./app) || fail "the program failed: $out"
echo "$out"
echo "$out" | grep -q "on cpu: 11 22 33 44" || fail "unexpected output: $out"
# the installed command explains itself, and finds the installed manifest and backend
cd "$app"
env -u TILERUN_MANIFEST_DIR -u TILERUN_BACKEND_PATH "$prefix/bin/tilerun" --help >/dev/null || fail "tilerun --help"
ops=$(env -u TILERUN_MANIFEST_DIR -u TILERUN_BACKEND_PATH ASAN_OPTIONS=detect_leaks=0 "$prefix/bin/tilerun" ops) ||
  fail "tilerun ops: $ops"
echo "$ops" | head -1 | grep -q "manifest $prefix/share/tilerun/manifest" || fail "tilerun ops read another manifest: $(echo "$ops" | head -1)"
backends=$(env -u TILERUN_MANIFEST_DIR -u TILERUN_BACKEND_PATH ASAN_OPTIONS=detect_leaks=0 "$prefix/bin/tilerun" backends) ||
  fail "tilerun backends: $backends"
echo "$backends" | grep -q "cpu" || fail "tilerun backends did not find the installed CPU backend: $backends"
echo "install_test: passed ($(echo "$exported" | wc -l) exported functions)"

# a prefix tilerun.pc cannot carry through $(pkg-config ...), or that is no folder, is refused by name
cd "$root"
for bad in "" "-x" "~/x" "$TEST_TMPDIR/with space" "$TEST_TMPDIR/a#b"; do
  if msg=$(tools/install_files.sh --check-prefix "$bad" 2>&1); then fail "--check-prefix '$bad' passed"; fi
  echo "$msg" | grep -qF "install: --prefix '$bad': " || fail "--check-prefix '$bad' said: $msg"
done
tools/install_files.sh --check-prefix "$TEST_TMPDIR/fine" || fail "--check-prefix refused a plain folder"
: >"$TEST_TMPDIR/a-file"
if msg=$(tools/install_files.sh --prefix "$TEST_TMPDIR/a-file" --lib python/libtilerun.so --headers include/tilerun \
         --tilerun tools/tilerun --backend-dir backends/cpu --manifest-dir manifest/spec 2>&1); then
  fail "an install over a file succeeded"
fi
[ "$(echo "$msg" | grep -c "cannot write into '$TEST_TMPDIR/a-file'")" = 1 ] || fail "an install over a file said: $msg"
# installing again replaces the manifest: a file the new one does not have goes
cp "$prefix/share/tilerun/manifest/norm.yaml" "$prefix/share/tilerun/manifest/old_norm.yaml"
tools/install_files.sh --prefix "$prefix" --lib python/libtilerun.so --headers include/tilerun \
  --tilerun tools/tilerun --backend-dir backends/cpu --manifest-dir manifest/spec 2>/dev/null
[ ! -e "$prefix/share/tilerun/manifest/old_norm.yaml" ] || fail "a stale manifest file survived the install"
echo "install_test: prefix checks passed"

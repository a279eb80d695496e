#!/usr/bin/env bash
# gpu_sh_test.sh: tools/gpu.sh's arguments, its A/B alternation, its test runner and pack, on a
# fake .gpu/ folder, nvidia-smi, bazel and gpu-pack (no GPU, no Bazel needed).
# shellcheck disable=SC2001,SC2016  # sed over captured output; commands quoted for the child shell
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/gpu.sh
[ -f "$script" ] || { echo "no tools/gpu.sh beside this test" >&2; exit 1; }
fails=0
check() {  # check NAME EXPECTED_STATUS PATTERN COMMAND...: the status, and PATTERN in the output
  local name=$1 want=$2 pattern=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: exit $rc (want $want), output:"; sed 's/^/    /' <<<"$out"; fails=$((fails + 1))
  else
    echo "ok: $name"
  fi
}

root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
mkdir -p "$root/repo/tools" "$root/bin" "$root/out"
cp "$script" "$root/repo/tools/gpu.sh"
g="$root/repo/tools/gpu.sh"
printf '#!/bin/sh\n' >"$root/bin/nvidia-smi"  # lists no GPU
chmod +x "$root/bin/nvidia-smi"
export PATH="$root/bin:$PATH"

check "help" 0 "^Usage:" "$g" --help
check "no command" 2 "Usage:" "$g"
check "unknown command" 2 "unknown command 'frob'" "$g" frob
check "a COPT before any --variant" 2 "'-DX': expected --variant NAME COPT" "$g" pack -DX
check "a variant's name with a space" 2 "got 'a b'" "$g" pack --variant "a b" -DX
check "ab without --" 2 "usage: tools/gpu.sh ab" "$g" ab v true
check "ab with no rounds" 2 "--rounds takes a positive whole number; got '0'" "$g" ab --rounds 0 v -- true
check "ab with no .gpu" 2 "no .gpu/ here" "$g" ab v -- true
check "test with no GPU" 2 "no GPU is visible" "$g" test
check "run with no command" 2 "run takes a COMMAND" "$g" run

# a packed folder: a library and a variant's (empty files: nothing loads them here)
mkdir -p "$root/repo/.gpu/bin" "$root/repo/.gpu/lib" "$root/repo/.gpu/var/v"
: >"$root/repo/.gpu/lib/libtilerun.so"
: >"$root/repo/.gpu/var/v/libtilerun.so"
check "ab with an unknown variant" 2 "no variant 'w' in .gpu/var/" "$g" ab w -- true
out=$("$g" ab --rounds 2 v -- sh -c 'echo "used $TILERUN_LIBRARY"' 2>&1)
used=$(grep '^used ' <<<"$out" | sed "s|$root/repo/||" | tr '\n' ' ')
if [ "$used" = "used .gpu/lib/libtilerun.so used .gpu/var/v/libtilerun.so used .gpu/var/v/libtilerun.so used .gpu/lib/libtilerun.so " ]; then
  echo "ok: ab runs the packed library and the variant's, the order turned each round"
else
  echo "FAIL: ab ran: $used"; sed 's/^/    /' <<<"$out"; fails=$((fails + 1))
fi
check "ab passes a failing command's failure on" 1 "round 1/1, variant v" "$g" ab --rounds 1 v -- false
check "run sets the packed environment" 0 \
  "^python manifest/spec .gpu/lib/libtilerun.so .gpu/lib/_ext.so .gpu/cpuback .gpu/lib(:|$)" \
  "$g" run sh -c 'r="$PWD/"; echo "${PYTHONPATH#"$r"} ${TILERUN_MANIFEST_DIR#"$r"} ${TILERUN_LIBRARY#"$r"}" \
    "${TILERUN_EXTENSION#"$r"} ${TILERUN_BACKEND_PATH#"$r"} ${LD_LIBRARY_PATH#"$r"}"'
check "run: the packed library even where TILERUN_LIBRARY was set" 0 "^$root/repo/.gpu/lib/libtilerun.so$" \
  env TILERUN_LIBRARY=/elsewhere/libtilerun.so "$g" run sh -c 'echo "$TILERUN_LIBRARY"'

# one GPU, and tests that pass, fail and hang
printf '#!/bin/sh\necho "GPU 0: Fake (UUID: GPU-0)"\n' >"$root/bin/nvidia-smi"
printf '#!/bin/sh\nexit 0\n' >"$root/repo/.gpu/bin/probe_test"
printf '#!/bin/sh\necho "device guard broke"\nexit 3\n' >"$root/repo/.gpu/bin/device_guard_test"
printf '#!/bin/sh\nsleep 30\n' >"$root/repo/.gpu/bin/cuda_ops_test"
printf '#!/bin/sh\nexit 0\n' >"$root/repo/.gpu/bin/tilerun"
chmod +x "$root/repo/.gpu/bin/"*
check "test: a pass" 0 "\[1/1\] probe_test +PASS" env OUT="$root/out" "$g" test probe
check "test: a failure" 1 "device_guard_test +FAIL \(exit 3\)" env OUT="$root/out" "$g" test guard
check "test: the failing test's log's end shown" 1 "^    device guard broke$" env OUT="$root/out" "$g" test guard
check "test: a pattern matches file names, not paths" 1 "^\[1/1\] device_guard_test" env OUT="$root/out" "$g" test guard
check "test: no test's path is a pattern's match" 2 "no GPU test's name holds: .gpu" env OUT="$root/out" "$g" test .gpu
check "test: a time limit" 1 "cuda_ops_test +TIMEOUT after 1 s" env OUT="$root/out" TEST_TIMEOUT=1 "$g" test cuda_ops
check "test: one GPU names the two-card tests not run" 1 "two_gpu_test and test_two_gpus.py are NOT run" \
  env OUT="$root/out" TEST_TIMEOUT=1 "$g" test probe guard
check "test: no test by that name" 2 "no GPU test's name holds: nothing" env OUT="$root/out" "$g" test nothing
check "test: logs that cannot be written" 2 "cannot make $root/bin/nvidia-smi/logs" \
  env OUT="$root/bin/nvidia-smi/logs" "$g" test probe
check "test: a bad time limit" 2 "TEST_TIMEOUT is a positive number of seconds; got 'soon'" \
  env OUT="$root/out" TEST_TIMEOUT=soon "$g" test probe
check "test: no time limit is no time limit" 2 "TEST_TIMEOUT is a positive number of seconds; got '0'" \
  env OUT="$root/out" TEST_TIMEOUT=0 "$g" test probe
env OUT="$root/out" "$g" test probe guard >/dev/null 2>&1
if grep -q "\[1/2\] probe_test .*PASS" "$root/out/summary.txt" && grep -q "\[2/2\] device_guard_test .*FAIL" "$root/out/summary.txt"; then
  echo "ok: the summary is kept in \$OUT, a line a test"
else
  echo "FAIL: summary.txt:"; cat "$root/out/summary.txt"; fails=$((fails + 1))
fi
# the Python tests with a variant's library; an unknown variant
mkdir -p "$root/repo/python/tests"
printf 'import os, sys\nprint(os.environ["TILERUN_LIBRARY"])\nsys.exit(0)\n' >"$root/repo/python/tests/test_gemm_gpu.py"
check "test --variant: the Python tests load the variant's library" 0 "^\[1/1\] test_gemm_gpu.py +PASS" \
  env OUT="$root/out" "$g" test --variant v gemm
seen=$(tar xzOf "$root/out/test-logs.tgz" ./test_gemm_gpu.py.log 2>&1)
if [ "$seen" = "$root/repo/.gpu/var/v/libtilerun.so" ]; then
  echo "ok: test --variant sets TILERUN_LIBRARY (the log read from \$OUT/test-logs.tgz)"
else
  echo "FAIL: the test saw: $seen"; fails=$((fails + 1))
fi
# $OUT holds the summary and one archive, whatever the number of tests (the device machine
# brings back at most 8 files)
env OUT="$root/out2" "$g" test probe guard cuda_ops >/dev/null 2>&1
if [ "$(cd "$root/out2" && ls | tr '\n' ' ')" = "summary.txt test-logs.tgz " ] &&
   [ "$(tar tzf "$root/out2/test-logs.tgz" | grep -c '\.log$')" = 3 ]; then
  echo "ok: three tests leave two files in \$OUT, their three logs in the archive"
else
  echo "FAIL: \$OUT holds: $(ls "$root/out2"); the archive: $(tar tzf "$root/out2/test-logs.tgz" 2>&1 | tr '\n' ' ')"
  fails=$((fails + 1))
fi
check "test --variant of an unknown variant" 2 "no variant 'w' in .gpu/var/" env OUT="$root/out" "$g" test --variant w gemm
# two GPUs: the two-card tests are chosen too
printf '#!/bin/sh\necho "GPU 0: Fake (UUID: GPU-0)"\necho "GPU 1: Fake (UUID: GPU-1)"\n' >"$root/bin/nvidia-smi"
printf '#!/bin/sh\nexit 0\n' >"$root/repo/.gpu/bin/two_gpu_test"
chmod +x "$root/repo/.gpu/bin/two_gpu_test"
check "test: two GPUs run the two-card tests" 0 "^\[1/1\] two_gpu_test +PASS" env OUT="$root/out" "$g" test two_gpu_test

# pack, with a fake bazel (each build's COPTs written into the library it makes) and a fake gpu-pack
mkdir -p "$root/shared/tools"
cat >"$root/bin/bazel" <<'FAKE'
#!/bin/sh
echo "$*" >>"$FAKE_ROOT/bazel.log"
bb="$FAKE_ROOT/bb"
case "$1" in
  build)
    copts=""
    for a in "$@"; do case "$a" in --copt=*) copts="$copts ${a#--copt=}" ;; esac; done
    case "$copts" in *-DBREAK*) exit 1 ;; esac
    mkdir -p "$bb/python" "$bb/backends/cpu"
    echo "built with:$copts" >"$bb/python/libtilerun.so"
    : >"$bb/backends/cpu/cpu.yaml"; : >"$bb/backends/cpu/libtilerun_cpu.so" ;;
  info) echo "$bb" ;;
esac
FAKE
cat >"$root/shared/tools/gpu-pack" <<'FAKE'
#!/bin/sh
echo "$*" >"$FAKE_ROOT/gpu-pack.args"
[ -z "${FAKE_GPU_PACK_FAILS:-}" ] || exit 1
mkdir -p .gpu/bin .gpu/lib && echo blas >.gpu/lib/libopenblas.so.0
FAKE
chmod +x "$root/bin/bazel" "$root/shared/tools/gpu-pack"
export FAKE_ROOT=$root
rm -rf "$root/repo/.gpu"
check "pack: a variant named twice" 2 "variant 'a' is named twice" "$g" pack --variant a -DX=1 --variant a -DY=1
check "pack: a variant with no COPT" 2 "variant 'a' has no COPT" "$g" pack --variant a
check "pack: a COPT with a space" 2 "a COPT holds no space; got '-DX=1 2'" "$g" pack --variant a "-DX=1 2"
check "pack: a variant that fails to build" 2 "variant bad failed to build" "$g" pack --variant bad -DBREAK
check "pack: gpu-pack failing" 2 "gpu-pack failed" env FAKE_GPU_PACK_FAILS=1 "$g" pack
check "pack: two variants" 0 "tools/gpu.sh: .gpu holds" "$g" pack --variant c12 -DA=1 -DB=2 --variant deep -DC=3
if [ "$(cat "$root/repo/.gpu/var/c12/libtilerun.so")" = "built with: -DA=1 -DB=2" ] &&
   [ "$(cat "$root/repo/.gpu/var/deep/libtilerun.so")" = "built with: -DC=3" ] &&
   [ -f "$root/repo/.gpu/lib/libopenblas.so.0.xz" ] && [ ! -f "$root/repo/.gpu/lib/libopenblas.so.0" ] &&
   grep -q "$root/bb/python/libtilerun.so" "$root/gpu-pack.args" &&
   [ "$(grep -n -- '^build -c opt //kernels:probe_test .*//tools:tilerun' "$root/bazel.log" | tail -n 1 | cut -d: -f1)" = \
     "$(($(grep -n -- '^info -c opt --copt=-DC=3' "$root/bazel.log" | cut -d: -f1) + 1))" ]; then
  echo "ok: pack builds each variant with its own COPTs, then the packed build, and compresses OpenBLAS"
else
  echo "FAIL: pack made: $(cat "$root/repo/.gpu/var/c12/libtilerun.so" "$root/repo/.gpu/var/deep/libtilerun.so" 2>&1)"
  ls -R "$root/repo/.gpu"; cat "$root/bazel.log"; fails=$((fails + 1))
fi

[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))

#!/usr/bin/env bash
# gpu.sh: one command for a visit to the GPU machine: pack the GPU programs here, run the GPU tests
# and A/B benchmarks there (docs/testing-on-a-gpu.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() {
  cat <<'EOF'
Usage:
  tools/gpu.sh pack [--variant NAME COPT...]...   (here, with Bazel)
      Builds the GPU tests, benchmarks, the binding and the CPU backend with -c opt and packs them
      into .gpu/ (../shared/tools/gpu-pack), the CPU backend's OpenBLAS compressed so the folder
      travels. Each --variant builds //python:libtilerun.so again with its COPTs (macros on the
      host side, e.g. -DTR_GQA_CLUSTER_MAX=12) into .gpu/var/NAME/libtilerun.so, for `ab`. A
      variant's library serves what loads libtilerun.so (the Python binding: its tests and
      benchmarks, with TILERUN_LIBRARY set to it), not the C test programs.
  tools/gpu.sh test [PATTERN...]                  (there, from the repository root)
      Runs the GPU tests (those whose name holds a PATTERN, or all), each under a time limit
      (TEST_TIMEOUT seconds, default 300), printing a line per test as it ends and a summary;
      exits 1 if any failed or ran out of time. Logs go to $OUT (where set) or /tmp/tilerun-gpu.
  tools/gpu.sh ab [--rounds N] VARIANT -- COMMAND...   (there)
      Runs COMMAND N times (default 2) with the packed library, alternating with
      .gpu/var/VARIANT/libtilerun.so, each run headed by the library it used: both builds side by
      side in one visit, as the machines drift between visits.
  tools/gpu.sh run COMMAND...                     (there)
      Runs COMMAND with the environment the packed programs need.
EOF
}

die() { echo "tools/gpu.sh: $*" >&2; exit 2; }

opt_targets=(//kernels:probe_test //runtime:device_guard_test //tests:cuda_ops_test //tests:pool_scope_test
             //tests:inspect_gpu_test //tests:two_gpu_test //runtime:cuda_call_bench //runtime:gemm_call_bench
             //runtime:alloc_pair_bench //python:tilerun //tools:tilerun //backends/cpu:installed
             //components/launch:launch_cuda_test)

pack() {
  local names=() copts=() cur=-1
  while [ $# -gt 0 ]; do
    case "$1" in
      --variant)
        [ $# -ge 2 ] || die "--variant takes a NAME, then the COPTs"
        [[ "$2" =~ ^[A-Za-z0-9_.-]+$ ]] || die "a variant's NAME is letters, digits, '.', '_' and '-'; got '$2'"
        names+=("$2"); copts+=(""); cur=$((cur + 1)); shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) [ "$cur" -ge 0 ] || die "'$1': expected --variant NAME COPT..."
         copts[cur]="${copts[cur]} --copt=$1"; shift ;;
    esac
  done
  command -v bazel >/dev/null || die "bazel is not installed here (./test.sh installs it)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for i in "${!names[@]}"; do  # the variants first: the default build is the one left in bazel-bin
    echo "== variant ${names[$i]}:${copts[$i]}" >&2
    # shellcheck disable=SC2086
    bazel build -c opt ${copts[$i]} //python:libtilerun.so || die "variant ${names[$i]} failed to build"
    mkdir -p "$tmp/${names[$i]}"
    # shellcheck disable=SC2086
    cp -L "$(bazel info -c opt ${copts[$i]} bazel-bin 2>/dev/null)/python/libtilerun.so" "$tmp/${names[$i]}/"
  done
  echo "== the packed build" >&2
  bazel build -c opt "${opt_targets[@]}" || die "the build failed"
  local b; b=$(bazel info -c opt bazel-bin 2>/dev/null)
  rm -rf "$tmp/cpuback"; mkdir -p "$tmp/cpuback"
  cp -L "$b"/backends/cpu/{cpu.yaml,libtilerun_cpu.so} "$tmp/cpuback/"
  ../shared/tools/gpu-pack "$b"/kernels/probe_test "$b"/runtime/device_guard_test "$b"/tests/cuda_ops_test \
      "$b"/tests/pool_scope_test "$b"/tests/inspect_gpu_test "$b"/tests/two_gpu_test "$b"/runtime/cuda_call_bench \
      "$b"/runtime/gemm_call_bench "$b"/runtime/alloc_pair_bench "$b"/tools/tilerun "$b"/python/libtilerun.so \
      "$b"/python/tilerun/_ext.so "$b"/components/launch/launch_cuda_test "$tmp/cpuback" || die "gpu-pack failed"
  chmod u+w .gpu/lib
  [ -f .gpu/lib/libopenblas.so.0 ] && xz -T0 .gpu/lib/libopenblas.so.0
  for n in "${names[@]}"; do mkdir -p .gpu/var && cp -r "$tmp/$n" .gpu/var/; done
  du -sh .gpu | awk '{print "tools/gpu.sh: .gpu holds " $1 "; pass carry [\".gpu\"] and run tools/gpu.sh there"}'
}

environment() {
  [ -d .gpu/bin ] || die "no .gpu/ here: run 'tools/gpu.sh pack' on the build machine and carry .gpu"
  # unpacked where it runs only: here, unpacked, the folder would be too large to travel
  if [ -f .gpu/lib/libopenblas.so.0.xz ] && [ "$(gpus)" -ge 1 ]; then xz -df .gpu/lib/libopenblas.so.0.xz; fi
  export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TILERUN_LIBRARY=${TILERUN_LIBRARY:-$PWD/.gpu/lib/libtilerun.so} TILERUN_EXTENSION=$PWD/.gpu/lib/_ext.so
  export TILERUN_MANIFEST_DIR=$PWD/manifest/spec PYTHONPATH=$PWD/python TILERUN_BACKEND_PATH=$PWD/.gpu/cpuback
  export PYTHONUNBUFFERED=1
}

gpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true; }

test_cmd() {
  local logs=${OUT:-/tmp/tilerun-gpu} limit=${TEST_TIMEOUT:-300}
  [[ "$limit" =~ ^[0-9]+$ ]] || die "TEST_TIMEOUT is a number of seconds; got '$limit'"
  local n; n=$(gpus)
  [ "$n" -ge 1 ] || die "no GPU is visible here (nvidia-smi lists none)"
  environment
  mkdir -p "$logs"
  cp .gpu/bin/tilerun tools/tilerun  # launch_cuda_test starts tools/tilerun serve launch
  local tests=(".gpu/bin/probe_test" ".gpu/bin/device_guard_test" ".gpu/bin/cuda_ops_test"
               ".gpu/bin/pool_scope_test" ".gpu/bin/inspect_gpu_test" ".gpu/bin/launch_cuda_test"
               "python3 python/tests/test_ops_gpu.py" "python3 python/tests/test_gemm_gpu.py"
               "python3 python/tests/test_torch_gpu.py" "python3 python/tests/test_rope_gpu.py"
               "python3 python/tests/test_gqa_decode_gpu.py" "python3 python/tests/test_gqa_prefill_gpu.py")
  if [ "$n" -ge 2 ]; then
    tests+=(".gpu/bin/two_gpu_test" "python3 python/tests/test_two_gpus.py")
  else
    echo "tools/gpu.sh: one GPU: two_gpu_test and test_two_gpus.py are NOT run (they need two)" >&2
  fi
  local chosen=()
  for t in "${tests[@]}"; do
    if [ $# -eq 0 ]; then chosen+=("$t"); continue; fi
    for p in "$@"; do [[ "$t" == *"$p"* ]] && { chosen+=("$t"); break; }; done
  done
  [ "${#chosen[@]}" -gt 0 ] || die "no GPU test's name holds: $*"
  local failed=0 i=0 summary=""
  for t in "${chosen[@]}"; do
    i=$((i + 1))
    local name; name=$(basename "${t##* }")
    local start=$SECONDS rc
    # shellcheck disable=SC2086  # a test is a command line: split into its words
    timeout "$limit" $t >"$logs/$name.log" 2>&1
    rc=$?
    local verdict=PASS
    [ "$rc" -eq 124 ] && verdict="TIMEOUT after ${limit} s"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && verdict="FAIL (exit $rc)"
    [ "$verdict" = PASS ] || failed=1
    local line; line=$(printf '[%d/%d] %-28s %s (%d s)' "$i" "${#chosen[@]}" "$name" "$verdict" $((SECONDS - start)))
    echo "$line"
    summary+="$line"$'\n'
    [ "$verdict" = PASS ] || tail -n 15 "$logs/$name.log" | sed 's/^/    /'
  done
  printf '%s' "$summary" >"$logs/summary.txt"
  [ "$failed" -eq 0 ] && echo "tools/gpu.sh: every GPU test passed (logs in $logs)" \
                      || echo "tools/gpu.sh: some GPU tests FAILED (logs in $logs)"
  return "$failed"
}

ab() {
  local rounds=2
  if [ "${1:-}" = --rounds ]; then
    [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "--rounds takes a positive whole number; got '${2:-}'"
    rounds=$2; shift 2
  fi
  if [ $# -lt 3 ] || [ "$2" != -- ]; then die "usage: tools/gpu.sh ab [--rounds N] VARIANT -- COMMAND..."; fi
  local var=$1; shift 2
  environment
  local base=$TILERUN_LIBRARY other=$PWD/.gpu/var/$var/libtilerun.so
  [ -f "$other" ] || die "no variant '$var' in .gpu/var/ (tools/gpu.sh pack --variant $var COPT...)"
  local status=0
  for ((r = 1; r <= rounds; r++)); do
    for lib in "$base" "$other"; do
      local label=packed; [ "$lib" = "$other" ] && label="variant $var"
      echo "== round $r/$rounds, $label ($lib)"
      TILERUN_LIBRARY=$lib "$@" || status=1
    done
  done
  return "$status"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  test) shift; test_cmd "$@" ;;
  ab) shift; ab "$@" ;;
  run) shift; [ $# -ge 1 ] || die "run takes a COMMAND"; environment; exec "$@" ;;
  -h|--help|help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "tools/gpu.sh: unknown command '$1'" >&2; usage >&2; exit 2 ;;
esac

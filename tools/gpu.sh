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
      travels. Each --variant builds //python:libtilerun.so again with its COPTs (host-side
      macros without spaces, e.g. -DTR_GQA_CLUSTER_MAX=12; a minute or two each, as every C file
      is compiled again) into .gpu/var/NAME/libtilerun.so. A variant's library serves what loads
      libtilerun.so (the Python binding: its tests and benchmarks), not the C test programs.
  tools/gpu.sh test [--variant NAME] [PATTERN...]  (there, from the repository root)
      Runs the GPU tests (those whose file name holds a PATTERN, or all), each under a time limit
      (TEST_TIMEOUT seconds, default 360; killed 15 s after), printing a line per test as it ends
      (also appended to summary.txt) and the end of a failing test's log; exits 1 if any failed or
      ran out of time. summary.txt and test-logs.tgz (every log, as the device machine brings
      back at most 8 files) go to $OUT (where set) or /tmp/tilerun-gpu. --variant: the Python
      tests load .gpu/var/NAME/libtilerun.so.
  tools/gpu.sh ab [--rounds N] VARIANT -- COMMAND...   (there)
      Runs COMMAND 2N times (N default 2): with the packed library and with
      .gpu/var/VARIANT/libtilerun.so, in the order packed, variant in odd rounds and variant,
      packed in even ones, each run headed by the library it used: both builds side by side in
      one visit, as the machines drift between visits.
  tools/gpu.sh run COMMAND...                     (there)
      Runs COMMAND with the environment the packed programs need (the packed library).
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
        for n in "${names[@]}"; do [ "$n" != "$2" ] || die "variant '$2' is named twice"; done
        names+=("$2"); copts+=(""); cur=$((cur + 1)); shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) [ "$cur" -ge 0 ] || die "'$1': expected --variant NAME COPT..."
         [[ "$1" != *[[:space:]]* ]] || die "a COPT holds no space; got '$1'"
         copts[cur]="${copts[cur]} --copt=$1"; shift ;;
    esac
  done
  for i in "${!names[@]}"; do [ -n "${copts[$i]}" ] || die "variant '${names[$i]}' has no COPT"; done
  command -v bazel >/dev/null || die "bazel is not installed here (./test.sh installs it)"
  tmp=$(mktemp -d) || die "no temporary folder"
  trap 'rm -rf "$tmp"' EXIT
  for i in "${!names[@]}"; do  # the variants first: the default build is the one left in bazel-bin
    echo "== variant ${names[$i]}:${copts[$i]}" >&2
    # shellcheck disable=SC2086  # the COPTs, one word each
    bazel build -c opt ${copts[$i]} //python:libtilerun.so || die "variant ${names[$i]} failed to build"
    local vb
    # shellcheck disable=SC2086
    vb=$(bazel info -c opt ${copts[$i]} bazel-bin 2>/dev/null) || die "bazel info failed for variant ${names[$i]}"
    mkdir -p "$tmp/${names[$i]}" || die "no temporary folder"
    cp -L "$vb/python/libtilerun.so" "$tmp/${names[$i]}/" || die "variant ${names[$i]}: no $vb/python/libtilerun.so"
  done
  echo "== the packed build" >&2
  bazel build -c opt "${opt_targets[@]}" || die "the build failed"
  local b; b=$(bazel info -c opt bazel-bin 2>/dev/null) || die "bazel info failed"
  mkdir -p "$tmp/cpuback" || die "no temporary folder"
  cp -L "$b"/backends/cpu/{cpu.yaml,libtilerun_cpu.so} "$tmp/cpuback/" || die "no CPU backend in $b/backends/cpu"
  ../shared/tools/gpu-pack "$b"/kernels/probe_test "$b"/runtime/device_guard_test "$b"/tests/cuda_ops_test \
      "$b"/tests/pool_scope_test "$b"/tests/inspect_gpu_test "$b"/tests/two_gpu_test "$b"/runtime/cuda_call_bench \
      "$b"/runtime/gemm_call_bench "$b"/runtime/alloc_pair_bench "$b"/tools/tilerun "$b"/python/libtilerun.so \
      "$b"/python/tilerun/_ext.so "$b"/components/launch/launch_cuda_test "$tmp/cpuback" || die "gpu-pack failed"
  chmod u+w .gpu/lib || die "cannot write .gpu/lib"
  if [ -f .gpu/lib/libopenblas.so.0 ]; then xz -T0 .gpu/lib/libopenblas.so.0 || die "xz failed on OpenBLAS"; fi
  for n in "${names[@]}"; do
    mkdir -p .gpu/var || die "cannot make .gpu/var"
    cp -r "$tmp/$n" .gpu/var/ || die "cannot copy variant $n into .gpu/var"
  done
  du -sh .gpu | awk '{print "tools/gpu.sh: .gpu holds " $1 "; pass carry [\".gpu\"] and run tools/gpu.sh there"}'
}

gpus() { nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true; }

# The packed programs' environment, the library given (default: the packed one).
environment() {
  [ -d .gpu/bin ] || die "no .gpu/ here: run 'tools/gpu.sh pack' on the build machine and carry .gpu"
  # unpacked where it runs only: here, unpacked, the folder would be too large to travel
  if [ -f .gpu/lib/libopenblas.so.0.xz ] && [ "$(gpus)" -ge 1 ]; then xz -df .gpu/lib/libopenblas.so.0.xz; fi
  export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export TILERUN_LIBRARY=${1:-$PWD/.gpu/lib/libtilerun.so} TILERUN_EXTENSION=$PWD/.gpu/lib/_ext.so
  export TILERUN_MANIFEST_DIR=$PWD/manifest/spec PYTHONPATH=$PWD/python TILERUN_BACKEND_PATH=$PWD/.gpu/cpuback
  export PYTHONUNBUFFERED=1
}

variant_lib() {  # variant_lib NAME: its library's path, or die
  local lib=$PWD/.gpu/var/$1/libtilerun.so
  [ -f "$lib" ] || die "no variant '$1' in .gpu/var/ (tools/gpu.sh pack --variant $1 COPT...)"
  echo "$lib"
}

test_cmd() {
  # summary.txt and test-logs.tgz (every test's log) in $OUT, or /tmp/tilerun-gpu: the device
  # machine brings back at most 8 files of $OUT, so the logs travel as one archive, remade as each
  # test ends (a run cut short keeps what ended); the logs themselves stay in the folder `work`
  local logs=${OUT:-/tmp/tilerun-gpu} limit=${TEST_TIMEOUT:-360} lib="" work
  [[ "$limit" =~ ^[1-9][0-9]*$ ]] || die "TEST_TIMEOUT is a positive number of seconds; got '$limit'"
  if [ "${1:-}" = --variant ]; then
    [ $# -ge 2 ] || die "--variant takes a NAME"
    lib=$(variant_lib "$2") || exit 2
    shift 2
  fi
  local n; n=$(gpus)
  [ "$n" -ge 1 ] || die "no GPU is visible here (nvidia-smi lists none)"
  environment "$lib"
  mkdir -p "$logs" || die "cannot make $logs"
  : >"$logs/summary.txt" || die "cannot write the logs to $logs"
  work=$(mktemp -d) || die "no temporary folder for the logs"
  cp .gpu/bin/tilerun tools/tilerun  # launch_cuda_test starts tools/tilerun serve launch
  local tests=(".gpu/bin/probe_test" ".gpu/bin/device_guard_test" ".gpu/bin/cuda_ops_test"
               ".gpu/bin/pool_scope_test" ".gpu/bin/inspect_gpu_test" ".gpu/bin/launch_cuda_test"
               "python3 python/tests/test_ops_gpu.py" "python3 python/tests/test_gemm_gpu.py"
               "python3 python/tests/test_torch_gpu.py" "python3 python/tests/test_rope_gpu.py"
               "python3 python/tests/test_gqa_decode_gpu.py" "python3 python/tests/test_gqa_prefill_gpu.py")
  if [ "$n" -ge 2 ]; then
    tests+=(".gpu/bin/two_gpu_test" "python3 python/tests/test_two_gpus.py")
  else
    echo "tools/gpu.sh: one GPU: two_gpu_test and test_two_gpus.py are NOT run (they need two)" | tee -a "$logs/summary.txt"
  fi
  local chosen=()
  for t in "${tests[@]}"; do
    local name=${t##*/}  # the file name, a program's or a script's
    if [ $# -eq 0 ]; then chosen+=("$t"); continue; fi
    for p in "$@"; do [[ "$name" == *"$p"* ]] && { chosen+=("$t"); break; }; done
  done
  [ "${#chosen[@]}" -gt 0 ] || die "no GPU test's name holds: $*"
  local failed=0 i=0
  for t in "${chosen[@]}"; do
    i=$((i + 1))
    local name=${t##*/}  # the file name, a program's or a script's
    local start=$SECONDS rc
    # shellcheck disable=SC2086  # a test is a command line: split into its words
    timeout -k 15 "$limit" $t >"$work/$name.log" 2>&1
    rc=$?
    local verdict=PASS
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then verdict="TIMEOUT after ${limit} s"
    elif [ "$rc" -ne 0 ]; then verdict="FAIL (exit $rc)"; fi
    [ "$verdict" = PASS ] || failed=1
    local line; line=$(printf '[%d/%d] %-28s %s (%d s)' "$i" "${#chosen[@]}" "$name" "$verdict" $((SECONDS - start)))
    echo "$line" | tee -a "$logs/summary.txt"
    [ "$verdict" = PASS ] || tail -n 15 "$work/$name.log" | sed 's/^/    /'
    tar czf "$logs/test-logs.tgz" -C "$work" . || echo "tools/gpu.sh: could not archive the logs into $logs" >&2
  done
  if [ "$failed" -eq 0 ]; then
    echo "tools/gpu.sh: every GPU test chosen passed (logs in $logs/test-logs.tgz and $work)"
  else
    echo "tools/gpu.sh: some GPU tests FAILED (logs in $logs/test-logs.tgz and $work)"
  fi
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
  local base=$TILERUN_LIBRARY other
  other=$(variant_lib "$var") || exit 2
  local status=0
  for ((r = 1; r <= rounds; r++)); do
    local order=("$base" "$other")
    [ $((r % 2)) -eq 0 ] && order=("$other" "$base")
    for lib in "${order[@]}"; do
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

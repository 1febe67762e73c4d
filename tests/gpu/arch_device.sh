#!/usr/bin/env bash
# The CUDA backend's Ampere and Ada paths, checked on the device tool's Hopper (docs/gpu.md,
# "GPUs"). Two payloads staged by tests/gpu/stage_device.sh beside this script:
#   .device/arch/h: the default build (CMAKE_CUDA_ARCHITECTURES "80-real;90": the Hopper runs the
#                   sm_90 code): the tests, unchanged paths;
#   .device/arch/a: a build of sm_80 PTX only (80-virtual), which the driver compiles for the
#                   Hopper when it loads it: the code an A100 or an L4 runs (no clusters, no
#                   programmatic dependent launch), run three times: with the Hopper's shared
#                   memory, an A100's (WAAV_GPU_MAX_SHARED_BYTES=166912) and an Ada part's
#                   (101376), which the plans and the prepared step obey.
# Each run: the whole-model tests (the engine's graphs, the prepared step against op by op, the
# absorbed cross-attention), the persistent step's parity, and the cases of cuda_backend_test
# named by ARCH_FILTER_<RUN> (h, A, CAPPED: the two capped runs; default every case) within
# ARCH_BACKEND_TIMEOUT (default 240 s). ARCH_RUNS: which runs (default "h a a100 ada");
# ARCH_TESTS: the whole-model test binaries (default the four above). Then
# (unless ARCH_NO_BENCH) whisper_gpu_bench's engine step at 1 and 8 rows of both builds (the
# sm_80 code's step on a Hopper: a figure of that code, not of an A100). Results under $OUT
# (summary.txt last).
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/waav-arch-out}
mkdir -p "$out"
backend_timeout=${ARCH_BACKEND_TIMEOUT:-240}
runs=${ARCH_RUNS:-"h a a100 ada"}
# The JIT cache must hold the sm_80 PTX's compiled kernels across the three runs.
export CUDA_CACHE_MAXSIZE=4294967296
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || true)
if [ -z "$cublas" ]; then
  cublas=$(python3 -c 'import nvidia.cublas, glob, os; print(glob.glob(os.path.join(list(nvidia.cublas.__path__)[0], "lib", "libcublas.so.*"))[0])' 2>/dev/null || true)
fi
for payload in h a; do
  rm -rf "/tmp/waav-arch-$payload" && mkdir -p "/tmp/waav-arch-$payload" &&
    tar -C "/tmp/waav-arch-$payload" -xJf "$scripts/$payload/payload.tar.xz" || exit 1
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/device.txt" 2>&1
: > "$out/summary.txt"

run_one() {  # name payload shared_cap filter
  local name=$1 here=/tmp/waav-arch-$2 cap=$3 filter=$4
  local env=(env "LD_LIBRARY_PATH=$here/lib${cublas:+:$(dirname "$cublas")}")
  if [ -n "$cap" ]; then env+=("WAAV_GPU_MAX_SHARED_BYTES=$cap"); fi
  local log="$out/$name.log"
  : > "$log"
  for test in ${ARCH_TESTS:-whisper_graph_cuda_test whisper_fused_step_cuda_test \
    whisper_absorbed_cross_cuda_test persistent_whisper_step_test}; do
    local start=$SECONDS
    echo "== $test" >> "$log"
    timeout 150 "${env[@]}" "$here/bin/$test" >> "$log" 2>&1
    local rc=$?
    echo "$name $test rc=$rc $((SECONDS - start))s $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tail -3 | tr '\n' ' ')" >> "$out/summary.txt"
  done
  local start=$SECONDS
  echo "== cuda_backend_test" >> "$log"
  timeout "$backend_timeout" "${env[@]}" "$here/bin/cuda_backend_test" --gtest_filter="$filter" \
    >> "$log" 2>&1
  local rc=$?
  echo "$name cuda_backend_test rc=$rc $((SECONDS - start))s $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | tail -3 | tr '\n' ' ')" >> "$out/summary.txt"
  grep -E '^\[  FAILED  \]' "$log" | sort -u | head -20 >> "$out/summary.txt"
}

for run in $runs; do
  case $run in
    h) run_one h h "" "${ARCH_FILTER_H:-*}" ;;
    a) run_one sm80 a "" "${ARCH_FILTER_A:-*}" ;;
    a100) run_one sm80-a100-smem a 166912 "${ARCH_FILTER_CAPPED:-*}" ;;
    ada) run_one sm80-ada-smem a 101376 "${ARCH_FILTER_CAPPED:-*}" ;;
  esac
done

if [ -z "${ARCH_NO_BENCH:-}" ]; then
  for payload in ${ARCH_BENCH_PAYLOADS:-h a}; do
    here=/tmp/waav-arch-$payload
    timeout 150 env "LD_LIBRARY_PATH=$here/lib${cublas:+:$(dirname "$cublas")}" \
      "$here/bin/whisper_gpu_bench" --no-ops --encoder-batches none --decoder-batches 1,8 \
      --only "${ARCH_BENCH_VARIANTS:-fast, CUDA graph + PDL, engine fused step}" \
      --out "$out/bench-$payload.tsv" \
      > "$out/bench-$payload.log" 2>&1
    echo "bench $payload rc=$? $(grep -E 'decoder step' "$out/bench-$payload.log" | tr -s ' ' | head -12 | tr '\n' ';')" >> "$out/summary.txt"
  done
fi
cat "$out/summary.txt"

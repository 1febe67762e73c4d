#!/usr/bin/env bash
# One device call for the engine's prepared decoder step (WhisperModelOptions::
# fused_decoder_step): its tests, then the engine's step with and without it next to the
# persistent bench step. Staged by:
#   WAAV_STAGE_TARGETS="whisper_fused_step_cuda_test cuda_backend_test \
#     persistent_whisper_step_test whisper_gpu_bench" tests/gpu/stage_device.sh build/ci DEST
#   cp tests/gpu/run_fused_step_device.sh DEST/
# and run there as `bash DEST/run_fused_step_device.sh` (results under $OUT; ~200 s at most).
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-device
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-device-out}
mkdir -p "$out"
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || true)
export LD_LIBRARY_PATH="$here/lib${cublas:+:$(dirname "$cublas")}:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/device.txt" 2>&1
cat "$out/device.txt"
start=$SECONDS
{
  echo "== whisper_fused_step_cuda_test"
  timeout 60 "$here/bin/whisper_fused_step_cuda_test"
  echo "fused step test rc=$? ($((SECONDS - start)) s)"
} > "$out/tests.log" 2>&1
bench_args=(--no-ops --encoder-batches none --decoder-batches 1,8,64 --only
  "fast, CUDA graph + PDL;fast, CUDA graph + PDL, engine fused step;fast, eager launches, engine fused step;persistent, f32 cross, CUDA graph;persistent, f16 cross, CUDA graph")
if grep -q "fused step test rc=124" "$out/tests.log"; then
  echo "fused step test timed out: bench skipped" > "$out/bench.log"
else
  timeout 80 "$here/bin/whisper_gpu_bench" --out "$out/bench.tsv" "${bench_args[@]}" \
    > "$out/bench.log" 2>&1
  echo "bench rc=$? ($((SECONDS - start)) s)" >> "$out/bench.log"
fi
{
  echo "== cuda_backend_test (Whisper parity with the CPU, persistent step refusals)"
  timeout 40 "$here/bin/cuda_backend_test" \
    --gtest_filter='Variants/CudaWhisperTest.*/Fast:Variants/CudaWhisperTest.*/Accurate:PersistentStep*'
  echo "backend test rc=$? ($((SECONDS - start)) s)"
  echo "== persistent_whisper_step_test (the bench wrapper over kernels/cuda/persistent_step)"
  timeout 50 "$here/bin/persistent_whisper_step_test"
  echo "persistent test rc=$? ($((SECONDS - start)) s)"
} >> "$out/tests.log" 2>&1
{
  grep -E "rc=|^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|error at most|fused steps|: the persistent|parity|L2" \
    "$out/tests.log" | head -60
  echo "-- bench"
  cat "$out/bench.log"
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

#!/usr/bin/env bash
# The cluster decoder step's device run (kernels/cuda/cluster_decoder.cuh), staged by
# tests/gpu/stage_device.sh with WAAV_STAGE_TARGETS="whisper_gpu_bench persistent_whisper_step_test
# whisper_fused_step_cuda_test" and WAAV_STAGE_SCRIPTS=tests/gpu/cluster_device.sh. Timings first
# on an idle GPU: the cluster step and the cooperative persistent kernel (its default and its
# layers-only / argmax-only rows), the engine's step (batches 1, 8, 64, 256), then the PyTorch
# anchor; then the tests: the cluster and the default persistent step against the CPU, the
# engine's fused step against its op-by-op step, and compute-sanitizer memcheck over the cluster
# case (racecheck ran past 90 s there). Results under $OUT: bench.tsv, bench.log, torch.tsv, torch.log,
# tests.log, summary.txt (and bench-late.log with CLUSTER_LATE_POSITION).
#   bash .device/cluster/cluster_device.sh     (CLUSTER_BUDGET_S: the whole run, default 420)
# CLUSTER_LATE_POSITION=P: also the cluster step, its one-warp LayerNorms and f16 partials
# variants at position P (whisper_gpu_bench --position), late in a window (CLUSTER_LATE_VARIANTS:
# more, ";"-separated).
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-cluster
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-cluster-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
device=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1)
budget=${CLUSTER_BUDGET_S:-420}
left() { local l=$(( budget - SECONDS )); echo $(( l < 5 ? 5 : (l > $1 ? $1 : l) )); }
variants="persistent, f16 cross, CUDA graph;persistent, cluster step, f16 cross, CUDA graph"
variants="$variants;persistent, cluster step, f16 cross, direct launch"
variants="$variants;persistent, cluster step, argmax only (no logits out)"
variants="$variants;persistent, cluster step, profile: layers only (no logits launch)"
variants="$variants;persistent, cluster step, profile: logits launch only"
variants="$variants;persistent, profile: no logits phase"
variants="$variants;fast, CUDA graph + PDL, engine fused step"
variants="$variants;persistent, f16 cross, CUDA graph (repeat)"
variants="$variants;persistent, cluster step, f16 cross, CUDA graph (repeat)"
# CLUSTER_EXTRA_VARIANTS: more bench variants (";"-separated exact names), e.g. the unfused and
# fused steps, so that one call shows every variant; CLUSTER_BENCH_S: the bench's time limit.
variants="$variants${CLUSTER_EXTRA_VARIANTS:+;$CLUSTER_EXTRA_VARIANTS}"
# The parity test first: a cluster step that hangs or fails shows before the timings.
timeout "$(left 60)" "$here/bin/persistent_whisper_step_test" \
  --gtest_filter='*ClusterStep*:*F16CrossFusedFfnFusedSelf' > "$out/tests.log" 2>&1
echo "persistent_whisper_step_test rc=$?" >> "$out/tests.log"
timeout "$(left "${CLUSTER_BENCH_S:-150}")" "$here/bin/whisper_gpu_bench" --no-ops \
  --encoder-batches none \
  --only "$variants" --out "$out/bench.tsv" > "$out/bench.log" 2>&1
bench_rc=$?
# The cluster step's variants late in a window too (position CLUSTER_LATE_POSITION).
if [ -n "${CLUSTER_LATE_POSITION:-}" ]; then
  timeout "$(left 60)" "$here/bin/whisper_gpu_bench" --no-ops --encoder-batches none \
    --position "$CLUSTER_LATE_POSITION" \
    --only "persistent, cluster step, f16 cross, CUDA graph;persistent, cluster step, LayerNorms by one warp;persistent, cluster step, f16 attention partials${CLUSTER_LATE_VARIANTS:+;$CLUSTER_LATE_VARIANTS};persistent, cluster step, f16 cross, CUDA graph (repeat)" \
    > "$out/bench-late.log" 2>&1
  echo "late bench rc=$?" >> "$out/bench-late.log"
fi
# One all-to-all exchange's cost in a cluster, when staged (bench/gpu/dsmem_exchange.cu).
if [ -x "$here/bin/dsmem_exchange_bench" ]; then
  timeout "$(left 60)" "$here/bin/dsmem_exchange_bench" > "$out/dsmem_exchange.txt" 2>&1
  echo "dsmem_exchange_bench rc=$?" >> "$out/dsmem_exchange.txt"
fi
# The per-multiprocessor L2 bandwidth by loading scheme, when staged (bench/gpu/l2_bandwidth.cu).
if [ -x "$here/bin/l2_bandwidth_bench" ]; then
  timeout "$(left 60)" "$here/bin/l2_bandwidth_bench" > "$out/l2_bandwidth.txt" 2>&1
  echo "l2_bandwidth_bench rc=$?" >> "$out/l2_bandwidth.txt"
fi
PYTHONUNBUFFERED=1 timeout "$(left 60)" python3 "$scripts/torch_whisper_anchor.py" \
  --encoder-batches none --out "$out/torch.tsv" > "$out/torch.log" 2>&1
torch_rc=$?
{
  timeout "$(left 40)" "$here/bin/whisper_fused_step_cuda_test"
  echo "whisper_fused_step_cuda_test rc=$?"
  if command -v compute-sanitizer > /dev/null; then
    timeout "$(left 90)" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$here/bin/persistent_whisper_step_test" \
      --gtest_filter='*ClusterStepF16Cross*:*ClusterStepPacedLogits*:*ClusterStepNormOneWarp*:*ClusterStepHalfPartials*'
    echo "memcheck rc=$?"
  fi
} >> "$out/tests.log" 2>&1
{
  echo "$device"
  echo "bench rc=$bench_rc torch rc=$torch_rc"
  grep -E " rc=|^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|ERROR SUMMARY|SKIPPED|not tested" \
    "$out/tests.log" | head -40
  grep -E "parity: .*cluster step.*step 0|parity: .*step 4" "$out/tests.log" | head -12
  echo "-- waav"
  grep -v "^#" "$out/bench.log"
  if [ -f "$out/bench-late.log" ]; then
    echo "-- waav at position $CLUSTER_LATE_POSITION"
    grep -v "^#" "$out/bench-late.log"
  fi
  echo "-- torch"
  cat "$out/torch.log"
  if [ -f "$out/dsmem_exchange.txt" ]; then
    echo "-- distributed shared memory exchanges"
    cat "$out/dsmem_exchange.txt"
  fi
  if [ -f "$out/l2_bandwidth.txt" ]; then
    echo "-- L2 bandwidth"
    cat "$out/l2_bandwidth.txt"
  fi
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

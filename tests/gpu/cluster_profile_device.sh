#!/usr/bin/env bash
# Attribution of the cluster decoder step on the device (staged like cluster_device.sh, with
# WAAV_STAGE_SCRIPTS="tests/gpu/cluster_profile_device.sh"): the cluster step's parity test,
# then the benchmark's cluster-step profile rows (one part left out each, batches 1-8) beside the
# real step, then (CLPROF_NCU=1) Nsight Compute on one layers launch and one logits launch at
# batch 1, caches as they are: the hottest instructions by warp stall samples
# (tests/gpu/ncu_source_top.py). Results under $OUT: bench.log (and ncu_layers.txt,
# ncu_logits.txt; with CLPROF_KEEP_CSV=1 the source pages, ncu_layers.csv.xz, ncu_logits.csv.xz).
#   bash .device/clprof/cluster_profile_device.sh
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-clprof
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-clprof-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/bench.log" 2>&1
if [ -x "$here/bin/persistent_whisper_step_test" ]; then
  timeout 60 "$here/bin/persistent_whisper_step_test" --gtest_filter='*ClusterStep*' \
    > "$out/tests.log" 2>&1
  echo "persistent_whisper_step_test rc=$?" >> "$out/bench.log"
  grep -E "^\[  (PASSED|FAILED) |Failure|parity: .*step 4" "$out/tests.log" | head -12 \
    >> "$out/bench.log"
fi
variants="persistent, cluster step, f16 cross, CUDA graph"
for what in "layers only (no logits launch)" "cluster barriers only" "no attention" \
  "no weight loads" "timeline" \
  "logits launch only"; do
  variants="$variants;persistent, cluster step, profile: $what"
done
timeout 150 "$here/bin/whisper_gpu_bench" --no-ops --encoder-batches none --only "$variants" \
  >> "$out/bench.log" 2>&1
echo "bench rc=$?" >> "$out/bench.log"
[ "${CLPROF_NCU:-0}" = 1 ] || { cat "$out/bench.log"; exit 0; }
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
for kernel in Layers Logits; do
  timeout 150 "$ncu" --kernel-name "regex:Cluster${kernel}Kernel" --launch-skip 10 \
    --launch-count 1 --cache-control none --section WarpStateStats --section SourceCounters \
    --page source --csv --print-source sass \
    "$here/bin/whisper_gpu_bench" --quick --no-ops --encoder-batches none \
    --only "persistent, cluster step, f16 cross, direct launch" > "$out/ncu_${kernel,,}.csv" 2>&1
  echo "ncu $kernel rc=$?" >> "$out/bench.log"
  python3 "$scripts/ncu_source_top.py" "$out/ncu_${kernel,,}.csv" 45 > "$out/ncu_${kernel,,}.txt" 2>&1
  # CLPROF_KEEP_CSV=1: the whole source page too (xz), to map its addresses to source lines
  # with nvdisasm --print-line-info on the same build's cubin.
  if [ "${CLPROF_KEEP_CSV:-0}" = 1 ]; then xz -6 -f "$out/ncu_${kernel,,}.csv"; else rm -f "$out/ncu_${kernel,,}.csv"; fi
done
cat "$out/bench.log"

#!/usr/bin/env bash
# One kernel of the op-by-op decoder step under Nsight Compute, per benchmark variant (staged by
# tests/gpu/stage_device.sh with WAAV_STAGE_TARGETS=whisper_gpu_bench WAAV_STAGE_SCRIPTS=
# "tests/gpu/kernel_profile_device.sh tests/gpu/ncu_source_top.py"): for each variant, one launch
# of the kernel (after KPROF_SKIP others of its name) in a step of KPROF_BATCH rows, caches and
# clocks as they are: the details page (speed of light, occupancy, launch, warp states,
# scheduler, memory) and the hottest SASS instructions by warp stall samples.
#   KPROF_KERNEL=SharedKvKernel KPROF_BATCH=256 \
#   KPROF_VARIANTS="engine, fast;engine, i8 encoder output" bash .device/k/kernel_profile_device.sh
# KPROF_BENCH=old.xz: an earlier build's whisper_gpu_bench (xz, staged beside this script) instead.
# Results under $OUT (KPROF_TAG, default kprof): <tag>_v<i>.txt (details) and
# <tag>_v<i>_source.txt per variant i.
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-kprof
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-kprof-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
kernel=${KPROF_KERNEL:-SharedKvKernel}
IFS=';' read -r -a variants <<< "${KPROF_VARIANTS:-engine, i8 encoder output}"
bench=$here/bin/whisper_gpu_bench
if [ -n "${KPROF_BENCH:-}" ]; then  # an earlier build's bench (xz, in the staged folder)
  xz -dc "$scripts/$KPROF_BENCH" > "$here/earlier.bin" && chmod +x "$here/earlier.bin"
  bench=$here/earlier.bin
fi
for i in "${!variants[@]}"; do
  run=("$bench" --quick --no-ops --encoder-batches none
    --decoder-batches "${KPROF_BATCH:-256}" --only "${variants[$i]}")
  common=(--kernel-name "regex:$kernel" --launch-skip "${KPROF_SKIP:-8}" --launch-count 1
    --cache-control none --clock-control none)
  {
    echo "variant: ${variants[$i]}; kernel $kernel; batch ${KPROF_BATCH:-256}"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    timeout 200 "$ncu" "${common[@]}" --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis "${run[@]}" 2>&1 | grep -v -E '^(==PROF==|  *$)'
  } > "$out/${KPROF_TAG:-kprof}_v$i.txt" 2>&1
  timeout 200 "$ncu" "${common[@]}" --section WarpStateStats --section SourceCounters \
    --page source --csv --print-source sass "${run[@]}" > "$here/source_v$i.csv" 2>&1
  python3 "$scripts/ncu_source_top.py" "$here/source_v$i.csv" 60 > "$out/${KPROF_TAG:-kprof}_v${i}_source.txt" 2>&1
  # KPROF_KEEP_CSV=1: the whole source page too (xz), for its per-instruction counts.
  [ "${KPROF_KEEP_CSV:-0}" = 1 ] && xz -6 -c "$here/source_v$i.csv" > "$out/${KPROF_TAG:-kprof}_v${i}_source.csv.xz"
  echo "variant $i (${variants[$i]}): details $(wc -l < "$out/${KPROF_TAG:-kprof}_v$i.txt") lines"
done

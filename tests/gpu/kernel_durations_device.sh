#!/usr/bin/env bash
# One kernel's durations under Nsight Compute, per benchmark binary and decoder batch (staged by
# tests/gpu/stage_device.sh beside cluster_ab_device.sh, whose earlier-build binaries it takes
# too): KDUR_COUNT launches of the kernel after KDUR_SKIP, each its duration, instructions and
# active warps, caches and clocks as they are. Results under $OUT: kernel_durations.txt.
#   KDUR_KERNEL=SharedKvKernel KDUR_VARIANT="engine, i8 encoder output" KDUR_BATCHES=16,256 \
#   KDUR_OLD="old.xz;mid.xz" bash .device/q/kernel_durations_device.sh
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-kdur
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-kdur-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
benches=("$here/bin/whisper_gpu_bench")
IFS=';' read -r -a olds <<< "${KDUR_OLD:-}"
for o in "${olds[@]}"; do
  xz -dc "$scripts/$o" > "$here/$o.bin" && chmod +x "$here/$o.bin" && benches+=("$here/$o.bin")
done
IFS=',' read -r -a batches <<< "${KDUR_BATCHES:-16,256}"
metrics=gpu__time_duration.sum,smsp__inst_executed.sum,sm__warps_active.avg.per_cycle_active
for bench in "${benches[@]}"; do
  for b in "${batches[@]}"; do
    echo "== $(basename "$bench") B=$b ${KDUR_VARIANT:-engine, i8 encoder output}"
    timeout 120 "$ncu" --kernel-name "regex:${KDUR_KERNEL:-SharedKvKernel}" \
      --launch-skip "${KDUR_SKIP:-8}" --launch-count "${KDUR_COUNT:-4}" --metrics "$metrics" \
      --cache-control none --clock-control none "$bench" --quick --no-ops --encoder-batches none \
      --decoder-batches "$b" --only "${KDUR_VARIANT:-engine, i8 encoder output}" 2>&1 |
      grep -E "^  [a-z_ ]*void|duration|inst_executed|warps_active" | sed -E 's/ +/ /g'
  done
done > "$out/kernel_durations.txt"
cat "$out/kernel_durations.txt"

#!/usr/bin/env bash
# Kernel-by-kernel profile on the device (staged by tests/gpu/stage_device.sh with
# WAAV_STAGE_TARGETS=whisper_gpu_bench WAAV_STAGE_SCRIPTS="tests/gpu/profile_device.sh
# tests/gpu/profile_summary.py"): Nsight Compute times every kernel of one encoder pass at batch 1
# and of one op-by-op decoder step at batch 64, each kernel alone (ncu serialises launches:
# durations, not the chain's gaps), caches and clocks left as they are. Eager launches, so that
# each kernel is its own launch. Results under $OUT: profile.txt (the device, then one pass /
# step kernel by kernel and the totals by kernel); with PROF_KEEP_RAW=1 also the raw logs
# (enc_b1.csv/.log, dec_b64.csv/.log: the device tool brings back at most 8 files).
#   bash .device/prof/profile_device.sh
# Knobs: PROF_VARIANTS (';'-separated bench variants, default "fast, eager launches"; variant i
# is named v<i> in the files), PROF_DEC_BATCHES (','-separated, default 64, "none": no decoder
# step), PROF_ENCODER (1:
# also the encoder pass, the default), PROF_ENC_BATCHES (','-separated encoder batches, default
# 1), PROF_LAUNCHES (kernels profiled per run, default 260),
# PROF_DRAM (1: also DRAM bytes read and written per kernel, summarised as GB/s).
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-prof
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-prof-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine" | tee "$out/profile.txt"; exit 1; }
device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)
metrics=gpu__time_duration.sum
[ "${PROF_DRAM:-0}" = 1 ] && metrics="$metrics,dram__bytes_read.sum,dram__bytes_write.sum"
profile() {  # NAME COUNT VARIANT BENCH_ARGS...
  local name=$1 count=$2 variant=$3
  shift 3
  timeout "${PROF_TIMEOUT_S:-150}" "$ncu" --csv --metrics "$metrics" \
    --clock-control none --cache-control none --print-kernel-base function \
    --launch-count "$count" --log-file "$out/$name.csv" \
    "$here/bin/whisper_gpu_bench" --quick --no-ops --only "$variant" "$@" \
    > "$out/$name.log" 2>&1
  echo "$name rc=$?"
}
IFS=';' read -r -a variants <<< "${PROF_VARIANTS:-fast, eager launches}"
IFS=',' read -r -a batches <<< "${PROF_DEC_BATCHES:-64}"
[ "${batches[*]}" = none ] && batches=()
IFS=',' read -r -a enc_batches <<< "${PROF_ENC_BATCHES:-1}"
summary_args=()
if [ "${PROF_ENCODER:-1}" = 1 ]; then
  for b in "${enc_batches[@]}"; do
    profile "enc_b$b" 150 "${variants[0]}" --encoder-only --encoder-batches "$b"
    summary_args+=("$out/enc_b$b.csv" Im2colKernel 2)
  done
fi
for i in "${!variants[@]}"; do
  for b in "${batches[@]}"; do
    name=dec_b$b
    [ "${#variants[@]}" -gt 1 ] && name=v${i}_dec_b$b
    echo "$name: ${variants[$i]}, decoder batch $b"
    profile "$name" "${PROF_LAUNCHES:-260}" "${variants[$i]}" --encoder-batches none \
      --decoder-batches "$b"
    summary_args+=("$out/$name.csv" EmbedKernel 1)
  done
done
{
  echo "$device"
  python3 "$scripts/profile_summary.py" "${summary_args[@]}"
} > "$out/profile.txt" 2>&1
[ "${PROF_KEEP_RAW:-0}" = 1 ] || rm -f "$out"/*.csv "$out"/*_b*.log
cat "$out/profile.txt"

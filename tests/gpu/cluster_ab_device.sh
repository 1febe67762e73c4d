#!/usr/bin/env bash
# Side-by-side timings of cluster-step variants on the device, alternating so that the
# machine's drift falls on every variant alike (staged like cluster_device.sh, whose payload it
# unpacks). Each round runs whisper_gpu_bench once per variant (its own median over many steps);
# AB_ROUNDS rounds (default 4) at AB_BATCHES (default 1,8). AB_VARIANTS: ";"-separated bench
# variant names (default: the cluster step, and its cross-attention on the CUDA cores). With
# AB_OLD_BENCH="a.xz;b.xz" (earlier builds' whisper_gpu_bench, xz-compressed, in the staged
# folder), each binary's run of the first variant too, as "a.xz: NAME" (AB_OLD_VARIANTS:
# ";"-separated, those variants instead). Then (AB_CLUSTER_CHECKS=1, the default) the timeline once
# and the cluster step's parity tests (the timeline of each binary). Results under $OUT: ab.log (one line per round, variant and
# batch), ab-summary.txt (per variant and batch: the rounds' medians, their median and spread),
# timeline.log, tests.log. Every run is a process of its own (the first variant a process times
# can differ from later ones: session 27 saw 15-20 us at 64-256 rows); AB_ROTATE=1 starts each
# round one variant later than the last.
#   bash .device/cluster/cluster_ab_device.sh
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-cluster
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-cluster-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
variants=${AB_VARIANTS:-"persistent, cluster step, f16 cross, CUDA graph;persistent, cluster step, cross-attention on CUDA cores"}
batches=${AB_BATCHES:-1,8}
IFS=';' read -r -a olds <<< "${AB_OLD_BENCH:-}"
for o in "${olds[@]}"; do
  xz -dc "$scripts/$o" > "$here/$o.bin" && chmod +x "$here/$o.bin"
done
run() {  # binary, variant, label
  "$1" --no-ops --encoder-batches none --decoder-batches "$batches" --only "$2" 2>&1 |
    grep "^decoder step" | sed -E "s/ +/ /g" |
    awk -v r="$round" -v name="$3" '{for (i = 1; i <= NF; i++) if ($i ~ /^B=/) print "round " r "\t" name "\t" $i "\t" $(i + 1)}'
}
IFS=';' read -r -a names <<< "$variants"
IFS=';' read -r -a old_names <<< "${AB_OLD_VARIANTS:-${names[0]}}"
for round in $(seq "${AB_ROUNDS:-4}"); do
  order=("${names[@]}")
  if [ "${AB_ROTATE:-0}" = 1 ]; then
    shift_by=$(( (round - 1) % ${#names[@]} ))
    order=("${names[@]:shift_by}" "${names[@]:0:shift_by}")
  fi
  for v in "${order[@]}"; do run "$here/bin/whisper_gpu_bench" "$v" "$v"; done
  for o in "${olds[@]}"; do
    for v in "${old_names[@]}"; do run "$here/$o.bin" "$v" "$o: $v"; done
  done
done > "$out/ab.log"
# Per variant and batch: the rounds' figures, their median and spread (max - min).
awk -F'\t' '{k = $2 "\t" $3; v[k] = v[k] " " $4; n[k]++} END {for (k in v) print k "\t" v[k]}' \
  "$out/ab.log" | sort | while IFS=$'\t' read -r name batch values; do
  stats=$(tr ' ' '\n' <<< "$values" | grep . | sort -g |
    awk '{a[NR] = $1} END {m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "median %.1f us, spread %.1f (%d rounds)", m, a[NR] - a[1], NR}')
  printf '%s\t%s\t%s\t%s\n' "$name" "$batch" "$stats" "$values"
done > "$out/ab-summary.txt"
cat "$out/ab-summary.txt"
[ "${AB_CLUSTER_CHECKS:-1}" = 1 ] || exit 0
for bench in "$here/bin/whisper_gpu_bench" "${olds[@]/#/$here/}"; do
  [ "$bench" = "$here/bin/whisper_gpu_bench" ] || bench="$bench.bin"
  echo "== $(basename "$bench")"
  "$bench" --no-ops --encoder-batches none --decoder-batches 1 \
    --only "persistent, cluster step, profile: timeline" 2>&1 | grep "timeline B=1"
done > "$out/timeline.log"
{
  timeout 60 "$here/bin/cuda_backend_test" --gtest_filter='ClusterCross*'
  echo "cuda_backend_test ClusterCross* rc=$?"
  timeout 120 "$here/bin/persistent_whisper_step_test" --gtest_filter='*ClusterStep*'
  echo "persistent_whisper_step_test rc=$?"
} > "$out/tests.log" 2>&1
grep -E " rc=" "$out/tests.log"

#!/usr/bin/env bash
# The greedy choice made in the decoder step's own launches (PreparedDecoderStep::RunAndChoose),
# checked and measured in one device call. Staged here (-9: xz then finds the five binaries'
# shared CUDA code, 18 MB against 48, so that the call fits in 64 MiB with the tree):
#   XZ_OPT=-9 WAAV_STAGE_TARGETS="cuda_backend_test greedy_step_bench \
#     whisper_fused_step_cuda_test whisper_graph_cuda_test persistent_whisper_step_test" \
#     WAAV_STAGE_SCRIPTS=tests/gpu/step_choice_device.sh tests/gpu/stage_device.sh build/ci .device/g
#   cp models/whisper-tiny.en/tokenizer.json .device/g/tok.json
# device tool: carry [".device/g"], command: bash .device/g/step_choice_device.sh
# First the new test alone, then the A/B on an idle GPU: greedy_step_bench with --step-choice
# always and never alternated (CHOICE_VARIANTS: the values in turn; CHOICE_ROUNDS rounds, default
# 2; rows CHOICE_ROWS, default 1,2,4,8: the cluster step's buckets; 7 calls a row count), then
# the tests (all within CHOICE_BUDGET_S,
# default 540): the fused step's (the new choice against the ops, eager and graphs) and the
# engine's graph tests, the persistent step against the CPU, the choice's and copies' kernels of
# cuda_backend_test, and compute-sanitizer memcheck over the choice test.
# Results under $OUT: choice-test.log, greedy-<round>-<variant>.log, tests.log, summary.txt.
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-choice
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-choice-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
budget=${CHOICE_BUDGET_S:-540}
left() { local l=$(( budget - SECONDS )); echo $(( l < 5 ? 5 : (l > $1 ? $1 : l) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/device.txt" 2>&1
# The new path's own test first (a wrong or hanging kernel shows before the benchmark runs it).
timeout 60 "$here/bin/whisper_fused_step_cuda_test" --gtest_filter='*Choice*' > "$out/choice-test.log" 2>&1
echo "choice test rc=$?" >> "$out/choice-test.log"
for round in $(seq 1 "${CHOICE_ROUNDS:-2}"); do
  for choice in ${CHOICE_VARIANTS:-always never}; do
    timeout "$(left 90)" "$here/bin/greedy_step_bench" --tokenizer "$scripts/tok.json" --reps 7 \
      --rows "${CHOICE_ROWS:-1,2,4,8}" --step-choice "$choice" > "$out/greedy-$round-$choice.log" 2>&1
    echo "greedy_step_bench rc=$?" >> "$out/greedy-$round-$choice.log"
  done
done
{
  timeout "$(left 90)" "$here/bin/whisper_fused_step_cuda_test"
  echo "whisper_fused_step_cuda_test rc=$?"
  timeout "$(left 45)" "$here/bin/whisper_graph_cuda_test" --gtest_filter='*RandomWeights*'
  echo "whisper_graph_cuda_test rc=$?"
  timeout "$(left 90)" "$here/bin/persistent_whisper_step_test"
  echo "persistent_whisper_step_test rc=$?"
  timeout "$(left 90)" "$here/bin/cuda_backend_test" \
    --gtest_filter='*Argmax*:*FeedChoices*:*HostCopy*:*Persistent*:*Cluster*'
  echo "cuda_backend_test rc=$?"
  if command -v compute-sanitizer > /dev/null; then
    timeout "$(left 120)" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$here/bin/whisper_fused_step_cuda_test" --gtest_filter='*Choice*/cudaEager'
    echo "memcheck rc=$?"
  fi
} > "$out/tests.log" 2>&1
{
  cat "$out/device.txt"
  grep -E " rc=|^\[  (PASSED|FAILED) |choice in the step's" "$out/choice-test.log"
  grep -E " rc=|^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|ERROR SUMMARY|choice in the step's" \
    "$out/tests.log" | head -40
  for f in "$out"/greedy-*.log; do
    echo "-- $(basename "$f")"
    cat "$f"
  done
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

#!/usr/bin/env bash
# The decoder-step device run (staged by tests/gpu/stage_device.sh with WAAV_STAGE_TARGETS=
# "cuda_backend_test whisper_gpu_bench whisper_graph_cuda_test whisper_fused_step_cuda_test
# persistent_whisper_step_test", optionally whisper_absorbed_cross_cuda_test, and
# WAAV_STAGE_SCRIPTS=tests/gpu/dec_device.sh): timings first
# on an idle GPU (waav's decoder steps at batch 1, 8, 64, 256 with f16 and with f32 cross K/V
# caches, op by op and with the engine's persistent step; then the PyTorch anchor's steps), then
# the tests (the whole CUDA backend suite, the engine's graphs and fused step on the GPU, the
# persistent step against the CPU) and compute-sanitizer memcheck over the attention tests.
# Results under $OUT: bench.tsv, bench.log, torch.tsv, torch.log, tests.log, summary.txt.
#   bash .device/dec/dec_device.sh     (DEC_BUDGET_S: seconds for the whole run, default 360;
#   DEC_EXTRA_VARIANTS: more bench variants, ';'-separated; DEC_BATCHES: decoder batches, default
#   1,8,64,256; DEC_BENCH_S: seconds for the bench, default 110; DEC_MEMCHECK_FILTER: more gtest
#   patterns for memcheck, ":"-separated; DEC_MEMCHECK_S: its seconds, default 40; DEC_TESTS_S:
#   seconds for cuda_backend_test, default 400 (an H100 in session 27 ran 351 of its tests in
#   240 s and the last 12 in ~140 more; DEC_BUDGET_S must leave room for it); DEC_PARTS: "bench tests" (default) or either;
#   DEC_BENCH_ARGS: more whisper_gpu_bench arguments, e.g. "--prefill-tokens 4,16,64";
#   DEC_TORCH=0: no PyTorch anchor; DEC_VARIANTS: the bench variants instead of the four below;
#   DEC_TESTS_FILTER: cuda_backend_test's gtest filter, default all; DEC_TOKENIZER: a
#   tokenizer.json, with which a staged greedy_step_bench times DecodeGreedyBatch's token steps
#   at DEC_GREEDY_ROWS rows, default 1,2,4,8,16,64, into greedy.tsv and greedy.log)
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-dec
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-dec-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
device=$(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1)
budget=${DEC_BUDGET_S:-360}
left() { local l=$(( budget - SECONDS )); echo $(( l < 5 ? 5 : (l > $1 ? $1 : l) )); }
variants="fast, CUDA graph + PDL;fast, CUDA graph + PDL, f32 cross cache"
variants="$variants;fast, CUDA graph + PDL, engine fused step"
variants="$variants;fast, CUDA graph + PDL, engine fused step, f32 cross cache"
variants=${DEC_VARIANTS:-$variants}
[ -n "${DEC_EXTRA_VARIANTS:-}" ] && variants="$variants;$DEC_EXTRA_VARIANTS"
parts=${DEC_PARTS:-bench tests}
bench_rc=skipped torch_rc=skipped
if [[ $parts == *bench* ]]; then
  timeout "$(left "${DEC_BENCH_S:-110}")" "$here/bin/whisper_gpu_bench" --no-ops \
    --encoder-batches none --decoder-batches "${DEC_BATCHES:-1,8,64,256}" \
    --only "$variants" --out "$out/bench.tsv" ${DEC_BENCH_ARGS:-} > "$out/bench.log" 2>&1
  bench_rc=$?
  if [ "${DEC_TORCH:-1}" = 1 ]; then
    PYTHONUNBUFFERED=1 timeout "$(left 60)" python3 "$scripts/torch_whisper_anchor.py" \
      --encoder-batches none --decoder-batches "${DEC_BATCHES:-1,8,64,256}" \
      --out "$out/torch.tsv" > "$out/torch.log" 2>&1
    torch_rc=$?
  fi
  if [ -n "${DEC_TOKENIZER:-}" ] && [ -x "$here/bin/greedy_step_bench" ]; then
    timeout "$(left 90)" "$here/bin/greedy_step_bench" --tokenizer "$DEC_TOKENIZER" \
      --rows "${DEC_GREEDY_ROWS:-1,2,4,8,16,64}" --out "$out/greedy.tsv" > "$out/greedy.log" 2>&1
    echo "greedy_step_bench rc=$?" >> "$out/greedy.log"
  fi
fi
: > "$out/tests.log"
[[ $parts == *tests* ]] && {
  timeout "$(left "${DEC_TESTS_S:-400}")" "$here/bin/cuda_backend_test" \
    --gtest_filter="${DEC_TESTS_FILTER:-*}"
  echo "cuda_backend_test rc=$?"
  timeout "$(left 30)" "$here/bin/whisper_graph_cuda_test" --gtest_filter='*RandomWeights*'
  echo "whisper_graph_cuda_test rc=$?"
  timeout "$(left 30)" "$here/bin/whisper_fused_step_cuda_test"
  echo "whisper_fused_step_cuda_test rc=$?"
  if [ -x "$here/bin/whisper_absorbed_cross_cuda_test" ]; then
    timeout "$(left 60)" "$here/bin/whisper_absorbed_cross_cuda_test" --gtest_filter='*cuda*'
    echo "whisper_absorbed_cross_cuda_test rc=$?"
  fi
  timeout "$(left 90)" "$here/bin/persistent_whisper_step_test"
  echo "persistent_whisper_step_test rc=$?"
  if command -v compute-sanitizer > /dev/null; then
    timeout "$(left "${DEC_MEMCHECK_S:-40}")" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$here/bin/cuda_backend_test" \
      --gtest_filter="Variants/CudaParityTest.Attention*/Fast:Variants/CudaWhisperTest.Decoder*/Fast${DEC_MEMCHECK_FILTER:+:$DEC_MEMCHECK_FILTER}"
    echo "memcheck rc=$?"
  fi
} > "$out/tests.log" 2>&1
{
  echo "$device"
  echo "bench rc=$bench_rc torch rc=$torch_rc"
  grep -E " rc=|^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|ERROR SUMMARY" "$out/tests.log" | head -30
  awk '/^\[ RUN/ {t = $NF} /parity:/ {print t ": " $0}' "$out/tests.log" |
    grep -E "/Fast: parity: (Attention f32 q|Whisper step logits at 3)" | head -20
  echo "-- waav"
  grep -v "^#" "$out/bench.log"
  echo "-- torch"
  cat "$out/torch.log"
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

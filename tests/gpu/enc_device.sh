#!/usr/bin/env bash
# The encoder device run (staged by tests/gpu/stage_enc_device.sh): timings first, on an idle GPU
# (waav's encoder rows and encoder ops, then the PyTorch anchor's, in the same call), then the CUDA
# backend's parity tests, the encoder rows once more, and compute-sanitizer memcheck over the
# tests of the kernels changed last (ENC_SANITIZE: a gtest filter). Results under $OUT: bench.tsv,
# bench_repeat.tsv, bench.log, torch.tsv/.log, tests.log, sanitizer.log, summary.txt (with the
# device). Round 3 ran it with ENC_BUDGET_S=185 under a 200 s limit, round 4 with 135 under 150.
#   ENC_SKIP="sanitizer tests torch repeat"   parts to leave out
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
here=/tmp/waav-enc
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-enc-out}
mkdir -p "$out"
skip=" ${ENC_SKIP:-} "
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || true)
if [ -z "$cublas" ]; then
  cublas=$(python3 -c 'import nvidia.cublas, glob, os; print(glob.glob(os.path.join(list(nvidia.cublas.__path__)[0], "lib", "libcublas.so.*"))[0])' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH="$here/lib${cublas:+:$(dirname "$cublas")}:${LD_LIBRARY_PATH:-}"
# (At most 8 files come back: the device lines go into summary.txt.)
device=$({
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  echo "cuBLAS: ${cublas:-not found}"
} 2>&1)
echo "$device"

# The device tool's limit (300 s, 200 s in round 3): the later parts get what is left of
# ENC_BUDGET_S.
budget=${ENC_BUDGET_S:-285}
left() { local l=$(( budget - SECONDS )); echo $(( l < 5 ? 5 : (l > $1 ? $1 : l) )); }
# Round 4 (enc9): the default (PDL) against the encoder pass and cross projections launched
# without PDL (LaunchHint) and a graph without PDL at all; the first two again at the end (the
# spread between two runs of one call). Round 3's rows: ENC_ROUND=3.
main="fast, CUDA graph + PDL;fast, CUDA graph + PDL, encoder without PDL"
extra="fast, CUDA graph"
if [ "${ENC_ROUND:-5}" = 5 ]; then
  # Round 5: every decoder layer's cross K/V from one GEMM (the default) against two GEMMs per
  # layer, and f16 im2col columns (the default) against f32 ones; each with and without PDL.
  main="fast, CUDA graph + PDL;fast, CUDA graph + PDL, cross K/V per layer"
  extra="fast, CUDA graph;fast, CUDA graph, cross K/V per layer"
  extra="$extra;fast, CUDA graph + PDL, cross K/V per layer, f32 conv columns"
elif [ "${ENC_ROUND:-5}" = 3 ]; then
  main="fast, CUDA graph + PDL;fast, CUDA graph + PDL, no QKV planes (round 2 default)"
  main="$main;fast, CUDA graph;fast, CUDA graph, no QKV planes (round 2 default)"
  extra="fast, CUDA graph + PDL <= 1 block per SM;fast, CUDA graph + PDL <= 1 block per SM, no QKV planes"
fi
timeout "$(left 75)" "$here/bin/whisper_gpu_bench" ${ENC_OPS:---no-ops} --encoder-only \
  --encoder-batches 1,16 --only "$main;$extra" --out "$out/bench.tsv" > "$out/bench.log" 2>&1
bench_rc=$?
torch_rc=skipped
if [[ "$skip" != *" torch "* ]]; then
  PYTHONUNBUFFERED=1 timeout "$(left 50)" python3 "$scripts/torch_whisper_anchor.py" --encoder-only \
    --out "$out/torch.tsv" > "$out/torch.log" 2>&1
  torch_rc=$?
fi
tests_rc=skipped
if [[ "$skip" != *" tests "* ]]; then
  timeout "$(left 60)" "$here/bin/cuda_backend_test" > "$out/tests.log" 2>&1
  tests_rc=$?
  # The engine's graphs against eager calls on the GPU (encoder passes with the defaults).
  timeout "$(left 20)" "$here/bin/whisper_graph_cuda_test" \
    --gtest_filter='*RandomWeightsGreedyStepsEqualEager/cuda' >> "$out/tests.log" 2>&1
  tests_rc="$tests_rc/$?"
fi
if [[ "$skip" != *" repeat "* ]]; then
  echo "# repeat" >> "$out/bench.log"
  timeout "$(left 30)" "$here/bin/whisper_gpu_bench" --no-ops --encoder-only --encoder-batches 1 \
    --only "$main" --out "$out/bench_repeat.tsv" >> "$out/bench.log" 2>&1
  bench_rc="$bench_rc/$?"
fi
sanitizer_rc=skipped
if [[ "$skip" != *" sanitizer "* ]] && command -v compute-sanitizer > /dev/null; then
  timeout "$(left 120)" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/cuda_backend_test" \
    --gtest_filter="${ENC_SANITIZE:-Variants/CudaParityTest.LinearPlanes*/Fast:Variants/CudaParityTest.Conv1d*/Fast:Variants/CudaWhisperTest.*/Fast}" \
    > "$out/sanitizer.log" 2>&1
  sanitizer_rc=$?
fi
{
  echo "$device"
  echo "bench rc=$bench_rc torch rc=$torch_rc tests rc=$tests_rc sanitizer rc=$sanitizer_rc"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure" "$out/tests.log" 2>/dev/null | head -30
  awk '/^\[ RUN/ {t = $NF} /parity:/ {print t ": " $0}' "$out/tests.log" 2>/dev/null |
    grep -E "/(Fast|FastEncoderNoPdl|FastHalfGemmSmallHalfActivations|AccuratePlanes|AccurateBuiltinGemmEagerGraphs): parity: (LinearPlanes m=(1500|40)|Conv1d B=1 T=3000|Whisper encoder|run [0-9])" |
    sed -e 's/Variants\/CudaParityTest\.//' -e 's/Variants\/CudaWhisperTest\.//' | head -60
  grep -E "^parity: (LayerNorm -> f16 1500|Linear m=1500 .* x f16)" "$out/tests.log" 2>/dev/null | head -12
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/sanitizer.log" 2>/dev/null | head -10
  echo "-- waav"
  grep -v "^#" "$out/bench.log"
  echo "-- torch"
  cat "$out/torch.log" 2>/dev/null
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

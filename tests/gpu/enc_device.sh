#!/usr/bin/env bash
# The encoder device run (staged by tests/gpu/stage_enc_device.sh): timings first, on an idle GPU
# (waav's encoder rows and encoder ops, then the PyTorch anchor's, in the same call), then the CUDA
# backend's parity tests and compute-sanitizer memcheck over the fast-path kernel tests. Results
# under $OUT: bench.tsv, bench_decoder.tsv, bench.log, torch.tsv/.log, tests.log, sanitizer.log,
# summary.txt (with the device).
#   ENC_SKIP="sanitizer tests torch"   parts to leave out
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

# The device tool's limit is 300 s: the later parts get what is left of ENC_BUDGET_S.
budget=${ENC_BUDGET_S:-285}
left() { local l=$(( budget - SECONDS )); echo $(( l < 5 ? 5 : (l > $1 ? $1 : l) )); }
timeout 80 "$here/bin/whisper_gpu_bench" --encoder-only --encoder-batches 1,16 \
  --out "$out/bench.tsv" > "$out/bench.log" 2>&1
bench_rc=$?
# The decoder steps, on which HalfGemm (more than 16 rows) and flash v2 (prompts) act too: the
# default against the first kernels.
timeout 60 "$here/bin/whisper_gpu_bench" --no-ops --encoder-batches 1 --decoder-batches 1,64,256 \
  --only "fast, CUDA graph + PDL;fast, CUDA graph + PDL, cuBLAS GEMMs, flash v1;fast, CUDA graph + PDL, cuBLAS GEMMs, flash v2" \
  --out "$out/bench_decoder.tsv" >> "$out/bench.log" 2>&1
bench_rc="$bench_rc/$?"
torch_rc=skipped
if [[ "$skip" != *" torch "* ]]; then
  PYTHONUNBUFFERED=1 timeout "$(left 60)" python3 "$scripts/torch_whisper_anchor.py" --encoder-only \
    --out "$out/torch.tsv" > "$out/torch.log" 2>&1
  torch_rc=$?
fi
tests_rc=skipped
if [[ "$skip" != *" tests "* ]]; then
  timeout "$(left 130)" "$here/bin/cuda_backend_test" > "$out/tests.log" 2>&1
  tests_rc=$?
  # The engine's graphs against eager calls on the GPU (encoder passes with the fused residual).
  timeout "$(left 60)" "$here/bin/whisper_graph_cuda_test" \
    --gtest_filter='*RandomWeightsGreedyStepsEqualEager/cuda' >> "$out/tests.log" 2>&1
  tests_rc="$tests_rc/$?"
fi
sanitizer_rc=skipped
if [[ "$skip" != *" sanitizer "* ]] && command -v compute-sanitizer > /dev/null; then
  timeout "$(left 120)" compute-sanitizer --tool memcheck --error-exitcode 9 "$here/bin/cuda_backend_test" \
    --gtest_filter='Variants/CudaParityTest.Linear*/Fast*:Variants/CudaParityTest.Conv1d*/Fast*:Variants/CudaParityTest.Attention*/Fast:Variants/CudaParityTest.Attention*/FastFirstKernels:Variants/CudaWhisperTest.EncoderPass*/Fast*:Variants/CudaParityTest.HalfActivations*' \
    > "$out/sanitizer.log" 2>&1
  sanitizer_rc=$?
fi
{
  echo "$device"
  echo "bench rc=$bench_rc torch rc=$torch_rc tests rc=$tests_rc sanitizer rc=$sanitizer_rc"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure" "$out/tests.log" 2>/dev/null | head -30
  awk '/^\[ RUN/ {t = $NF} /parity:/ {print t ": " $0}' "$out/tests.log" 2>/dev/null |
    grep -E "/(Fast|FastFirstKernels|FastHalfGemm|FastHalfGemmSmall|FastCublasResidual|FastCublasResidualHalfActivations): parity: (Linear m=(1500|77|33)|LinearResidual m=(1500|40)|Conv1d B=(1 T=3000|2 T=301)|Attention B=(1|2) Tq=(1500|200)|Whisper encoder)" |
    sed -e 's/Variants\/CudaParityTest\.//' -e 's/Variants\/CudaWhisperTest\.//' | head -60
  grep -E "^parity: (LayerNorm -> f16 1500|Linear m=1500 .* x f16)" "$out/tests.log" 2>/dev/null | head -12
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/sanitizer.log" 2>/dev/null | head -10
  echo "-- waav"
  grep -v "^#" "$out/bench.log"
  echo "-- torch"
  cat "$out/torch.log" 2>/dev/null
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

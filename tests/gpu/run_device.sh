#!/usr/bin/env bash
# The whole GPU device run, from the repository root of the device machine with .device/ staged
# by tests/gpu/stage_device.sh: the CUDA backend's tests (parity with the CPU backend), a
# compute-sanitizer pass over the kernel tests, the waav benchmarks and the PyTorch anchor in the
# same call. Results under $OUT (device.txt, tests.log, sanitizer.log, bench.tsv, torch.tsv,
# summary.txt); the summary is printed last.
set -uo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)  # the staged folder (.device/ or where it was carried)
here=/tmp/waav-device
rm -rf "$here" && mkdir -p "$here" && tar -C "$here" -xJf "$scripts/payload.tar.xz" || exit 1
out=${OUT:-/tmp/waav-device-out}
mkdir -p "$out"
quick=${WAAV_DEVICE_QUICK:-}
skip=" ${WAAV_DEVICE_SKIP:-} "  # e.g. "sanitizer torch backend_tests" for an exploratory run
bench_args=${WAAV_BENCH_ARGS:-}  # e.g. "--no-ops --filter persistent"
torch_args=${WAAV_TORCH_ARGS:-}  # e.g. "--decoder-batches 1,8 --encoder-batches none"
# Time limits (s) of the longer programs, so that a run fits the caller's limit.
bench_timeout=${WAAV_BENCH_TIMEOUT:-300}
sanitizer_timeout=${WAAV_SANITIZER_TIMEOUT:-150}
torch_timeout=${WAAV_TORCH_TIMEOUT:-120}

# cuBLAS comes from the machine: the CUDA toolkit's, or the one PyTorch's wheels bring.
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || true)
if [ -z "$cublas" ]; then
  cublas=$(python3 -c 'import nvidia.cublas, glob, os; print(glob.glob(os.path.join(list(nvidia.cublas.__path__)[0], "lib", "libcublas.so.*"))[0])' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH="$here/lib${cublas:+:$(dirname "$cublas")}:${LD_LIBRARY_PATH:-}"

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvcc --version | tail -2
  echo "cuBLAS: ${cublas:-not found}"
  nproc
} > "$out/device.txt" 2>&1
cat "$out/device.txt"

echo "== tests"
(
  rc1=0
  if [[ "$skip" != *" backend_tests "* ]]; then
    timeout 180 "$here/bin/cuda_backend_test"
    rc1=$?
  fi
  timeout 60 "$here/bin/fused_whisper_step_test"
  rc2=$?
  timeout 120 "$here/bin/persistent_whisper_step_test"
  rc3=$?
  echo "persistent test rc=$rc3"
  rc=$(( rc1 > rc2 ? rc1 : rc2 ))
  exit $(( rc > rc3 ? rc : rc3 ))
) > "$out/tests.log" 2>&1
tests_rc=$?
# A persistent kernel that hangs (a barrier bug) must not eat the call: drop its later runs.
if grep -q "persistent test rc=124" "$out/tests.log"; then
  skip="$skip persistent "
  bench_args="$bench_args --exclude persistent"
fi
echo "== compute-sanitizer (memcheck) over the kernel tests"
if [[ "$skip" == *" sanitizer "* ]]; then
  sanitizer_rc=skipped
elif command -v compute-sanitizer > /dev/null; then
  [[ "$skip" == *" backend_sanitizer "* ]] || timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$here/bin/cuda_backend_test" --gtest_filter='Variants/CudaParityTest.*/Fast:Variants/CudaParityTest.*/FastHalfGemm:Variants/CudaParityTest.*/AccurateBuiltin*' \
    > "$out/sanitizer.log" 2>&1
  sanitizer_rc=$?
  # The persistent step (one cooperative kernel): memcheck and the grid barrier under it.
  if [[ "$skip" != *" persistent "* ]]; then
    timeout "$sanitizer_timeout" compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$here/bin/persistent_whisper_step_test" --gtest_filter='*F16Cross*' \
      >> "$out/sanitizer.log" 2>&1
    rc=$?
    sanitizer_rc=$(( sanitizer_rc > rc ? sanitizer_rc : rc ))
  fi
else
  sanitizer_rc=none
fi
echo "== waav benchmarks"
timeout "$bench_timeout" "$here/bin/whisper_gpu_bench" --out "$out/bench.tsv" ${quick:+--quick} $bench_args \
  > "$out/bench.log" 2>&1
bench_rc=$?
echo "== PyTorch anchor"
if [[ "$skip" == *" torch "* ]]; then
  torch_rc=skipped
else
  PYTHONUNBUFFERED=1 timeout "$torch_timeout" python3 "$scripts/torch_whisper_anchor.py" \
    --out "$out/torch.tsv" ${quick:+--quick} $torch_args > "$out/torch.log" 2>&1
  torch_rc=$?
fi

{
  echo "tests rc=$tests_rc sanitizer rc=$sanitizer_rc bench rc=$bench_rc torch rc=$torch_rc"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|Failure|error" "$out/tests.log" | head -40
  grep -E "parity:" "$out/tests.log" | sort -t'(' -k1,1 -u | awk '{print}' | head -80
  grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/sanitizer.log" 2>/dev/null | head -10
  echo "-- waav"
  cat "$out/bench.log"
  echo "-- torch"
  cat "$out/torch.log" 2>/dev/null
} > "$out/summary.txt" 2>&1
cat "$out/summary.txt"

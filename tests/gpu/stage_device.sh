#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries here and stages them, with the shared libraries they
# need and the scripts that run them, into DEST (default: .device/ of this checkout) for the
# device tool, which carries that folder to the GPU machine. Then, there:
#   bash .device/run_device.sh          (results under $OUT)
#
#   tests/gpu/stage_device.sh [BUILD_DIR] [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/ci}
dest=${2:-.device}
cmake --build "$build" --target cuda_backend_test fused_whisper_step_test whisper_gpu_bench -j2
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
cp "$build/kernels/cuda/cuda_backend_test" "$build/bench/gpu/fused_whisper_step_test" \
  "$build/bench/gpu/whisper_gpu_bench" "$dest/bin/"
strip "$dest/bin/"*
# Every shared library outside the C runtime (the GPU machine runs another distribution): the
# CUDA runtime is linked in statically and cuBLAS is loaded from the machine's CUDA install.
for bin in "$dest/bin/"*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$dest/lib/"; done
cp tests/gpu/run_device.sh bench/gpu/torch_whisper_anchor.py "$dest/"
du -sh "$dest"

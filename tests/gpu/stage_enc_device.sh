#!/usr/bin/env bash
# Encoder work (issue 5, encoder at batch 1): builds cuda_backend_test, whisper_graph_cuda_test
# (random weights only there: the real model does not travel) and whisper_gpu_bench here
# and stages them with the libraries they need, the PyTorch anchor and tests/gpu/enc_device.sh
# into DEST for the device tool (the approach of stage_device.sh, two binaries only). There:
#   bash .device/enc/enc_device.sh        (carry [".device/enc"]; results under $OUT)
#
#   tests/gpu/stage_enc_device.sh [BUILD_DIR] [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/ci}
dest=${2:-/work/main/.device/enc}
cmake --build "$build" --target cuda_backend_test whisper_gpu_bench whisper_graph_cuda_test -j2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
cp "$build/kernels/cuda/cuda_backend_test" "$build/kernels/cuda/whisper_graph_cuda_test" \
  "$build/bench/gpu/whisper_gpu_bench" "$stage/bin/"
strip "$stage/bin/"*
for bin in "$stage/bin/"*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
rm -rf "$dest"
mkdir -p "$dest"
tar -C "$stage" -cJf "$dest/payload.tar.xz" bin lib
cp tests/gpu/enc_device.sh bench/gpu/torch_whisper_anchor.py "$dest/"
du -sh "$dest"

#!/usr/bin/env bash
# Builds the GPU test and benchmark binaries here and stages them, with the shared libraries they
# need and the scripts that run them, into DEST (default: .device/ of this checkout) for the
# device tool, which carries that folder to the GPU machine. Then, there:
#   bash .device/run_device.sh          (results under $OUT)
#
#   tests/gpu/stage_device.sh [BUILD_DIR] [DEST]
# WAAV_STAGE_TARGETS: the binaries to build and stage (default: all four below); run_device.sh
# then needs WAAV_DEVICE_SKIP="backend_tests backend_sanitizer" when cuda_backend_test is left out.
# WAAV_STAGE_SCRIPTS: other run scripts to stage beside run_device.sh (e.g. tests/gpu/enc_device.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/ci}
dest=${2:-.device}
read -r -a targets <<< "${WAAV_STAGE_TARGETS:-cuda_backend_test fused_whisper_step_test \
  persistent_whisper_step_test whisper_gpu_bench}"
cmake --build "$build" --target "${targets[@]}" -j2
# Binaries and libraries travel as one xz archive (the device tool carries at most 64 MiB).
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for t in "${targets[@]}"; do
  for dir in kernels/cuda bench/gpu; do
    if [ -x "$build/$dir/$t" ]; then cp "$build/$dir/$t" "$stage/bin/"; fi
  done
  [ -x "$stage/bin/$t" ] || { echo "no binary $t under $build" >&2; exit 1; }
done
strip "$stage/bin/"*
# Every shared library outside the C runtime (the GPU machine runs another distribution): the
# CUDA runtime is linked in statically and cuBLAS is loaded from the machine's CUDA install.
for bin in "$stage/bin/"*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
rm -rf "$dest"
mkdir -p "$dest"
tar -C "$stage" -cJf "$dest/payload.tar.xz" bin lib
read -r -a scripts <<< "${WAAV_STAGE_SCRIPTS:-}"
cp tests/gpu/run_device.sh bench/gpu/torch_whisper_anchor.py "${scripts[@]}" "$dest/"
du -sh "$dest"

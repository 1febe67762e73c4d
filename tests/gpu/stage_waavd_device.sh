#!/usr/bin/env bash
# Stages waavd on the GPU (tests/gpu/waavd_device.sh) for the device tool, which carries at most
# 64 MiB per call: the real tiny.en model.bin (75 MB) travels in two calls to the same warm
# machine (it stays warm for 30 s after a call).
#   DEST/call1/part_a       the first 52 MB of model.bin (WAAV_STAGE_PART_BYTES: another size;
#                           the device counts the working tree in disk blocks, ~13.5 MB of it)
#     call 1: carry DEST/call1, command: mkdir -p /tmp/waav-model && cp DEST/call1/part_a /tmp/waav-model/
#   DEST/call2/             part_b (the rest), payload.tar.xz (waavd, waav, waav-load,
#                           whisper_graph_cuda_test, whisper_gpu_bench, cuda_backend_test, their non-system
#                           libraries, the model's
#                           other files, the Silero VAD, jfk.wav and two LJ Speech clips,
#                           bench/streaming_latency.sh, bench/gpu/batch_profile.py) and waavd_device.sh
#     call 2: carry DEST/call2, command: bash DEST/call2/waavd_device.sh
#   With WAAV_STAGE_THREE_CALLS=1 (when the repository and call 2 outgrow the 64 MiB a call
#   carries), part_b goes to DEST/callb instead, sent between the two:
#     carry DEST/callb, command: cp DEST/callb/part_b /tmp/waav-model/
#   (and, with WAAV_STAGE_BINARIES, && tar -C /tmp/waav-model -xJf DEST/callb/bins.tar.xz;
#   with WAAV_STAGE_LJ=1, all 32 LJ Speech clips for ramps whose fifth field is "lj",
#   && tar -C /tmp/waav-model -xf DEST/callb/lj.tar)
#
#   tests/gpu/stage_waavd_device.sh BUILD_DIR DEST MODELS_DIR SHARED_DATA
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$1 dest=$2 models=$3 data=$4
# WAAV_STAGE_EXTRA: the optional binaries to stage (default: whisper_gpu_bench cuda_backend_test;
# both and the model's second part exceed 64 MiB with the repository, so name one or none);
# WAAV_STAGE_LEAN=1 stages neither (waavd_device.sh runs them only when asked to).
# WAAV_STAGE_BINARIES: paths of more prebuilt binaries to stage as they are (not built here),
# e.g. a waavd built with other backend defaults for an A/B ramp (waavd_device.sh WAAV_RAMPS),
# or build/ci/kernels/cuda/short_window_cuda_test (waavd_device.sh runs it where staged; with
# three calls it travels in call b: call 2 has no room for a second CUDA test binary).
extra=${WAAV_STAGE_EXTRA-whisper_gpu_bench cuda_backend_test}
[ "${WAAV_STAGE_LEAN:-}" = 1 ] && extra=""
# shellcheck disable=SC2086  # a list of target names
cmake --build "$build" --target waavd waav waav-load whisper_graph_cuda_test $extra -j2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/models/whisper-tiny.en" "$stage/models/silero-vad" \
  "$stage/data/speech/ljspeech" "$stage/bench"
cp "$build/server/waavd" "$build/tools/waav/waav" "$build/load-tests/waav-load" \
  "$build/kernels/cuda/whisper_graph_cuda_test" "$stage/bin/"
for target in $extra; do
  find "$build" -name "$target" -type f -perm -u+x -exec cp {} "$stage/bin/" \; -quit
done
# With three calls the prebuilt binaries travel in call b (call 2 has no room for several), as
# bins.tar.xz, unpacked beside part_b; waavd_device.sh copies them into its bin/.
extra_bin=$stage/bin
if [ "${WAAV_STAGE_THREE_CALLS:-}" = 1 ] && [ -n "${WAAV_STAGE_BINARIES:-}" ]; then
  extra_bin=$stage/extra/bin
  mkdir -p "$extra_bin"
fi
for binary in ${WAAV_STAGE_BINARIES:-}; do cp "$binary" "$extra_bin/"; done
strip "$stage/bin/"*
if [ "$extra_bin" != "$stage/bin" ]; then strip "$extra_bin/"*; fi
# Every shared library outside the C runtime (the GPU machine runs another distribution); the
# CUDA runtime is linked in statically and cuBLAS is loaded from the machine's CUDA install.
for bin in "$stage/bin/"*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tiny="$models/whisper-tiny.en"
cp "$tiny/config.json" "$tiny/tokenizer.json" "$tiny/vocabulary.txt" "$stage/models/whisper-tiny.en/"
sha256sum "$tiny/model.bin" | cut -d' ' -f1 > "$stage/models/whisper-tiny.en/model.sha256"
cp "$models/silero-vad/silero_vad_16k_op15.onnx" "$stage/models/silero-vad/"
cp "$data/speech/jfk.wav" "$stage/data/speech/"
cp "$data/speech/ljspeech/LJ001-0001.wav" "$data/speech/ljspeech/LJ001-0008.wav" \
  "$stage/data/speech/ljspeech/"
cp bench/streaming_latency.sh bench/gpu/batch_profile.py "$stage/bench/"
rm -rf "$dest"
mkdir -p "$dest/call1" "$dest/call2"
split -b "${WAAV_STAGE_PART_BYTES:-52000000}" -d "$tiny/model.bin" "$stage/part_"
mv "$stage/part_00" "$dest/call1/part_a"
if [ "${WAAV_STAGE_THREE_CALLS:-}" = 1 ]; then
  mkdir -p "$dest/callb"
  mv "$stage/part_01" "$dest/callb/part_b"
  if [ -n "${WAAV_STAGE_BINARIES:-}" ]; then tar -C "$stage/extra" -cJf "$dest/callb/bins.tar.xz" bin; fi
  # All of LJ Speech's clips (9.4 MB; WAV does not compress) for ramps over many words.
  if [ "${WAAV_STAGE_LJ:-}" = 1 ]; then tar -C "$data/speech" -cf "$dest/callb/lj.tar" ljspeech; fi
else
  mv "$stage/part_01" "$dest/call2/part_b"
fi
tar -C "$stage" -cJf "$dest/call2/payload.tar.xz" bin lib models data bench
cp tests/gpu/waavd_device.sh bench/gpu/torch_whisper_anchor.py "$dest/call2/"
du -sh "$dest"/*

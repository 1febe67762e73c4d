#!/usr/bin/env bash
# Stages the real-speech check (tests/gpu/real_speech_device.sh) for any Whisper model folder:
# its model.bin split into parts that fit the device tool's 64 MiB a call, carried over
# consecutive calls to the same warm machine (it stays warm ~30 s after a call).
#
#   tests/gpu/stage_real_speech.sh [BUILD_DIR] MODEL_DIR DEST
#
# Writes DEST/call1 ... DEST/callN (N >= 1): each but the last holds one part (part_00, ...);
# the last holds rs_payload.tar.xz (waav and waavd, the libraries they need, the model's other
# files and the sha256 of model.bin, the Silero VAD model, jfk.wav and the LJ Speech clips),
# real_speech_device.sh, and the last part where both fit in WAAV_STAGE_CALL_BYTES (default
# 50000000: the 64 MiB a call carries, less the repository's tracked files), else a call of its
# own before. On the device, in order:
#   calls 1 .. N-1: carry DEST/callK, command: mkdir -p /tmp/waav-model && cp DEST/callK/part_* /tmp/waav-model/
#   call N:         carry DEST/callN, command: bash DEST/callN/real_speech_device.sh
# WAAV_STAGE_PART_BYTES: the size of a part (default 48000000; leave room for what else a call
# carries, e.g. a test payload beside the first part).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -eq 3 ]; then build=$1; shift; else build=build/ci; fi
model=${1:?usage: stage_real_speech.sh [BUILD_DIR] MODEL_DIR DEST}
dest=${2:?usage: stage_real_speech.sh [BUILD_DIR] MODEL_DIR DEST}
[ -f "$model/model.bin" ] || { echo "no model.bin in $model" >&2; exit 1; }
cmake --build "$build" --target waav waavd -j2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/model" "$stage/audio" "$stage/vad"
cp "$build/tools/waav/waav" "$build/server/waavd" "$stage/bin/"
strip "$stage/bin/"*
# Every shared library outside the C runtime (as tests/gpu/stage_device.sh does).
for bin in "$stage/bin/"*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
for f in config.json tokenizer.json vocabulary.txt vocabulary.json; do
  if [ -f "$model/$f" ]; then cp "$model/$f" "$stage/model/"; fi
done
sha256sum "$model/model.bin" | cut -d' ' -f1 > "$stage/model/model.sha256"
data=../shared/data/speech
cp "$data/jfk.wav" "$data"/ljspeech/*.wav "$stage/audio/"
cp models/silero-vad/silero_vad_16k_op15.onnx "$stage/vad/"
rm -rf "$dest"
split -b "${WAAV_STAGE_PART_BYTES:-48000000}" -d "$model/model.bin" "$stage/part_"
tar -C "$stage" -cJf "$stage/rs_payload.tar.xz" bin lib model audio vad
parts=("$stage"/part_*)
n=${#parts[@]}
for i in $(seq 1 "$n"); do mkdir -p "$dest/call$i" && mv "${parts[$((i - 1))]}" "$dest/call$i/"; done
payload_bytes=$(stat -c %s "$stage/rs_payload.tar.xz")
last_bytes=$(stat -c %s "$dest/call$n"/part_*)
if [ $((payload_bytes + last_bytes)) -gt "${WAAV_STAGE_CALL_BYTES:-50000000}" ]; then
  n=$((n + 1))
  mkdir -p "$dest/call$n"
fi
mv "$stage/rs_payload.tar.xz" "$dest/call$n/"
cp tests/gpu/real_speech_device.sh "$dest/call$n/"
du -sh "$dest"/call*
echo "$n calls: 1..$((n - 1)) copy their part into /tmp/waav-model, call $n runs real_speech_device.sh"

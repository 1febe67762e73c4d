#!/usr/bin/env bash
# Real speech on the device machine: `waav transcribe --backend cuda` against `--backend cpu` with
# the real Whisper tiny.en weights, on jfk.wav and six LJ Speech clips; the transcripts must be
# equal. The 75 MB model.bin exceeds the 64 MiB one device call carries, so it travels in two
# calls to the same warm machine (it stays warm for 30 s after a call):
#   call 1: carry .device with part_a (first 37.8 MB of model.bin), command:
#           mkdir -p /tmp/waav-model && cp .device/part_a /tmp/waav-model/
#   call 2: carry .device with part_b (the rest), rs_payload.tar.xz (waav, its libraries, the
#           tokenizer and vocabulary, the audio) and this script, command:
#           bash .device/real_speech_device.sh
# Staging: `split -b 37800000 -d model.bin part_` and a tar.xz of bin/ lib/ model/ audio/ (see
# tests/gpu/stage_device.sh for how the libraries are collected).
set -uo pipefail
d=/tmp/waav-rs
out=${OUT:-/tmp/waav-rs-out}
mkdir -p "$d" "$out"
tar -C "$d" -xJf .device/rs_payload.tar.xz || exit 1
if [ ! -f /tmp/waav-model/part_a ]; then
  echo "part_a is missing: the machine was not kept warm between the two calls"
  exit 3
fi
cat /tmp/waav-model/part_a .device/part_b > "$d/model/model.bin"
if [ "$(sha256sum "$d/model/model.bin" | cut -d' ' -f1)" != "$(cat "$d/model/model.sha256")" ]; then
  echo "model.bin does not match its sha256"
  exit 4
fi
export LD_LIBRARY_PATH="$d/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
status=0
for backend in cpu cuda; do
  "$d/bin/waav" transcribe --backend "$backend" --model "$d/model" -v "$d"/audio/*.wav \
    > "$out/$backend.txt" 2> "$out/$backend.log" || status=1
  cat "$out/$backend.log"
done
if diff "$out/cpu.txt" "$out/cuda.txt" > "$out/diff.txt"; then
  echo "transcripts equal ($(wc -l < "$out/cpu.txt") lines)"
else
  echo "transcripts differ:"
  cat "$out/diff.txt"
  status=2
fi
cat "$out/cuda.txt"
exit $status

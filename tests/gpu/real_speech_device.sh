#!/usr/bin/env bash
# Real speech on the device machine with a real Whisper model (tiny.en, base, ...):
#   1. `waav transcribe --backend cuda` against `--backend cpu` on jfk.wav and the LJ Speech
#      clips: the transcripts must be equal;
#   2. `waavd --backend cuda` and `--backend cpu` in turn, `waav stream --fast` of jfk.wav and
#      two LJ Speech clips through each (the streaming engine: batched encoder, the device's
#      greedy rules, word alignment): the final transcripts must be equal.
# The model travels in parts over consecutive calls to one warm machine: staged by
# tests/gpu/stage_real_speech.sh, which says which call runs what. This script runs in the last
# call, beside rs_payload.tar.xz (and the last part, where they fit in one call); the earlier
# parts wait in /tmp/waav-model.
# Results (transcripts, logs) under $OUT; exit 0 only when both checks pass.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
d=/tmp/waav-rs
out=${OUT:-/tmp/waav-rs-out}
rm -rf "$d" && mkdir -p "$d" "$out" /tmp/waav-model
tar -C "$d" -xJf "$here/rs_payload.tar.xz" || exit 1
if compgen -G "$here/part_*" > /dev/null; then cp "$here"/part_* /tmp/waav-model/; fi
cat $(ls /tmp/waav-model/part_* | sort) > "$d/model/model.bin"
if [ "$(sha256sum "$d/model/model.bin" | cut -d' ' -f1)" != "$(cat "$d/model/model.sha256")" ]; then
  echo "model.bin does not match its sha256 (parts: $(ls /tmp/waav-model | tr '\n' ' ')): an" \
    "earlier call's part is missing (the machine was not kept warm) or stale"
  exit 4
fi
export LD_LIBRARY_PATH="$d/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
status=0

echo "== 1. waav transcribe, cpu and cuda"
for backend in cpu cuda; do
  "$d/bin/waav" transcribe --backend "$backend" --model "$d/model" -v "$d"/audio/*.wav \
    > "$out/$backend.txt" 2> "$out/$backend.log" || status=1
  tail -3 "$out/$backend.log"
done
if diff "$out/cpu.txt" "$out/cuda.txt" > "$out/diff.txt"; then
  echo "transcripts equal ($(wc -l < "$out/cpu.txt") lines)"
else
  echo "transcripts differ:"
  cat "$out/diff.txt"
  status=2
fi
cat "$out/cuda.txt"

echo "== 2. waavd and waav stream --fast, cpu and cuda"
waavd_pid=""
stop_waavd() {
  [ -n "$waavd_pid" ] && kill -TERM "$waavd_pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$waavd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$waavd_pid" 2>/dev/null
  waavd_pid=""
}
trap stop_waavd EXIT
clips=("$d/audio/jfk.wav" "$d/audio/LJ001-0001.wav" "$d/audio/LJ001-0002.wav")
for backend in cpu cuda; do
  "$d/bin/waavd" --listen 127.0.0.1:50161 --backend "$backend" --model-dir "$d/model" \
    --vad-model "$d/vad/silero_vad_16k_op15.onnx" > "$out/waavd_$backend.log" 2>&1 &
  waavd_pid=$!
  up=0
  for _ in $(seq 1 600); do
    if "$d/bin/waav" health --server 127.0.0.1:50161 --timeout 1 > /dev/null 2>&1; then up=1; break; fi
    kill -0 "$waavd_pid" 2>/dev/null || break
    sleep 0.1
  done
  : > "$out/stream_$backend.txt"
  if [ "$up" = 1 ]; then
    for clip in "${clips[@]}"; do
      timeout 120 "$d/bin/waav" stream --fast --no-interim --server 127.0.0.1:50161 "$clip" \
        >> "$out/stream_$backend.txt" 2>> "$out/stream_$backend.err" || status=1
    done
  else
    echo "$backend: waavd did not start"; tail -5 "$out/waavd_$backend.log"; status=1
  fi
  stop_waavd
done
if [ -s "$out/stream_cuda.txt" ] && diff "$out/stream_cpu.txt" "$out/stream_cuda.txt" \
  > "$out/stream_diff.txt"; then
  echo "streamed transcripts equal (cuda = cpu, $(wc -l < "$out/stream_cuda.txt") lines)"
else
  echo "streamed transcripts differ or missing:"
  cat "$out/stream_diff.txt"
  status=3
fi
cat "$out/stream_cuda.txt"
exit $status

#!/usr/bin/env bash
# waavd on the GPU, in one device call (staged by tests/gpu/stage_waavd_device.sh; part_a of the
# model copied to /tmp/waav-model/ by the call before):
#   1. whisper_graph_cuda_test: decoding through the engine's graphs equals eager decoding, on
#      random weights and on the real tiny.en (jfk.wav and two LJ Speech clips); then
#      short_window_cuda_test (windows of the audio's length) where staged;
#   2. `waavd --backend cuda` and `--backend cpu` in turn: `waav health`, then
#      `waav stream --fast` of jfk.wav; the two final transcripts must be equal;
#   3. bench/streaming_latency.sh (jfk.wav, paced real-time streams, ramp WAAV_RAMP) against
#      waavd --backend cuda, then --backend cpu, then (time permitting) cuda with --max-batch 32;
#      or, when WAAV_RAMPS is set, the ramps it lists ("name|steps|waavd args;..."), e.g.
#      WAAV_RAMPS="b32|64,128,256|--backend cuda --max-batch 32 --log-level debug"; a fourth
#      field names another server binary staged in bin/ (WAAV_STAGE_EXTRA), e.g. a waavd built
#      with other backend defaults, for an A/B on one machine; a fifth field "lj" streams all
#      of LJ Speech's clips instead of jfk.wav (each slot streams clips in turn for
#      WAAV_LJ_DURATION_S, default 30), when call b brought them (WAAV_STAGE_LJ=1 in
#      stage_waavd_device.sh: /tmp/waav-model/ljspeech).
# Options (environment): WAAV_SKIP_CPU=1 leaves the CPU out of part 2; WAAV_BACKEND_TEST, when
# set, runs cuda_backend_test with that --gtest_filter after part 1; WAAV_BENCH_ARGS, when
# set, runs whisper_gpu_bench with them (random weights: micro benchmarks) after part 1, into
# bench.tsv / bench.log; WAAV_TORCH_ARGS, when set, then runs the PyTorch anchor
# (torch_whisper_anchor.py, staged beside this script) with them in the same call, into
# torch.tsv / torch.log; WAAV_MAX_STREAMS (default 80) is waavd's --max-streams. The ramps
# measure word latencies from reference word times (`waav transcribe --json --word-timestamps`
# of jfk.wav on the CPU, made once before them: docs/client.md), the same for every server
# configuration; WAAV_REFERENCE=0 measures from each server's own finals instead, as before
# session 33.
# Everything lands in $OUT/results.tar.xz (re-packed after each part) and $OUT/summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
d=/tmp/waav-gpu
out=${OUT:-/tmp/waav-gpu-out}
max_streams=${WAAV_MAX_STREAMS:-80}
r=$d/results
ramp=${WAAV_RAMP:-1,4,16,64}
budget_s=${WAAV_BUDGET_S:-560}  # stop starting new parts past this (the call's limit is 600 s)
rm -rf "$d" && mkdir -p "$d" "$r" "$out" && tar -C "$d" -xJf "$here/payload.tar.xz" || exit 1
pack() { tar -C "$d" -cJf "$out/results.tar.xz" results; cp "$r/summary.txt" "$out/" 2>/dev/null; }
say() { echo "$*" | tee -a "$r/summary.txt"; }

model=$d/models/whisper-tiny.en
# part_b beside this script, or copied to /tmp/waav-model by a call of its own (three calls).
part_b=$here/part_b
[ -f "$part_b" ] || part_b=/tmp/waav-model/part_b
if [ ! -f /tmp/waav-model/part_a ] || [ ! -f "$part_b" ]; then
  say "part_a or part_b is missing: the machine was not kept warm between the calls"; pack; exit 3
fi
cat /tmp/waav-model/part_a "$part_b" > "$model/model.bin"
# Prebuilt server binaries brought by call b (stage_waavd_device.sh, WAAV_STAGE_BINARIES), and
# all of LJ Speech's clips (WAAV_STAGE_LJ).
[ -d /tmp/waav-model/bin ] && cp /tmp/waav-model/bin/* "$d/bin/"
[ -d /tmp/waav-model/ljspeech ] && cp /tmp/waav-model/ljspeech/*.wav "$d/data/speech/ljspeech/"
if [ "$(sha256sum "$model/model.bin" | cut -d' ' -f1)" != "$(cat "$model/model.sha256")" ]; then
  say "model.bin does not match its sha256"; pack; exit 4
fi
cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || true)
if [ -z "$cublas" ]; then
  cublas=$(python3 -c 'import nvidia.cublas, glob, os; print(glob.glob(os.path.join(list(nvidia.cublas.__path__)[0], "lib", "libcublas.so.*"))[0])' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH="$d/lib${cublas:+:$(dirname "$cublas")}:${LD_LIBRARY_PATH:-}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  echo "cuBLAS: ${cublas:-not found}"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
} > "$r/device.txt" 2>&1
cat "$r/device.txt" | tee -a "$r/summary.txt"

say "== 1. graph test"
WAAV_MODELS_DIR=$d/models WAAV_SHARED_DATA=$d/data timeout 150 "$d/bin/whisper_graph_cuda_test" \
  > "$r/graph_test.log" 2>&1
say "graph test rc=$?"
grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) |graphs vs eager|eager:|graphs:|defaults took|log-probability difference|word-time difference|Failure' "$r/graph_test.log" \
  | tee -a "$r/summary.txt"
pack

if [ -x "$d/bin/short_window_cuda_test" ]; then
  say "== 1s. short windows on the GPU (real tiny.en)"
  WAAV_MODELS_DIR=$d/models WAAV_SHARED_DATA=$d/data timeout 120 \
    "$d/bin/short_window_cuda_test" --gtest_filter='*cuda*' > "$r/short_window_test.log" 2>&1
  say "short window test rc=$?"
  grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|Which is|token [0-9]' "$r/short_window_test.log" \
    | head -40 | tee -a "$r/summary.txt"
  pack
fi

if [ -n "${WAAV_BACKEND_TEST:-}" ] && [ -x "$d/bin/cuda_backend_test" ]; then
  say "== 1a. cuda_backend_test --gtest_filter=$WAAV_BACKEND_TEST"
  timeout 120 "$d/bin/cuda_backend_test" --gtest_filter="$WAAV_BACKEND_TEST" \
    > "$r/backend_test.log" 2>&1
  say "backend test rc=$?"
  grep -E '^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure' "$r/backend_test.log" | tee -a "$r/summary.txt"
  pack
fi

if [ -n "${WAAV_BENCH_ARGS:-}" ] && [ -x "$d/bin/whisper_gpu_bench" ]; then
  say "== 1b. whisper_gpu_bench $WAAV_BENCH_ARGS"
  # shellcheck disable=SC2086  # the arguments are a list
  eval timeout 200 "$d/bin/whisper_gpu_bench" --out "$r/bench.tsv" $WAAV_BENCH_ARGS \
    > "$r/bench.log" 2>&1
  say "bench rc=$?"
  tee -a "$r/summary.txt" < "$r/bench.log"
  pack
fi

if [ -n "${WAAV_TORCH_ARGS:-}" ] && [ -f "$here/torch_whisper_anchor.py" ]; then
  say "== 1c. PyTorch anchor $WAAV_TORCH_ARGS"
  # shellcheck disable=SC2086  # the arguments are a list
  PYTHONUNBUFFERED=1 timeout 150 python3 "$here/torch_whisper_anchor.py" --out "$r/torch.tsv" \
    $WAAV_TORCH_ARGS > "$r/torch.log" 2>&1
  say "torch rc=$?"
  tee -a "$r/summary.txt" < "$r/torch.log"
  pack
fi

vad=$d/models/silero-vad/silero_vad_16k_op15.onnx
common=(--model-dir "$model" --vad-model "$vad" --max-streams "$max_streams")
waavd_pid=""
start_waavd() {  # start_waavd LOG ARGS...
  local log=$1; shift
  "$d/bin/waavd" --listen 127.0.0.1:50161 "${common[@]}" "$@" > "$log" 2>&1 &
  waavd_pid=$!
  for _ in $(seq 1 300); do
    "$d/bin/waav" health --server 127.0.0.1:50161 --timeout 1 > /dev/null 2>&1 && return 0
    kill -0 "$waavd_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
stop_waavd() {
  [ -n "$waavd_pid" ] && kill -TERM "$waavd_pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$waavd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$waavd_pid" 2>/dev/null
  waavd_pid=""
}
trap stop_waavd EXIT

say "== 2. waav health and waav stream --fast jfk.wav"
backends="cuda cpu"
[ "${WAAV_SKIP_CPU:-}" = 1 ] && backends=cuda
for backend in $backends; do
  if start_waavd "$r/waavd_$backend.log" --backend "$backend"; then
    "$d/bin/waav" health --server 127.0.0.1:50161 > "$r/health_$backend.txt" 2>&1
    say "$backend health: $(tr '\n' ' ' < "$r/health_$backend.txt")"
    start=$SECONDS
    timeout 60 "$d/bin/waav" stream --fast --server 127.0.0.1:50161 "$d/data/speech/jfk.wav" \
      > "$r/stream_$backend.txt" 2> "$r/stream_$backend.err"
    say "$backend stream rc=$? in $((SECONDS - start)) s: $(tr '\n' ' ' < "$r/stream_$backend.txt")"
  else
    say "$backend: waavd did not start"; tail -5 "$r/waavd_$backend.log" | tee -a "$r/summary.txt"
  fi
  stop_waavd
  grep -m3 -i -E 'backend|cuda|gpu' "$r/waavd_$backend.log" | tee -a "$r/summary.txt"
done
if [ "$backends" = cuda ]; then
  say "cpu skipped (WAAV_SKIP_CPU)"
elif [ -s "$r/stream_cuda.txt" ] && diff "$r/stream_cpu.txt" "$r/stream_cuda.txt" > "$r/stream_diff.txt"; then
  say "streamed transcripts equal (cuda = cpu)"
else
  say "streamed transcripts differ or missing:"; cat "$r/stream_diff.txt" | tee -a "$r/summary.txt"
fi
pack

reference=()
if [ "${WAAV_REFERENCE:-1}" = 1 ]; then
  if "$d/bin/waav" transcribe --json --word-timestamps --model "$model" "$d/data/speech/jfk.wav" \
      "$d"/data/speech/ljspeech/*.wav > "$r/reference-words.jsonl" 2> "$r/reference-words.err"; then
    reference=(--reference-words "$r/reference-words.jsonl")
    say "reference words: $(wc -l < "$r/reference-words.jsonl") file(s), waav transcribe on the CPU"
  else
    say "reference words failed ($(tail -1 "$r/reference-words.err")): the servers' own times"
  fi
fi
ramp_run() {  # ramp_run NAME RAMP WAAVD-ARGS [WAAVD-BINARY] [jfk|lj]
  local name=$1 steps=$2 args=$3 binary=${4:-waavd} files=(--skip-lj)
  [ "${5:-jfk}" = lj ] && files=(--skip-jfk --lj-duration-s "${WAAV_LJ_DURATION_S:-30}")
  if (( SECONDS > budget_s - 150 )); then say "skipped $name: ${SECONDS} s used"; return; fi
  say "== 3. ramp $name ($steps): $binary $args"
  timeout $(( budget_s - SECONDS )) bash "$d/bench/streaming_latency.sh" --waavd "$d/bin/$binary" \
    --waav "$d/bin/waav" --waav-load "$d/bin/waav-load" --data "$d/data" "${files[@]}" --port 50171 \
    --ramp "$steps" --out "$r/$name" "${reference[@]}" \
    --waavd-args "--model-dir $model --vad-model $vad --max-streams $max_streams $args" \
    > "$r/$name.log" 2>&1
  say "$name rc=$?"
  grep -E '^ *[0-9]+ +[0-9]+ |largest N|does not keep up|latency reference|^ *N ' "$r/$name.log" | tee -a "$r/summary.txt"
  # The words that make the tail (waav-load's table of the latest reference words).
  sed -n '/latest words at/,/^$/p' "$r/$name.log" | tee -a "$r/summary.txt"
  # The per-batch profile (waavd --log-level debug lines), medians per batch-size range.
  local logs; logs=$(find "$r/$name" -name 'waavd*.log' 2>/dev/null)
  if [ -n "$logs" ] && command -v python3 > /dev/null; then
    # shellcheck disable=SC2086  # a list of paths without spaces
    python3 "$d/bench/batch_profile.py" $logs > "$r/$name-profile.txt" 2>&1
    tee -a "$r/summary.txt" < "$r/$name-profile.txt"
  fi
  pack
}
if [ -n "${WAAV_RAMPS:-}" ]; then
  IFS=';' read -r -a specs <<< "$WAAV_RAMPS"
  for spec in "${specs[@]}"; do
    IFS='|' read -r name steps args binary files <<< "$spec"
    ramp_run "$name" "$steps" "$args" "$binary" "$files"
  done
else
  ramp_run cuda "$ramp" "--backend cuda"
  ramp_run cpu "$ramp" "--backend cpu"
  ramp_run cuda_batch32 "16,64" "--backend cuda --max-batch 32"
fi
say "total ${SECONDS} s"
pack

#!/usr/bin/env bash
# Streaming latency of waavd on this machine (issue 3): for N concurrent real-time streams,
# latency from the end of each word's audio to its first partial and to its final result
# (p50/p95/p99), and the largest N that keeps up in real time. docs/benchmarks.md, "Streaming
# latency (issue 3)", describes the method; docs/client.md defines every column.
#
# What it does:
#   1. prints the machine (CPU model, cores usable, memory, load average), the git revision and
#      the exact commands;
#   2. starts WAAVD --listen 127.0.0.1:PORT [WAAVD_ARGS], waits until `waav health` says SERVING;
#   3. runs a waav-load ramp on jfk.wav (each slot streams it REPS times), then one on the 32 LJ
#      Speech clips (each slot streams clips in turn, from its own starting clip, for
#      LJ_DURATION s), each WAV followed by TAIL ms of silence so every utterance ends at a
#      silence endpoint, as a live microphone's;
#   4. stops waavd (SIGTERM) and leaves the JSON reports and waavd's log in OUT.
#
# usage: bench/streaming_latency.sh --waavd PATH [--waavd-args "ARGS"] [--waav-load PATH]
#          [--waav PATH] [--data DIR] [--port 50151] [--ramp 1,2,4,8,16,32] [--reps 2]
#          [--lj-duration-s 60] [--chunk-ms 100] [--tail-silence-ms 1000] [--spread-ms 2000]
#          [--out DIR]
#          [--waavd-cpus LIST] [--load-cpus LIST] [--skip-jfk] [--skip-lj]
#          [--reference-words FILE | --reference-model DIR]
#
# --reference-words FILE measures each word's latency from the word times in FILE (`waav
# transcribe --json --word-timestamps` output of the streamed files) instead of the server's own
# (its finals' alignment, which moves with the server's configuration: docs/client.md);
# --reference-model DIR makes that file first, with `waav transcribe` on the CPU and the model in
# DIR, into OUT/reference-words.jsonl. Use one of them to compare server configurations.
#
# --waavd-cpus/--load-cpus pin the server and the load generator with taskset (for example
# 0 and 1, or both 0,1 on a 2-core machine: the load generator needs little, one pacer thread and
# gRPC's callback threads, but it does compete with the server for the same cores, so say which).
# Try the script itself without a model: --waavd build/ci/tests/support/fake-waavd.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
WAAVD=""
WAAVD_ARGS=""
WAAV_LOAD=""
WAAV=""
DATA="$REPO/../shared/data"
PORT=50151
RAMP="1,2,4,8,16,32"
REPS=2
LJ_DURATION_S=60
CHUNK_MS=100
TAIL_MS=1000
SPREAD_MS=2000
OUT=""
WAAVD_CPUS=""
LOAD_CPUS=""
RUN_JFK=1
RUN_LJ=1
REFERENCE_WORDS=""
REFERENCE_MODEL=""

die() { echo "streaming_latency: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --waavd) WAAVD="$2"; shift 2 ;;
    --waavd-args) WAAVD_ARGS="$2"; shift 2 ;;
    --waav-load) WAAV_LOAD="$2"; shift 2 ;;
    --waav) WAAV="$2"; shift 2 ;;
    --data) DATA="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --ramp) RAMP="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --lj-duration-s) LJ_DURATION_S="$2"; shift 2 ;;
    --chunk-ms) CHUNK_MS="$2"; shift 2 ;;
    --tail-silence-ms) TAIL_MS="$2"; shift 2 ;;
    --spread-ms) SPREAD_MS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --waavd-cpus) WAAVD_CPUS="$2"; shift 2 ;;
    --load-cpus) LOAD_CPUS="$2"; shift 2 ;;
    --skip-jfk) RUN_JFK=0; shift ;;
    --skip-lj) RUN_LJ=0; shift ;;
    --reference-words) REFERENCE_WORDS="$2"; shift 2 ;;
    --reference-model) REFERENCE_MODEL="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (--help lists them)" ;;
  esac
done

find_build() {  # the first of build/{release,ci}/<path> that exists
  for preset in release ci; do
    if [[ -x "$REPO/build/$preset/$1" ]]; then echo "$REPO/build/$preset/$1"; return; fi
  done
}
[[ -n "$WAAVD" ]] || die "--waavd PATH is required (the waavd binary to measure)"
[[ -x "$WAAVD" ]] || die "waavd $WAAVD is not an executable"
[[ -n "$WAAV_LOAD" ]] || WAAV_LOAD="$(find_build load-tests/waav-load)"
[[ -n "$WAAV" ]] || WAAV="$(find_build tools/waav/waav)"
[[ -x "$WAAV_LOAD" ]] || die "waav-load not found: build it (target waav-load) or pass --waav-load"
[[ -x "$WAAV" ]] || die "waav not found: build it (target waav) or pass --waav"
JFK="$DATA/speech/jfk.wav"
LJ_DIR="$DATA/speech/ljspeech"
[[ $RUN_JFK == 0 || -f "$JFK" ]] || die "$JFK not found (--data DIR)"
[[ $RUN_LJ == 0 || -d "$LJ_DIR" ]] || die "$LJ_DIR not found (--data DIR)"
[[ -n "$OUT" ]] || OUT="$(mktemp -d /tmp/waav-streaming-latency.XXXXXX)"
mkdir -p "$OUT"
[[ -z "$REFERENCE_WORDS" || -z "$REFERENCE_MODEL" ]] ||
  die "--reference-words and --reference-model: one or the other"
[[ -z "$REFERENCE_WORDS" || -f "$REFERENCE_WORDS" ]] || die "$REFERENCE_WORDS not found"
if [[ -n "$REFERENCE_MODEL" ]]; then
  REFERENCE_WORDS="$OUT/reference-words.jsonl"
  ref_files=()
  [[ $RUN_JFK == 1 ]] && ref_files+=("$JFK")
  [[ $RUN_LJ == 1 ]] && mapfile -t -O "${#ref_files[@]}" ref_files < <(find "$LJ_DIR" -maxdepth 1 -name '*.wav' | sort)
  echo "reference words: $WAAV transcribe --json --word-timestamps --model $REFERENCE_MODEL (CPU)"
  "$WAAV" transcribe --json --word-timestamps --model "$REFERENCE_MODEL" "${ref_files[@]}" \
    > "$REFERENCE_WORDS" || die "waav transcribe failed to make the reference words"
fi

pin() {  # pin CPUS CMD...: run CMD under taskset when CPUS is set
  local cpus="$1"; shift
  if [[ -n "$cpus" ]]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

# The same, replacing the (sub)shell: `pin_exec ... &` makes $! the server's own pid, so that
# stop_waavd's SIGTERM reaches waavd rather than a subshell that would leave it running.
pin_exec() {
  local cpus="$1"; shift
  if [[ -n "$cpus" ]]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}

SERVER="127.0.0.1:$PORT"
WAAVD_PID=""
stop_waavd() {
  if [[ -n "$WAAVD_PID" ]] && kill -0 "$WAAVD_PID" 2>/dev/null; then
    kill -TERM "$WAAVD_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$WAAVD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$WAAVD_PID" 2>/dev/null || true
  fi
  WAAVD_PID=""
}
trap stop_waavd EXIT

echo "== streaming latency benchmark (issue 3) =="
echo "date:       $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host:       $(uname -srm)"
echo "cpu:        $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
echo "cpus:       $(nproc --all) online, $(nproc) usable by this process"
echo "memory:     $(free -h 2>/dev/null | awk '/^Mem:/ {print $2 " total, " $7 " available"}')"
echo "load avg:   $(cut -d' ' -f1-3 /proc/loadavg) (at start)"
echo "git:        $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (modified)')"
echo "waavd:      $WAAVD $WAAVD_ARGS (cpus: ${WAAVD_CPUS:-any})"
echo "waav-load:  $WAAV_LOAD (cpus: ${LOAD_CPUS:-any})"
echo "output:     $OUT"
echo "reference:  ${REFERENCE_WORDS:-the server's own word times (its finals' alignment)}"
echo
echo "method: every stream sends a WAV file as LINEAR16 at its own rate, ${CHUNK_MS} ms per"
echo "message at real-time pace (steady clock), then ${TAIL_MS} ms of silence, then half-closes;"
echo "interim results and word time offsets on. N slots run at once (starts spread over"
echo "${SPREAD_MS} ms); jfk: each slot streams it ${REPS} times; LJ: each slot streams clips in"
echo "turn for ${LJ_DURATION_S} s. Latency of a word = arrival of the"
echo "result minus the moment its last sample was spoken (t0 + word end_ms): first partial = the"
echo "earliest result holding the word, final = its final result. A step keeps up when every"
echo "stream ends OK, every final arrives within 2000 ms of its utterance's end, the server's"
echo "backlog stays within 1000 ms and no chunk is written over 1000 ms late (docs/client.md)."
echo

echo "starting: $WAAVD --listen $SERVER $WAAVD_ARGS"
# shellcheck disable=SC2086  # WAAVD_ARGS is a list of arguments on purpose
pin_exec "$WAAVD_CPUS" "$WAAVD" --listen "$SERVER" $WAAVD_ARGS >"$OUT/waavd.log" 2>&1 &
WAAVD_PID=$!
for i in $(seq 1 600); do
  if ! kill -0 "$WAAVD_PID" 2>/dev/null; then
    echo "waavd exited during start-up; the end of its log:" >&2
    tail -20 "$OUT/waavd.log" >&2
    exit 1
  fi
  if "$WAAV" health --server "$SERVER" --timeout 1 >/dev/null 2>&1; then break; fi
  if [[ $i == 600 ]]; then die "waavd did not become SERVING within 60 s (log: $OUT/waavd.log)"; fi
  sleep 0.1
done
echo "waavd is SERVING (pid $WAAVD_PID)"
echo

run_load() {  # run_load NAME REPETITION-OPTION VALUE FILE...
  local name="$1" repetition="$2" value="$3"; shift 3
  local cmd=("$WAAV_LOAD" --server "$SERVER" --ramp "$RAMP" "$repetition" "$value"
             --chunk-ms "$CHUNK_MS" --tail-silence-ms "$TAIL_MS" --spread-ms "$SPREAD_MS"
             --settle-s 3 -v --json-out "$OUT/$name.json"
             ${REFERENCE_WORDS:+--reference-words "$REFERENCE_WORDS"})
  echo "== $name: $# file(s) =="
  echo "command: ${cmd[*]} FILES"
  pin "$LOAD_CPUS" "${cmd[@]}" "$@" | tee "$OUT/$name.txt"
  echo
}

if [[ $RUN_JFK == 1 ]]; then run_load jfk --reps "$REPS" "$JFK"; fi
if [[ $RUN_LJ == 1 ]]; then
  mapfile -t LJ_FILES < <(find "$LJ_DIR" -maxdepth 1 -name '*.wav' | sort)
  [[ ${#LJ_FILES[@]} -gt 0 ]] || die "no .wav files in $LJ_DIR"
  run_load ljspeech --duration-s "$LJ_DURATION_S" "${LJ_FILES[@]}"
fi

echo "load avg:   $(cut -d' ' -f1-3 /proc/loadavg) (at the end)"
stop_waavd
echo "reports:    $OUT/*.json, $OUT/*.txt; waavd log: $OUT/waavd.log"

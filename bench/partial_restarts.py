#!/usr/bin/env python3
"""How often waavd's interim results show Whisper starting an utterance over, and what they cost.

Streams every clip of ../shared/data (jfk.wav and the LJ Speech clips) to a running waavd with
`waav stream --json` at real-time pace, `--parallel` at a time, and prints the number of interim
results, how many of them hold a restart (the words from word p on repeat the utterance's words
from word s <= 2 on, to the end of the result: 2 words or more from word 0, 4 or more from word
1 or 2; the rule of streaming::RestartStart), each such transcript, and the interims' summed
decoder steps (a partial's `decoder_steps`). Start waavd with the configuration to measure:

  build/ci/server/waavd --listen 127.0.0.1:50078 --metrics-listen "" --partial-interval-ms 250 &
  bench/partial_restarts.py --waav build/ci/tools/waav/waav --server 127.0.0.1:50078
"""
import argparse
import glob
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor


def words(text):
    return re.sub(r"[^a-z0-9 ]+", " ", text.lower().replace("-", " ")).split()


def has_restart(w):
    for p in range(2, len(w)):
        for s in range(0, 3):
            if s + 2 > p:
                break
            needed = 2 if s == 0 else 4
            if len(w) - p >= needed and w[p:] == w[s:s + len(w) - p]:
                return True
    return False


def stream(waav, server, path):
    out = subprocess.run([waav, "stream", "--server", server, "--json", path],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{path}: waav stream exited {out.returncode}: {out.stderr[-500:]}")
    interims, steps, restarts = 0, 0, []
    for line in out.stdout.splitlines():
        result = json.loads(line).get("result")
        if not result or result.get("is_final"):
            continue
        interims += 1
        steps += result.get("latency", {}).get("decoder_steps", 0)
        alternatives = result.get("alternatives") or [{}]
        text = alternatives[0].get("transcript", "")
        if has_restart(words(text)):
            restarts.append(text)
    return interims, steps, restarts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--waav", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    speech = os.path.join(args.data, "speech")
    files = [os.path.join(speech, "jfk.wav")] + sorted(
        glob.glob(os.path.join(speech, "ljspeech", "*.wav")))
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda f: stream(args.waav, args.server, f), files))
    print(f"{len(files)} clips: interims {sum(r[0] for r in results)}, with a restart "
          f"{sum(len(r[2]) for r in results)}, decoder steps {sum(r[1] for r in results)}")
    for r in results:
        for text in r[2]:
            print("  ", text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Word error rate of waavd's streamed finals against reference transcripts.

Starts waavd with the given arguments, streams every clip (jfk.wav and the LJ Speech clips of
../shared/data) at real-time pace with `waav stream --json` (interim results on, as a client
would: the partials' committed words are the finals' forced prefix, so partials shape finals),
`--parallel` streams at a time, joins each stream's final transcripts and scores them against
the references (lower case, punctuation dropped; word-level edit distance). Prints per-clip
differences and the total, and the waavd arguments, so that two configurations can be compared
side by side:

  bench/streaming_wer.py --waavd build/ci/server/waavd --waav build/ci/tools/waav/waav \\
      --waavd-args "--partial-window-ms 0" [--parallel 4] [--data ../shared/data]
"""
import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

JFK_REFERENCE = ("And so my fellow Americans, ask not what your country can do for you, "
                 "ask what you can do for your country.")


def words(text):
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            up = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1]))
            diagonal = up
    return row[len(b)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream(waav, server, path):
    out = subprocess.run([waav, "stream", "--server", server, "--json", path],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{path}: waav stream exited {out.returncode}: {out.stderr[-500:]}")
    finals = []
    for line in out.stdout.splitlines():
        result = json.loads(line).get("result", {})
        if result.get("is_final"):
            finals.append(result["alternatives"][0]["transcript"])
    return " ".join(finals)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waavd", required=True)
    parser.add_argument("--waav", required=True)
    parser.add_argument("--waavd-args", default="")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args()

    clips = [(os.path.join(args.data, "speech/jfk.wav"), JFK_REFERENCE)]
    lj = os.path.join(args.data, "speech/ljspeech")
    with open(os.path.join(lj, "transcripts.txt")) as f:
        for line in f:
            name, _, text = line.strip().partition("|")
            if name:
                clips.append((os.path.join(lj, name), text))

    port = free_port()
    server = f"127.0.0.1:{port}"
    command = [args.waavd, "--listen", server] + shlex.split(args.waavd_args)
    print("waavd:", " ".join(command))
    print(f"clips: {len(clips)}, {args.parallel} streams at a time, real-time pace, interim on")
    log = open(os.devnull, "w")
    daemon = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        for _ in range(300):
            ok = subprocess.run([args.waav, "health", "--server", server, "--timeout", "1"],
                                capture_output=True).returncode == 0
            if ok:
                break
            if daemon.poll() is not None:
                sys.exit(f"waavd exited {daemon.returncode}")
            time.sleep(0.1)
        started = time.time()
        with ThreadPoolExecutor(args.parallel) as pool:
            texts = list(pool.map(lambda clip: stream(args.waav, server, clip[0]), clips))
        elapsed = time.time() - started
    finally:
        daemon.terminate()
        daemon.wait(30)

    edits = total = 0
    for (path, reference), text in zip(clips, texts):
        ref, hyp = words(reference), words(text)
        e = edit_distance(ref, hyp)
        edits += e
        total += len(ref)
        if e:
            print(f"  {os.path.basename(path)}: {e} edits\n    ref: {reference}\n    got: {text}")
    print(f"finals' WER: {edits}/{total} = {100.0 * edits / total:.2f}% "
          f"({len(clips)} clips in {elapsed:.0f} s)")


if __name__ == "__main__":
    main()

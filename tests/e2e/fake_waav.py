"""A stand-in for `waav transcribe`, built on faster-whisper, to test the test harness and the
benchmark before (and apart from) the real binary.

  python fake_waav.py transcribe FILE... [--json] [--threads N] [--model DIR]

It behaves as waav's CLI is specified to: reads each WAV through tests/reference/audio16k.py,
prints the stripped transcript per file (or with --json one JSON object per line with file,
duration_s, text, segments[start, end, text]), and on a file it cannot read prints one line naming
the file on stderr and exits 1.

Environment:
  FAKE_WAAV_CACHE_DIR  use the cached faster-whisper reference results (instant when warm) instead
                       of transcribing; the e2e self-test sets it, the benchmark does not.
  FAKE_WAAV_MUTATE     NAME (e.g. LJ001-0002.wav): that file's text gets a word appended;
                       NAME:timestamps: its first segment ends 0.5 s later. To check that the
                       e2e tests do fail on a wrong transcript or wrong timestamps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import audio16k  # noqa: E402
import faster_whisper_reference as fwr  # noqa: E402


def _transcribe(paths: list[str], model_dir: str, threads: int) -> dict[str, dict]:
    cache_dir = os.environ.get("FAKE_WAAV_CACHE_DIR")
    if cache_dir:
        return fwr.transcribe_files(paths, model_dir, cache_dir, log=lambda msg: None)
    model = fwr.load_model(model_dir, cpu_threads=threads)
    return {p: fwr.transcribe_audio(model, audio16k.load_16k(p), p) for p in paths}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="waav")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("transcribe")
    t.add_argument("files", nargs="+")
    t.add_argument("--json", action="store_true")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--model", default=os.path.join(os.environ.get("WAAV_MODELS_DIR", "models"),
                                                   "whisper-tiny.en"))
    args = parser.parse_args(argv)

    # Read every file first, as a real CLI would before loading a model, so errors come early.
    for path in args.files:
        try:
            audio16k.load_wav(path)
        except audio16k.WavError as e:
            print(f"waav: error: {e}", file=sys.stderr)
            return 1
    results = _transcribe(args.files, args.model, args.threads)
    mutate = os.environ.get("FAKE_WAAV_MUTATE")
    for path in args.files:
        r = results[path]
        segments = [{k: s[k] for k in ("start", "end", "text")} for s in r["segments"]]
        text = r["text"]
        if mutate == os.path.basename(path):
            text += " mutated"
        elif mutate == os.path.basename(path) + ":timestamps":
            segments[0]["end"] += 0.5
        if args.json:
            out = {"file": path, "duration_s": r["duration_s"], "text": text, "segments": segments}
            print(json.dumps(out, ensure_ascii=False))
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""faster-whisper transcripts of WAV files: the reference `waav transcribe` is checked against.

The decoding settings are those waav implements: Whisper greedy search (beam_size=1) at a single
temperature 0.0, so there is no sampling fallback and the result is deterministic; no VAD; English;
every other transcribe() option at faster-whisper 1.2.1's default (condition_on_previous_text,
compression-ratio / log-prob / no-speech thresholds, suppress_blank, suppress_tokens=[-1],
max_initial_timestamp=1.0, timestamps on). The model runs on the CPU in float32 with 2 threads.

The audio is NOT decoded by faster-whisper (which would use PyAV and its own resampler): every file
goes through tests/reference/audio16k.py (libsoxr "HQ", as waav does) and the 16 kHz float32 array
is handed to transcribe(), so faster-whisper and waav see the same samples.

Results are cached as JSON in a directory, one file per WAV, keyed by the sha256 of the model's
model.bin, the WAV file's bytes, the source of this script and of audio16k.py, and the
faster-whisper / ctranslate2 versions; a re-run with nothing changed loads no model.

Output per file (also what `--json` of waav carries, plus debugging fields):
  {"file", "duration_s", "text": segment texts joined and stripped,
   "segments": [{"id", "seek", "start", "end", "text", "tokens", "avg_logprob",
                 "compression_ratio", "no_speech_prob", "temperature"}, ...]}

Usage: python faster_whisper_reference.py --model MODEL_DIR --cache-dir DIR WAV...
prints one JSON object per line, in the order of the arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from typing import Callable, Iterable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import audio16k  # noqa: E402

CPU_THREADS = 2
# Passed to WhisperModel.transcribe(); everything not named here is faster-whisper's default.
TRANSCRIBE_OPTIONS = dict(
    language="en",
    task="transcribe",
    beam_size=1,
    temperature=0.0,  # one temperature: no fallback to sampling
    vad_filter=False,
)


def load_model(model_dir: str, cpu_threads: int = CPU_THREADS):
    # Checked here: given a path that does not exist, faster-whisper would try a model hub.
    if not os.path.isfile(os.path.join(model_dir, "model.bin")):
        raise FileNotFoundError(f"{model_dir}: no model.bin (a CTranslate2 Whisper model folder)")
    from faster_whisper import WhisperModel

    return WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=cpu_threads)


def transcribe_audio(model, audio, path: str) -> dict:
    """Runs faster-whisper on 16 kHz float32 samples; returns the JSON-ready result."""
    segments_iter, info = model.transcribe(audio, **TRANSCRIBE_OPTIONS)
    segments = []
    for s in segments_iter:  # a generator: decoding happens here
        d = dataclasses.asdict(s)
        d.pop("words", None)
        segments.append(d)
    return {
        "file": path,
        "duration_s": info.duration,
        "text": "".join(s["text"] for s in segments).strip(),
        "segments": segments,
    }


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _code_fingerprint() -> str:
    import ctranslate2
    import faster_whisper

    h = hashlib.sha256()
    for source in (os.path.abspath(__file__), audio16k.__file__):
        h.update(_sha256_file(source).encode())
    h.update(f"faster-whisper {faster_whisper.__version__}".encode())
    h.update(f"ctranslate2 {ctranslate2.__version__}".encode())
    h.update(f"threads {CPU_THREADS}".encode())
    return h.hexdigest()


def transcribe_files(
    wavs: Iterable[str],
    model_dir: str,
    cache_dir: str,
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr),
) -> dict[str, dict]:
    """Reference results for each WAV path (cached); the model is loaded only on a cache miss."""
    os.makedirs(cache_dir, exist_ok=True)
    fixed = hashlib.sha256(
        (_sha256_file(os.path.join(model_dir, "model.bin")) + _code_fingerprint()).encode()
    ).hexdigest()
    model = None
    results = {}
    for path in wavs:
        key = hashlib.sha256((fixed + _sha256_file(path)).encode()).hexdigest()
        cache_path = os.path.join(cache_dir, f"fw-{key}.json")
        if os.path.exists(cache_path):
            with open(cache_path, encoding="utf-8") as f:
                result = json.load(f)
        else:
            if model is None:
                log(f"faster-whisper reference: loading {model_dir}")
                model = load_model(model_dir)
            log(f"faster-whisper reference: transcribing {path}")
            result = transcribe_audio(model, audio16k.load_16k(path), path)
            # Written whole, then renamed: a concurrent or interrupted run never sees half a file.
            fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(result, f)
            os.replace(tmp, cache_path)
        result["file"] = path  # the key ignores the path; report the one asked for
        results[path] = result
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="faster-whisper reference transcripts (cached)")
    parser.add_argument("--model", required=True, help="CTranslate2 Whisper model folder")
    parser.add_argument("--cache-dir", required=True, help="where results are cached")
    parser.add_argument("wavs", nargs="+")
    args = parser.parse_args(argv)
    try:
        results = transcribe_files(args.wavs, args.model, args.cache_dir)
    except audio16k.WavError as e:
        print(e, file=sys.stderr)
        return 1
    for path in args.wavs:
        print(json.dumps(results[path], ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""faster-whisper word timestamps of WAV files: the reference waav's word alignment is checked against.

Settings are those of a waav final result: one window decoded greedily (beam_size=1, temperature
0.0) with the prompt <|startoftranscript|> <|notimestamps|> (without_timestamps=True), no VAD,
English, word_timestamps=True with faster-whisper 1.2.1's default punctuation, float32 on the CPU.
Clips must be shorter than 30 s (one window). The audio goes through tests/reference/audio16k.py,
as for the other references, so faster-whisper and waav see the same samples.

Prints one JSON object per WAV, in argument order:
  {"file", "tokens": the window's text tokens,
   "token_starts": per text token and the final <|endoftext|>, the first encoder position (20 ms)
                   of its row on CTranslate2's DTW path (what align() returns, before any
                   post-processing),
   "words": [{"word", "start", "end", "probability"}]: the words transcribe() returns (seconds,
            rounded to 0.01 s, after faster-whisper's clean-ups)}

With --transcribe, the whole file is transcribed as `waav transcribe --word-timestamps` does it:
faster-whisper's defaults (timestamps on, condition_on_previous_text, thresholds) with beam 1,
temperature 0.0, no VAD, English and word_timestamps=True, and the output is
  {"file", "segments": [{"start", "end", "text", "words": [{"word", "start", "end",
                                                             "probability"}]}]}

Usage: python word_timestamps_reference.py --model MODEL_DIR [--transcribe] WAV...
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import audio16k  # noqa: E402

CPU_THREADS = 2
TRANSCRIBE_OPTIONS = dict(
    language="en",
    task="transcribe",
    beam_size=1,
    temperature=0.0,
    vad_filter=False,
    without_timestamps=True,
    word_timestamps=True,
)


class _AlignRecorder:
    """Stands in for the CTranslate2 model and records what align() returns."""

    def __init__(self, model):
        self._model = model
        self.alignments = []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def align(self, *args, **kwargs):
        results = self._model.align(*args, **kwargs)
        for result in results:
            self.alignments.append([tuple(pair) for pair in result.alignments])
        return results


def token_starts(alignment: list[tuple[int, int]]) -> list[int]:
    starts: dict[int, int] = {}
    for row, col in alignment:
        starts.setdefault(int(row), int(col))
    return [starts[row] for row in sorted(starts)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="faster-whisper word timestamps")
    parser.add_argument("--model", required=True, help="CTranslate2 Whisper model folder")
    parser.add_argument("--transcribe", action="store_true", help="whole files, timestamps on")
    parser.add_argument("wavs", nargs="+")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.model, "model.bin")):
        print(f"{args.model}: no model.bin", file=sys.stderr)
        return 1
    from faster_whisper import WhisperModel

    model = WhisperModel(
        args.model, device="cpu", compute_type="float32", cpu_threads=CPU_THREADS
    )
    recorder = _AlignRecorder(model.model)
    model.model = recorder
    for path in args.wavs:
        try:
            audio = audio16k.load_16k(path)
        except audio16k.WavError as e:
            print(e, file=sys.stderr)
            return 1
        if args.transcribe:
            options = dict(TRANSCRIBE_OPTIONS, without_timestamps=False)
            segments, _ = model.transcribe(audio, **options)
            out = [
                dict(
                    start=s.start,
                    end=s.end,
                    text=s.text,
                    words=[
                        dict(word=w.word, start=w.start, end=w.end, probability=w.probability)
                        for w in (s.words or [])
                    ],
                )
                for s in segments
            ]
            print(json.dumps(dict(file=path, segments=out), ensure_ascii=False))
            continue
        if audio.size >= 30 * audio16k.TARGET_RATE_HZ:
            print(f"{path}: longer than one 30 s window", file=sys.stderr)
            return 1
        recorder.alignments.clear()
        segments, _ = model.transcribe(audio, **TRANSCRIBE_OPTIONS)
        # Only the first window: with word timestamps faster-whisper seeks to the last word's
        # end and decodes the rest of the audio again as a new window (often hallucinating on
        # the silence there); a waav final result is one window.
        first = []
        for s in segments:
            if s.seek != 0:
                break
            first.append(s)
        eot = model.hf_tokenizer.token_to_id("<|endoftext|>")
        tokens = [t for s in first for t in s.tokens if t < eot]
        words = [
            dict(word=w.word, start=w.start, end=w.end, probability=w.probability)
            for s in first
            for w in (s.words or [])
        ]
        print(
            json.dumps(
                dict(
                    file=path,
                    tokens=tokens,
                    token_starts=token_starts(recorder.alignments[0]) if tokens else [],
                    words=words,
                ),
                ensure_ascii=False,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""How late Silero VAD judges speech to have started, per clip (why utterances pad their start).

For every LJ Speech clip of ../shared/data: the clip's onset (its first 32 ms frame whose level
is within --onset-db of its loudest frame) and the first frame whose speech probability reaches
--threshold, both in ms from the clip's start, and their difference (the lag). Silero runs as
waav runs it: 512-sample frames at 16 kHz with 64 samples of context, one state per stream.
Cases of what the VAD heard before the clip:

  cold   nothing: the clip is the stream's first audio (a fresh state);
  zeros  1 s of digital silence;
  warm   another clip and then 1 s of faint noise (-60 dBFS), as in a stream of utterances;
  N s    another clip and then N s of faint noise: a pause (Silero's state cools again).

The engine pads the start of an utterance by `cold_start_pad_ms` where the VAD hears it cold (a
stream's first, or one after `cold_after_ms` without an utterance) and by `speech_pad_ms`
otherwise (docs/streaming.md, "Endpointing"): a lag longer than that puts the window's start
inside the first word. Needs numpy and onnxruntime
(scripts/setup puts them in .venv):

  .venv/bin/python bench/vad_onset_lag.py --model models/silero-vad/silero_vad_16k_op15.onnx
"""
import argparse
import glob
import os
import wave

import numpy as np
import onnxruntime as ort

FRAME = 512
CONTEXT = 64
RATE = 16000


def read_16k(path):
    with wave.open(path) as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise SystemExit(f"{path}: expected 16-bit mono PCM")
        rate = w.getframerate()
        x = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
    if rate == RATE:
        return x
    t = np.arange(0, len(x) / rate, 1 / RATE)  # linear resampling: enough for a level and a VAD
    return np.interp(t, np.arange(len(x)) / rate, x).astype(np.float32)


def probabilities(session, x):
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros(CONTEXT, np.float32)
    out = []
    for i in range(0, len(x) - FRAME + 1, FRAME):
        frame = x[i:i + FRAME]
        p, state = session.run(None, {"input": np.concatenate([context, frame])[None, :],
                                      "state": state, "sr": np.array(RATE, np.int64)})
        context = frame[-CONTEXT:]
        out.append(float(p[0][0]))
    return out


def onset_frame(x, onset_db):
    levels = np.array([20 * np.log10(np.sqrt(np.mean(x[i:i + FRAME] ** 2)) + 1e-9)
                       for i in range(0, len(x) - FRAME + 1, FRAME)])
    return int(np.argmax(levels > levels.max() - onset_db))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="silero_vad_16k_op15.onnx")
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "../../shared/data"))
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--onset-db", type=float, default=25.0)
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(args.data, "speech/ljspeech/*.wav")))
    if not files:
        raise SystemExit(f"no LJ Speech clips under {args.data}/speech/ljspeech")
    session = ort.InferenceSession(args.model)
    rng = np.random.default_rng(1)
    print(f"threshold {args.threshold}, onset: first frame within {args.onset_db} dB of the "
          f"loudest; lag = first speech frame - onset (ms; a frame is 32 ms)")
    pauses_s = (5, 10, 30)
    cases = ["cold", "zeros", "warm"] + [f"{n} s" for n in pauses_s]
    print(f"{'clip':16} {'onset':>6} " + " ".join(f"{c:>12}" for c in cases))
    lags = {case: [] for case in cases}
    for n, path in enumerate(files):
        x = read_16k(path)
        onset = onset_frame(x, args.onset_db)
        other = read_16k(files[(n + 1) % len(files)])
        leads = {
            "cold": np.zeros(0, np.float32),
            "zeros": np.zeros(RATE, np.float32),
            "warm": np.concatenate([other, (0.001 * rng.standard_normal(RATE)).astype(np.float32)]),
        }
        for pause in pauses_s:
            noise = (0.001 * rng.standard_normal(pause * RATE)).astype(np.float32)
            leads[f"{pause} s"] = np.concatenate([other, noise])
        cells = []
        for case, lead in leads.items():
            lead = lead[:len(lead) // FRAME * FRAME]
            p = probabilities(session, np.concatenate([lead, x]))[len(lead) // FRAME:]
            first = next((i for i, v in enumerate(p) if v >= args.threshold), None)
            if first is None:
                cells.append(f"{'none':>12}")
                continue
            lag = (first - onset) * 32
            lags[case].append(lag)
            cells.append(f"{first * 32:>5} ({lag:>4})")
        print(f"{os.path.basename(path):16} {onset * 32:>6} " + " ".join(cells))
    for case, values in lags.items():
        v = np.array(values)
        print(f"{case}: lag median {np.median(v):.0f} ms, max {v.max()} ms, over 200 ms in "
              f"{int((v > 200).sum())} of {len(v)} clips, over 400 ms in {int((v > 400).sum())}")


if __name__ == "__main__":
    main()

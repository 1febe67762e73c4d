"""Silero VAD speech probabilities from onnxruntime: the reference for waav's SileroVad.

Runs a Silero VAD ONNX file on 16 kHz float32 samples frame by frame, carrying the state the way
silero-vad's own OnnxWrapper (silero_vad/utils_vad.py, 6.2.3) does for 16 kHz:

  * frames of 512 samples; a trailing partial frame is dropped;
  * each frame is preceded by the last 64 samples of the previous frame (zeros for the first),
    so the model sees 576 samples;
  * `state` [2, 1, 128] starts at zero and is replaced by `stateN` after each frame;
  * `sr` is 16000.

onnxruntime runs on one thread with graph optimisations at their default level. Needs only numpy
and onnxruntime.

Usage: vad_reference.py --model FILE.onnx INPUT.f32 OUTPUT.f32 [INPUT.f32 OUTPUT.f32 ...]
(raw little-endian float32 in and out: samples in, one probability per frame out).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnxruntime as ort

SAMPLE_RATE_HZ = 16000
FRAME_SAMPLES = 512
CONTEXT_SAMPLES = 64


def probabilities(session: ort.InferenceSession, samples: np.ndarray) -> np.ndarray:
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, CONTEXT_SAMPLES), dtype=np.float32)
    sr = np.array(SAMPLE_RATE_HZ, dtype=np.int64)
    frames = len(samples) // FRAME_SAMPLES
    out = np.empty(frames, dtype=np.float32)
    for i in range(frames):
        frame = samples[i * FRAME_SAMPLES:(i + 1) * FRAME_SAMPLES].reshape(1, FRAME_SAMPLES)
        x = np.concatenate([context, frame], axis=1)
        prob, state = session.run(None, {"input": x, "state": state, "sr": sr})
        out[i] = prob[0, 0]
        context = x[:, -CONTEXT_SAMPLES:]
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("files", nargs="+", help="INPUT.f32 OUTPUT.f32 pairs")
    args = parser.parse_args(argv)
    if len(args.files) % 2 != 0:
        parser.error("files must come in INPUT OUTPUT pairs")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    for src, dst in zip(args.files[0::2], args.files[1::2]):
        samples = np.fromfile(src, dtype="<f4")
        probabilities(session, samples).astype("<f4").tofile(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

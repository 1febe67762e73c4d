"""onnxruntime running Silero VAD: time per 512-sample frame per stream, for comparison with
bench/vad_bench (waav's SileroVad on the CPU backend) on the same file and machine.

One session.run() per call with B streams ([B, 576] input: 64 context + 512 samples, state
[2, B, 128]), as silero-vad's OnnxWrapper does for a batch; inputs are white noise at -20 dBFS.
Reported: median over --reps repetitions of (wall time of --calls calls) / (calls * B).

Usage: vad_onnxruntime.py --model models/silero-vad/silero_vad_16k_op15.onnx [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def per_stream_frame_us(session: ort.InferenceSession, batch: int, calls: int) -> float:
    rng = np.random.default_rng(7)
    x = (0.1 * rng.standard_normal((batch, 576))).astype(np.float32)
    state = np.zeros((2, batch, 128), dtype=np.float32)
    sr = np.array(16000, dtype=np.int64)
    for _ in range(10):  # warm-up
        _, state = session.run(None, {"input": x, "state": state, "sr": sr})
    start = time.perf_counter()
    for _ in range(calls):
        _, state = session.run(None, {"input": x, "state": state, "sr": sr})
    return (time.perf_counter() - start) / (calls * batch) * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batches", default="1,8,32,128")
    args = parser.parse_args(argv)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    print(f"onnxruntime {ort.__version__}, {args.threads} thread(s), {args.model}")
    for batch in (int(b) for b in args.batches.split(",")):
        calls = max(20, 4000 // batch)
        runs = [per_stream_frame_us(session, batch, calls) for _ in range(args.reps)]
        print(f"batch {batch:4d}: {statistics.median(runs):8.1f} us per stream frame "
              f"(min {min(runs):.1f}, max {max(runs):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

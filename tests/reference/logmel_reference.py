#!/usr/bin/env python3
"""faster-whisper 1.2.1's log-mel features, for waav's front-end parity test.

Each INPUT is a raw little-endian float32 file of 16 kHz mono samples (written by the C++ test,
so that both sides see the very same samples); the matching OUTPUT receives
FeatureExtractor()(samples) — default padding=160 — as raw float32, row-major [n_mels, n_frames].
With --filters, the filterbank (FeatureExtractor.mel_filters, [n_mels, n_fft/2 + 1]) is written
too. One line per input goes to stdout: "<output> <n_mels> <n_frames>".

usage: logmel_reference.py [--n-mels N] [--filters FILE] INPUT OUTPUT [INPUT OUTPUT ...]
"""
import argparse
import sys

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n-mels", type=int, default=80)
    p.add_argument("--filters")
    p.add_argument("files", nargs="+", help="INPUT OUTPUT pairs")
    args = p.parse_args()
    if len(args.files) % 2 != 0:
        p.error("expected INPUT OUTPUT pairs")

    from faster_whisper.feature_extractor import FeatureExtractor

    extractor = FeatureExtractor(feature_size=args.n_mels)
    if args.filters:
        np.ascontiguousarray(extractor.mel_filters, dtype=np.float32).tofile(args.filters)
    for input_path, output_path in zip(args.files[0::2], args.files[1::2]):
        samples = np.fromfile(input_path, dtype="<f4")
        features = extractor(samples)
        np.ascontiguousarray(features, dtype=np.float32).tofile(output_path)
        print(output_path, features.shape[0], features.shape[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

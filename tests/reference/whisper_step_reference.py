#!/usr/bin/env python3
"""CTranslate2 reference for one Whisper window, for waav's model parity test.

Given 16 kHz float32 samples (raw little-endian file), computes with faster-whisper 1.2.1's
feature extractor and CTranslate2 (float32, CPU) exactly what faster-whisper's first window does
with beam 1 and temperature 0, and writes raw float32/int32 files to OUT_DIR:

  mel.f32          [n_mels, 3000]   the padded log-mel window fed to the encoder
  encoder.f32      [1500, d_model]  encoder output
  tokens.i32       [n]              sampled tokens (no final <|endoftext|>)
  step_logits.f32  [steps, n_vocab] logits after the decoding rules, one row per step
                                    (disabled entries hold the lowest float), steps = n + 1
                                    when it ended
  meta.txt         key=value: n_mels, d_model, n_vocab, steps, no_speech_prob, score
"""
import argparse
import os

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("samples_f32")
    p.add_argument("out_dir")
    args = p.parse_args()

    import ctranslate2
    import tokenizers
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    samples = np.fromfile(args.samples_f32, dtype=np.float32)
    model = ctranslate2.models.Whisper(args.model_dir, device="cpu", compute_type="float32",
                                       intra_threads=2)
    hf = tokenizers.Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    tokenizer = Tokenizer(hf, model.is_multilingual, task="transcribe", language="en")

    extractor = FeatureExtractor(feature_size=model.n_mels)
    features = extractor(samples)
    window = np.ascontiguousarray(pad_or_trim(features[:, : features.shape[-1] - 1]),
                                  dtype=np.float32)
    encoder_output = model.encode(ctranslate2.StorageView.from_array(window[None]))
    encoder_np = np.array(encoder_output)[0].astype(np.float32)

    prompt = list(tokenizer.sot_sequence)
    result = model.generate(
        encoder_output, [prompt], beam_size=1, max_length=448, return_scores=True,
        return_logits_vocab=True, return_no_speech_prob=True, suppress_blank=True,
        suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])),
        max_initial_timestamp_index=50)[0]

    tokens = np.array(result.sequences_ids[0], dtype=np.int32)
    logits = np.stack([np.array(l, dtype=np.float32).reshape(-1) for l in result.logits[0]])

    os.makedirs(args.out_dir, exist_ok=True)
    window.tofile(os.path.join(args.out_dir, "mel.f32"))
    encoder_np.tofile(os.path.join(args.out_dir, "encoder.f32"))
    tokens.tofile(os.path.join(args.out_dir, "tokens.i32"))
    logits.astype(np.float32).tofile(os.path.join(args.out_dir, "step_logits.f32"))
    with open(os.path.join(args.out_dir, "meta.txt"), "w") as f:
        f.write(f"n_mels={window.shape[0]}\nd_model={encoder_np.shape[1]}\n")
        f.write(f"n_vocab={logits.shape[1]}\nsteps={logits.shape[0]}\n")
        f.write(f"no_speech_prob={result.no_speech_prob!r}\nscore={result.scores[0]!r}\n")


if __name__ == "__main__":
    main()

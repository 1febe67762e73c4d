// A Whisper model file with random weights, for tests and benchmarks that need the real shapes
// but not the real weights (the GPU device runs cannot carry the 75 MB model).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace waav::testing {

// Hyper-parameters of the file; the defaults are Whisper tiny.en's.
struct RandomWhisperDims {
  int n_mels = 80;
  int n_audio_ctx = 1500;
  int n_text_ctx = 448;
  int d_model = 384;
  int n_heads = 6;
  int n_layers = 4;  // encoder and decoder each
  int n_vocab = 51864;
};

// Writes `dir`/model.bin (CTranslate2 binary version 6, WhisperSpec, f16 weights) with values
// drawn from `seed`: projections uniform in ±1/sqrt(fan_in), layer-norm gains near 1, biases,
// embeddings and position encodings small, so that activations stay O(1) through the layers.
// Creates `dir` if needed. Returns false when the file cannot be written.
bool WriteRandomWhisperModel(const std::string& dir, uint32_t seed,
                             const RandomWhisperDims& dims = {});

// Where a test writes such a model: waav_<what>_<seed> in the system's temporary directory.
std::string TempModelDir(const std::string& what, uint32_t seed);

// Relative L2 error of `got` against `want` over n values, in double (the comparison of two
// models' logits): ‖got − want‖ / ‖want‖, the norm of `want` floored at 1e-15.
double RelativeL2Error(const float* got, const float* want, size_t n);

}  // namespace waav::testing

// The backend variants whisper_gpu_bench times (--list prints them): the defaults, each change
// of issue 5 against the configuration before it, the engine's knobs, and the fused, persistent
// and cluster decoder steps with their tunings and attribution profiles.
#pragma once

#include <string>
#include <vector>

#include "bench/gpu/persistent_whisper_step.h"
#include "engine/models/whisper/whisper_model.h"
#include "kernels/cuda/cuda_backend.h"

namespace waav::bench {

struct BackendVariant {
  std::string name;
  CudaBackendOptions options;
  bool capture;  // replay a captured graph; false: issue the kernels each time
  bool fused;    // decoder step from the fused kernels (bench/gpu/fused_whisper_step.h); no encoder
  bool persistent = false;  // the persistent step (bench/gpu/persistent_whisper_step.h); no encoder
  bench::PersistentStepOptions persistent_options = {};
  // The engine's step: op by op (kNever, the rows measured before it existed) or the backend's
  // prepared step where it takes the batch (kAuto: the persistent kernel up to 8 rows).
  whisper::GraphUse engine_fused_step = whisper::GraphUse::kNever;
  // WhisperModelOptions::stacked_cross_projection (false: two GEMMs per decoder layer).
  bool stacked_cross = true;
  // WhisperModelOptions::half_cross_cache (false: f32 cross K/V caches, the rows before it).
  bool half_cross = true;
  // WhisperModelOptions::absorbed_cross_attention (kNever: the K/V caches, the rows before it).
  whisper::GraphUse absorbed_cross = whisper::GraphUse::kAuto;
  // WhisperModelOptions::quantized_cross_source (kAuto: the encoder output in i8; off by default).
  whisper::GraphUse quantized_cross = whisper::GraphUse::kNever;
  // WhisperModelOptions::half_encoder_attention_output (false: f32, the rows before it).
  bool half_encoder_attention = true;
};

// Every variant, in the order the benchmark runs them.
std::vector<BackendVariant> BenchVariants();

}  // namespace waav::bench

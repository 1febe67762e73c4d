#include "bench/gpu/bench_variants.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::bench {

std::vector<BackendVariant> BenchVariants() {
  std::vector<BackendVariant> variants;
  auto add = [&](const std::string& name, CudaMath math, bool pdl, bool capture, bool fused) {
    CudaBackendOptions o;
    o.math = math;
    o.use_pdl = pdl;
    variants.push_back({name, o, capture, fused});
  };
  add("fast, eager launches", CudaMath::kFast, false, false, false);
  add("fast, CUDA graph", CudaMath::kFast, false, true, false);
  add("fast, CUDA graph + PDL", CudaMath::kFast, true, true, false);
  // The engine's DecodeStep with the backend's prepared step (WhisperModelOptions::
  // fused_decoder_step, the persistent kernel up to 8 rows with f32 cross K/V; op by op above).
  add("fast, CUDA graph + PDL, engine fused step", CudaMath::kFast, true, true, false);
  variants.back().engine_fused_step = whisper::GraphUse::kAuto;
  add("fast, eager launches, engine fused step", CudaMath::kFast, false, false, false);
  variants.back().engine_fused_step = whisper::GraphUse::kAuto;
  add("accurate, CUDA graph + PDL", CudaMath::kAccurate, true, true, false);
  // The encoder's kernels one change at a time (issue 5, encoder at batch 1): the first ones
  // (f16 conversion + cuBLAS + epilogue per GEMM, im2col for Conv1d, flash v1, separate Adds);
  // flash v2 (the default: "fast, CUDA graph + PDL"); residuals added by the GEMMs; HalfGemm for
  // all or some of the GEMMs. (docs/benchmarks.md, "Encoder at batch 1", has the rows measured.)
  // The default now: HalfGemm for N, K <= 384, residuals in the GEMMs, f16 FFN activations.
  struct EncoderStep {
    const char* name;
    bool half_gemm, flash_v2, residual, conv;
    int64_t max_k, max_n;
    bool half_activations;
  };
  for (const EncoderStep& e :
       {EncoderStep{"cuBLAS GEMMs, flash v1", false, false, false, false, 0, 0, false},
        EncoderStep{"cuBLAS GEMMs, flash v2", false, true, false, false, 0, 0, false},
        EncoderStep{"cuBLAS GEMMs (residual beta = 1), flash v2", false, true, true, false, 0, 0,
                    false},
        EncoderStep{"cuBLAS GEMMs (residual beta = 1), flash v2, f16 FFN activations", false, true,
                    true, false, 0, 0, true},
        EncoderStep{"HalfGemm, flash v2, fused residual", true, true, true, true, 0, 0, false},
        EncoderStep{"HalfGemm N,K<=384 (no conv), flash v2, fused residual", true, true, true,
                    false, 384, 384, false}}) {
    add(absl::StrCat("fast, CUDA graph + PDL, ", e.name), CudaMath::kFast, true, true, false);
    variants.back().options.use_half_gemm = e.half_gemm;
    variants.back().options.use_flash_v2 = e.flash_v2;
    variants.back().options.linear_residual = e.residual;
    variants.back().options.half_gemm_conv = e.conv;
    variants.back().options.half_gemm_max_k = e.max_k;
    variants.back().options.half_gemm_max_n = e.max_n;
    variants.back().options.half_activations = e.half_activations;
  }
  // Round 3 (enc8): the default has Q, K, V in one GEMM written as f16 planes that flash v2
  // reads directly (linear_planes); without it, the round 2 default. PDL only for grids of at
  // most one block per SM (the encoder's flash and GEMM grids launch normally).
  for (const bool pdl : {true, false}) {
    add(absl::StrCat("fast, CUDA graph", pdl ? " + PDL" : "", ", no QKV planes (round 2 default)"),
        CudaMath::kFast, pdl, true, false);
    variants.back().options.linear_planes = false;
  }
  add("fast, CUDA graph + PDL <= 1 block per SM", CudaMath::kFast, true, true, false);
  variants.back().options.pdl_max_blocks_per_sm = 1;
  add("fast, CUDA graph + PDL <= 1 block per SM, no QKV planes", CudaMath::kFast, true, true,
      false);
  variants.back().options.pdl_max_blocks_per_sm = 1;
  variants.back().options.linear_planes = false;
  // Round 4 (enc9): the encoder pass and cross projections launched without PDL
  // (Backend::LaunchHint::kLargeKernels; the decoder keeps it). Measured in round 4 with the
  // encoder pass only, as the default of that build: no gain (docs/benchmarks.md).
  add("fast, CUDA graph + PDL, encoder without PDL", CudaMath::kFast, true, true, false);
  variants.back().options.pdl_large_kernels = false;
  // Session 20: the encoder's attention output in f32 and its projection on HalfGemm (before).
  add("fast, CUDA graph + PDL, f32 encoder attention output", CudaMath::kFast, true, true, false);
  variants.back().half_encoder_attention = false;
  // Session 21: f32 GEMM outputs and a rounding pass (before); Flash v2's m-tiles forced.
  add("fast, CUDA graph + PDL, f32 GEMM outputs", CudaMath::kFast, true, true, false);
  variants.back().options.blas_half_output = false;
  for (int m_tiles : {1, 2}) {
    add(absl::StrCat("fast, CUDA graph + PDL, flash m-tiles ", m_tiles), CudaMath::kFast, true,
        true, false);
    variants.back().options.flash_m_tiles = m_tiles;
  }
  // Flash v2's key splits forced (CudaBackendOptions::flash_splits; default: as many as one wave
  // of resident blocks holds, none from 4 windows up), for the last wave's share.
  for (int splits : {1, 2, 3}) {
    add(absl::StrCat("fast, CUDA graph + PDL, flash splits ", splits), CudaMath::kFast, true, true,
        false);
    variants.back().options.flash_splits = splits;
  }
  // f16 cross K/V caches (the default) against f32 ones, for the decoder step.
  add("fast, CUDA graph + PDL, f32 cross cache", CudaMath::kFast, true, true, false);
  variants.back().half_cross = false;
  add("fast, CUDA graph + PDL, engine fused step, f32 cross cache", CudaMath::kFast, true, true,
      false);
  variants.back().engine_fused_step = whisper::GraphUse::kAuto;
  variants.back().half_cross = false;
  // Session 4: every decoder layer's cross K/V from one GEMM (the default) against two per layer.
  add("fast, CUDA graph + PDL, cross K/V per layer", CudaMath::kFast, true, true, false);
  variants.back().stacked_cross = false;
  add("fast, CUDA graph, cross K/V per layer", CudaMath::kFast, false, true, false);
  variants.back().stacked_cross = false;
  add("fast, CUDA graph + PDL, cross K/V per layer, f32 conv columns", CudaMath::kFast, true, true,
      false);
  variants.back().stacked_cross = false;
  variants.back().options.half_conv_columns = false;
  // HalfGemm's 32 x 64 tiles only (before the narrow tiles for few rows).
  add("fast, CUDA graph + PDL, no narrow HalfGemm tiles", CudaMath::kFast, true, true, false);
  variants.back().options.half_gemm_narrow_tiles = false;
  // The switch from the skinny kernel to HalfGemm / cuBLAS (default: above 8 rows) moved.
  for (int rows : {16, 32, 64}) {
    add(absl::StrCat("fast, CUDA graph + PDL, skinny <= ", rows, " rows"), CudaMath::kFast, true,
        true, false);
    variants.back().options.skinny_max_rows = rows;
  }
  // Session 11, the op-by-op step of more than 8 rows: its self- and cross-attention by
  // DecodeAttention (a block per row and key range over every head; off by default) against
  // SplitAttention (a block per row and head; the default), DecodeAttention's keys split to 2
  // blocks per SM (default 1) and its K/V loads evict-first. Each is the engine's step with one
  // knob moved; the defaults again last (order effects). (Also measured in session 11: 2 or 4
  // keys a pass at 4 and 8 blocks per SM, slower; session 10's knobs: linear_planes_append,
  // linear_residual; session 9's: split_attention_blocks_per_sm, half_gemm_planes_max_rows,
  // half_gemm_split_k_waves, half_gemm_few_rows; their rows in docs/benchmarks.md.)
  auto add_engine = [&](const std::string& name,
                        const std::function<void(CudaBackendOptions&)>& set) {
    add("engine, " + name, CudaMath::kFast, true, true, false);
    variants.back().engine_fused_step = whisper::GraphUse::kAuto;
    set(variants.back().options);
  };
  add_engine("DecodeAttention", [](auto& o) { o.decode_attention = true; });
  add_engine("DecodeAttention at 2 blocks per SM", [](auto& o) {
    o.decode_attention = true;
    o.decode_attention_blocks_per_sm = 2;
  });
  add_engine("DecodeAttention, K/V evict-first", [](auto& o) {
    o.decode_attention = true;
    o.decode_attention_evict_first = true;
  });
  // Session 16: the op-by-op step's cross-attention with the K/V projections absorbed (over
  // the encoder output, SharedKvAttention; the default) against the K/V caches.
  // Session 19: prompts over the f16 cross cache by Flash v2's split-q form (the default) or by
  // SplitAttention as before.
  add_engine("prompts' cross-attention by SplitAttention (before session 19)",
             [](auto& o) { o.flash_half_kv_min_queries = 0; });
  add_engine("K/V-cache cross-attention (before session 16)", [](auto&) {});
  variants.back().absorbed_cross = whisper::GraphUse::kNever;
  // Session 29: the absorbed cross-attention over the encoder output in i8 with a scale per
  // channel (quantized_cross_source; off by default) against f16.
  add_engine("i8 encoder output", [](auto&) {});
  variants.back().quantized_cross = whisper::GraphUse::kAuto;
  add_engine("i8 encoder output, SharedKvAttention deep pipeline",
             [](auto& o) { o.shared_kv_deep_pipeline = true; });
  variants.back().quantized_cross = whisper::GraphUse::kAuto;
  for (const int stages : {2, 3}) {
    add_engine(absl::StrCat("i8 encoder output, SharedKvAttention in ", stages, " stages"),
               [stages](auto& o) { o.shared_kv_i8_stages = stages; });
    variants.back().quantized_cross = whisper::GraphUse::kAuto;
  }
  // Session 30: three blocks of the i8 kernel fit a multiprocessor, but 256 rows make 256
  // blocks (the plan's one key range a row): three ranges make two full waves of them.
  add_engine("i8 encoder output, SharedKvAttention in 3 key ranges",
             [](auto& o) { o.shared_kv_splits = 3; });
  variants.back().quantized_cross = whisper::GraphUse::kAuto;
  // Its knobs: every GEMM of up to 16 or 32 rows by HalfGemm (the folded [384, 2304] and
  // [2304, 384] projections otherwise take cuBLAS with conversion and epilogue kernels), and
  // SharedKvAttention's key ranges forced (the plan fills the chip once: 16 ranges at 16 rows,
  // 4 at 64, 1 at 256).
  for (const int rows : {16, 32}) {
    add_engine(absl::StrCat("HalfGemm for every GEMM up to ", rows, " rows"),
               [rows](auto& o) { o.half_gemm_few_rows = rows; });
  }
  add_engine("SharedKvAttention deep pipeline, 1 block per SM",
             [](auto& o) { o.shared_kv_deep_pipeline = true; });
  for (const int splits : {2, 8}) {
    add_engine(absl::StrCat("SharedKvAttention in ", splits, " key ranges"),
               [splits](auto& o) { o.shared_kv_splits = splits; });
  }
  // Session 27: SharedKvAttention's L2 hints: the encoder output's rows that fit in n MB kept in
  // L2 (the next layer and the next step read them again): in session 27 loaded evict-last, the
  // rest evict-first; since session 30 the launch's access-policy window.
  for (const int mb : {0, 8, 16, 24, 32}) {
    add_engine(absl::StrCat("SharedKvAttention, ", mb, " MB of encoder output kept in L2"),
               [mb](auto& o) { o.shared_kv_l2_retain_bytes = int64_t{mb} << 20; });
  }
  // Session 17: the biases of cuBLAS GEMMs in cuBLASLt's epilogue (the default) against an
  // epilogue kernel after each GEMM.
  add_engine("bias after cuBLAS by a kernel (before session 17)",
             [](auto& o) { o.blas_bias_epilogue = false; });
  // And the GEMMs of fewer than half_gemm_min_rows rows that HalfGemm took before it (the
  // self-attention's output projection; Q/K/V has its own limit), now by cuBLAS, whose bias
  // costs no kernel.
  add_engine("HalfGemm for Linear of any rows (before session 17)",
             [](auto& o) { o.half_gemm_min_rows = 0; });
  add_engine("defaults (repeat)", [](auto&) {});
  add("fused step, CUDA graph + PDL", CudaMath::kFast, true, true, true);
  auto add_persistent = [&](const std::string& name, bool capture,
                            const std::function<void(bench::PersistentStepOptions&)>& set) {
    add("persistent, " + name, CudaMath::kFast, true, capture, false);
    variants.back().persistent = true;
    variants.back().persistent_options.tuning.cluster = false;  // the cooperative kernel's rows
    set(variants.back().persistent_options);
  };
  // The cluster step (kernels/cuda/cluster_decoder.cuh): one cluster of 16 blocks per row, the
  // logits in a second launch (the engine's default where the device takes it).
  auto cluster = [](bench::PersistentStepOptions& o) { o.tuning.cluster = true; };
  add_persistent("cluster step, f16 cross, CUDA graph", true, cluster);
  add_persistent("cluster step, f16 cross, direct launch", false, cluster);
  add_persistent("cluster step, argmax only (no logits out)", true, [&](auto& o) {
    cluster(o);
    o.write_logits = false;
  });
  // L2 eviction hints (default: the logits' embedding evict-first): none, and also the layers'
  // weights and cross K/V evict-last.
  add_persistent("cluster step, no L2 hints", true, [&](auto& o) {
    cluster(o);
    o.tuning.l2_hints = 0;
  });
  // Paced logits loads (PersistentStepTuning::logits_pace_ns; the default, 8 us, is the plain
  // cluster rows).
  for (const int pace_us : {4, 6, 10}) {
    add_persistent(absl::StrCat("cluster step, logits loads paced ", pace_us, " us apart"), true,
                   [&, pace_us](auto& o) {
                     cluster(o);
                     o.tuning.logits_pace_ns = 1000 * pace_us;
                   });
  }
  add_persistent("cluster step, logits loads at once", true, [&](auto& o) {
    cluster(o);
    o.tuning.logits_pace_ns = 0;
  });
  add_persistent("cluster step, logits on CUDA cores", true, [&](auto& o) {
    cluster(o);
    o.tuning.logits_mma = false;
  });
  add_persistent("cluster step, logits on CUDA cores, argmax only", true, [&](auto& o) {
    cluster(o);
    o.tuning.logits_mma = false;
    o.write_logits = false;
  });
  // The logits as before session 13 (PersistentStepTuning::logits_mma_wide false): at one row on
  // the CUDA cores, from two rows LogitsMma (the inputs as A, 8 columns per mma).
  add_persistent("cluster step, narrow logits tiles", true, [&](auto& o) {
    cluster(o);
    o.tuning.logits_mma_wide = false;
  });
  add_persistent("cluster step, narrow logits tiles, argmax only", true, [&](auto& o) {
    cluster(o);
    o.tuning.logits_mma_wide = false;
    o.write_logits = false;
  });
  add_persistent("cluster step, narrow logits tiles, profile: timeline", true, [&](auto& o) {
    cluster(o);
    o.tuning.logits_mma_wide = false;
    o.tuning.profile_mode = cuda::kProfileTimeline;
  });
  add_persistent("cluster step, L2 hints: logits evict-first, layers evict-last", true,
                 [&](auto& o) {
                   cluster(o);
                   o.tuning.l2_hints = cuda::kL2HintsKeepLayers;
                 });
  // The LayerNorms by one warp in two passes (PersistentStepTuning::cluster_norm_all_warps
  // false: the default before session 8).
  add_persistent("cluster step, LayerNorms by one warp", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_norm_all_warps = false;
  });
  // The attention partials exchanged with o as f16 (PersistentStepTuning::cluster_half_partials).
  add_persistent("cluster step, f16 attention partials", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_half_partials = true;
    o.tuning.cluster_scatter_merge = false;
  });
  // The cross-attention as before session 12: heads 4-5 beside heads 0-3 of one key per warp
  // pass, lanes 16-31 idle for them (PersistentStepTuning::cluster_balanced_cross false).
  add_persistent("cluster step, cross-attention with idle lanes", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_mma_cross = false;
    o.tuning.cluster_balanced_cross = false;
  });
  // The cross-attention on the CUDA cores, its K/V rows bulk-copied as they are
  // (PersistentStepTuning::cluster_mma_cross false: the step before session 15).
  add_persistent("cluster step, cross-attention on CUDA cores", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_mma_cross = false;
  });
  // Every block's whole attention partial to every block (PersistentStepTuning::
  // cluster_scatter_merge false: the step before session 12).
  add_persistent("cluster step, whole partials to every block", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_scatter_merge = false;
  });

  // Every weight column loaded into registers just before its phase (PersistentStepTuning::
  // cluster_staged_weights 0: the step before session 14), and only FFN2's and QKV's staged (1).
  add_persistent("cluster step, weights from L2 into registers", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_staged_weights = 0;
  });
  add_persistent("cluster step, FFN2 and QKV weights staged", true, [&](auto& o) {
    cluster(o);
    o.tuning.cluster_staged_weights = 1;
  });

  // Attribution of the cluster step (timing only, outputs wrong): one part left out each.
  const std::pair<const char*, int> cluster_profiles[] = {
      {"layers only (no logits launch)", cuda::kProfileNoLogits},
      {"cluster barriers only", cuda::kProfileBarriersOnly},
      {"no attention", cuda::kProfileNoAttention},
      {"no weight loads", cuda::kProfileNoWeights},
      {"timeline", cuda::kProfileTimeline},
      {"logits launch only", cuda::kProfileLogitsOnly}};
  for (const auto& [what, mode] : cluster_profiles) {
    add_persistent(absl::StrCat("cluster step, profile: ", what), true, [&, mode](auto& o) {
      cluster(o);
      o.tuning.profile_mode = mode;
    });
  }
  // The default: block attention, split barriers, no fusions (deterministic: session 28). The
  // variants below change one knob each ("no fusions": the configuration that the knobs after
  // it were first measured on, bench/gpu/persistent_notes.md); the fusions sum atomically.
  auto no_fusions = [](bench::PersistentStepOptions& o) {
    o.tuning.fuse_ffn = false;
    o.tuning.fuse_self_out = false;
  };
  add_persistent("f16 cross, CUDA graph", true, [](auto&) {});
  add_persistent("f16 cross, direct launch", false, [](auto&) {});
  add_persistent("f32 cross, CUDA graph", true, [](auto& o) { o.f16_cross = false; });
  add_persistent("f16 cross, no fusions", true, no_fusions);
  add_persistent("f16 cross, both fusions (atomic sums)", true, [](auto& o) {
    o.tuning.fuse_ffn = true;
    o.tuning.fuse_self_out = true;
  });
  add_persistent("f16 cross, fused FFN only", true, [](auto& o) {
    o.tuning.fuse_ffn = true;
    o.tuning.fuse_self_out = false;
  });
  add_persistent("f16 cross, fused self-attention + out-proj only", true, [](auto& o) {
    o.tuning.fuse_ffn = false;
    o.tuning.fuse_self_out = true;
  });
  // The first version's attention (warp items of 32 keys, merged by the last warp of each
  // (row, head)), alone and with the first version's one-piece barriers.
  add_persistent("f16 cross, v1 attention (warp items), no fusions", true, [&](auto& o) {
    no_fusions(o);
    o.tuning.block_attention = false;
  });
  add_persistent("f32 cross, v1 attention (warp items), no fusions", true, [&](auto& o) {
    no_fusions(o);
    o.tuning.block_attention = false;
    o.f16_cross = false;
  });
  add_persistent("f16 cross, v1 attention + one-piece barriers (the first version)", true,
                 [&](auto& o) {
                   no_fusions(o);
                   o.tuning.block_attention = false;
                   o.tuning.split_barrier = false;
                 });
  add_persistent("f16 cross, one-piece barriers (loads before arrival)", true,
                 [](auto& o) { o.tuning.split_barrier = false; });
  add_persistent("f16 cross, K/V tiles after the barrier", true,
                 [](auto& o) { o.tuning.prefetch_kv_tiles = false; });
  add_persistent("f16 cross, chunks >= 64 keys", true, [](auto& o) {
    o.tuning.cross_split_keys = 64;
    o.tuning.self_split_keys = 64;
  });
  add_persistent("f16 cross, no L2 prefetch", true, [](auto& o) { o.tuning.prefetch = false; });
  add_persistent("f16 cross, logits prefetch from layer 2", true,
                 [](auto& o) { o.tuning.logits_prefetch_layer = 2; });
  add_persistent("f16 cross, no logits prefetch", true,
                 [](auto& o) { o.tuning.logits_prefetch_layer = -1; });
  add_persistent("f16 cross, argmax only (no logits out)", true,
                 [](auto& o) { o.write_logits = false; });
  // Attribution (wrong outputs, timing only): the same kernel with one part left out. Leaving
  // the attention out also leaves the self-attention fusion out (its projection is in it).
  add_persistent("profile: grid barriers only", true,
                 [](auto& o) { o.tuning.profile_mode = cuda::kProfileBarriersOnly; });
  add_persistent("profile: no attention phases", true,
                 [](auto& o) { o.tuning.profile_mode = cuda::kProfileNoAttention; });
  add_persistent("profile: no logits phase", true,
                 [](auto& o) { o.tuning.profile_mode = cuda::kProfileNoLogits; });
  add_persistent("profile: no fusions, no attention phases", true, [&](auto& o) {
    no_fusions(o);
    o.tuning.profile_mode = cuda::kProfileNoAttention;
  });
  add_persistent("profile: v1 attention, no fusions, no attention phases", true, [&](auto& o) {
    no_fusions(o);
    o.tuning.block_attention = false;
    o.tuning.profile_mode = cuda::kProfileNoAttention;
  });
  // The default again, for the run-to-run spread within one call.
  add_persistent("f16 cross, CUDA graph (repeat)", true, [](auto&) {});
  add_persistent("cluster step, f16 cross, CUDA graph (repeat)", true, cluster);
  return variants;
}

}  // namespace waav::bench

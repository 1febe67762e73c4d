// The CUDA backend's PreparedDecoderStep (Backend::PrepareDecoderStep): the persistent decoder
// kernel (persistent_decoder.cuh), one cooperative launch per step for 1 to 8 rows of Whisper
// tiny's decoder shapes (d_model 384, 6 heads, FFN 1536, <= 4 layers). Made once from the
// model's weights: Q/K/V fused into one f16 [3d, d] matrix with one [3d] bias, f32 matrices
// converted to f16 (exact for weights that came from an f16 file), f16 ones used as they are.
// The engine's WhisperModel::DecodeStep runs it with f32 cross K/V; the GPU benchmark
// (bench/gpu/persistent_whisper_step.h) also with f16 copies, its knobs and the on-device greedy
// outputs (RunWith).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace waav::cuda {

// The kernel's knobs (persistent_decoder.cuh, PersistentDecoderParams), one per measured change
// so that the benchmark can show each one's gain; the defaults are the measured best
// (docs/benchmarks.md).
struct PersistentStepTuning {
  // The cluster step (kernels/cuda/cluster_decoder.cuh) where the device and the cross K/V's
  // element type (f16) allow it; the cooperative kernel with the knobs below otherwise.
  bool cluster = true;
  // RunAndChoose offered (ChoosesInStep) where the cluster step runs: the greedy choice and its
  // feed in the step's logits launch (used where WhisperModelOptions::step_choice asks).
  bool choice_in_step = true;
  // The cluster step's L2 eviction hints (persistent_decoder.cuh, kL2Hints*; 0: none). Default:
  // the logits' embedding loads evict-first (kL2HintsStreamLogits).
  int l2_hints = 1;
  // The cluster step's logits (the staged embedding rows) on tensor cores at two rows or more;
  // false: on the CUDA cores.
  bool logits_mma = true;
  // With logits_mma, at one to four rows: the staged embedding rows as the tensor cores' A
  // operand (16 columns per mma.sync, the rows' inputs as B's columns, B held in registers) and
  // the register-held columns first; false: at one row the CUDA cores, from two rows the
  // inputs as A (8 columns per mma.sync, A read from shared memory at every tile: the step
  // before session 13).
  bool logits_mma_wide = true;
  // The cluster step's logits loads paced over 8 slots this many ns apart where the logits
  // blocks run beside the layers (0: all at once). Default 8 us (docs/benchmarks.md, "Paced
  // logits loads").
  int logits_pace_ns = 8000;
  // The cluster step's LayerNorms by 12 warps in one pass (persistent_decoder.cuh); false: by
  // one warp in two. Default: 1-2% faster per step at 1-8 rows (docs/benchmarks.md, session 8).
  bool cluster_norm_all_warps = true;
  // The cluster step's attention partials exchanged with o as f16 (persistent_decoder.cuh): 2-3% a
  // step at 1-8 rows, but the logits ~2e-4 (relative) from the CPU's instead of ~2e-5, more than
  // the engine's fused-step parity allows (1e-5 against its op-by-op step): off by default
  // (docs/benchmarks.md, session 8).
  bool cluster_half_partials = false;
  // The cluster step's cross-attention with every lane busy (CrossAttentionBalanced in
  // cluster_decoder_parts.cuh: heads 4-5 of two keys per warp pass); false: heads 4-5 beside
  // heads 0-3 of one key, lanes 16-31 idle for them (the step before session 12).
  bool cluster_balanced_cross = true;
  // The cluster step's cross-attention on tensor cores (cluster_cross_mma.cuh: two warps a head,
  // scores and values by mma.sync with the query and the probabilities split into f16 parts and
  // rounding errors, the cross K/V staged by tensor copies into swizzled head regions); false:
  // on the CUDA cores (cluster_balanced_cross), the rows bulk-copied as they are. H100, against
  // the step before session 15 in one call: 85.3 against 87.9 us at one row, 205.9 against
  // 211.4 at 8 (docs/benchmarks.md, session 15). With cluster_scatter_merge and
  // cluster_staged_weights 2 (its own kernel); otherwise the CUDA cores.
  bool cluster_mma_cross = true;
  // The cluster step's attention partials merged by a reduce-scatter: block t merges dims
  // [24 t, 24 t + 24) of the 16 blocks' partials and sends them to every block (two exchanges of
  // ~1.8 KB received instead of one of 26 KB sent by each block; exact, f32; faster at 1 to 8
  // rows on an H100, docs/benchmarks.md, session 12). cluster_half_partials applies only
  // without it.
  bool cluster_scatter_merge = true;
  // The cluster step's weight columns staged in shared memory: bulk-copied into the cross K/V
  // stage a phase or more ahead (once the cross-attention has read it; the next layer's cross
  // K/V then copied in its out-projection phase) and read from there in their phases, instead of
  // loaded into registers from L2 just before each phase. 2: the FFN1, FFN2 and QKV columns
  // (H100: -3.5..-5 us a step at one row, -10 at 8 rows, docs/benchmarks.md, session 14); 1:
  // FFN2 and QKV only; 0: none (the step before session 14). Needs cluster_scatter_merge.
  int cluster_staged_weights = 2;
  // Grid barriers in two halves with the next phase's constant loads between (arrive, load,
  // wait).
  bool split_barrier = true;
  // LN3 + FFN1 + GELU + FFN2 as one phase, FFN2 shares summed atomically (one barrier fewer per
  // layer; the summation order varies from run to run). Off by default since session 28: the
  // cooperative kernel is the engine's step on GPUs without the cluster step (Ampere, Ada), and
  // a step must give the same logits every time it runs (docs/benchmarks.md, session 28).
  bool fuse_ffn = false;
  // With block_attention: each (row, head) of the self-attention in one block, which also applies
  // its head's slice of the output projection and adds it atomically into the residual stream
  // (one phase and barrier fewer per layer; measured at position 64 only, see
  // bench/gpu/persistent_notes.md). Off by default, as fuse_ffn.
  bool fuse_self_out = false;
  // L2 prefetch of the next layer's weights and cross K/V (sm_90).
  bool prefetch = true;
  // Prefetch the logits weights (40 MB) from the start of this layer; -1: never, -2: the last
  // layer.
  int logits_prefetch_layer = -2;
  // Attention by block chunks, K/V tiles copied before the barrier, partials merged by the
  // output projection; false: the first version (warp items, last-warp merge).
  bool block_attention = true;
  // With block_attention: issue the first K/V tile before the barrier.
  bool prefetch_kv_tiles = true;
  // Keys per warp item (first version) or the fewest keys per block chunk (block attention).
  int cross_split_keys = 32;
  int self_split_keys = 32;
  // Timing only, results wrong: kProfile* of persistent_decoder.cuh. 0: off.
  int profile_mode = 0;
};

// OK when the persistent kernel takes these dims at batch `batch`, else Unimplemented naming what
// it takes. Needs no GPU.
absl::Status CheckPersistentStepDims(const DecoderStepDims& dims, int batch = 1);

class PersistentDecoderStep final : public PreparedDecoderStep {
 public:
  // `backend` must be the CUDA backend behind `ext` and outlive the step. Allocates the
  // workspace for up to max_batch() rows and n_source cross positions and waits for the copies.
  // Unimplemented where the device runs the step for no batch (its shared memory per block too
  // small for the cooperative kernel: Ada, Ampere's 99 KB parts), so that the engine stays op by
  // op there.
  static absl::StatusOr<std::unique_ptr<PersistentDecoderStep>> Create(
      Backend& backend, CudaExtensions& ext, const DecoderStepWeights& weights,
      const PersistentStepTuning& tuning = {});

  const DecoderStepDims& dims() const override { return dims_; }
  int max_batch() const override;
  absl::Status Run(const DecoderStepIo& io) override;
  // The cluster step makes the choice in its logits launch (ClusterDecoderChooses).
  bool ChoosesInStep(const DecoderStepIo& io) const override;
  absl::Status RunAndChoose(const DecoderStepIo& io, const DecoderStepChoice& choice) override;

  // Optional outputs of the kernel's on-device greedy choice (each null/undefined: not written).
  struct Extras {
    Tensor best_token;         // i32 [B]: argmax over the tokens not suppressed (lowest id on ties)
    Tensor best_logprob;       // f32 [B]: its log-softmax value
    Tensor logsumexp;          // f32 [B]: log Σ exp over the tokens not suppressed
    Tensor suppress_bits;      // i32 [ceil(V / 32)]: bit t set suppresses token t
    bool write_logits = true;  // false: io.logits is not written
    // RunAndChoose's (out defined: the fields above but write_logits unused).
    DecoderStepChoice choice;
  };
  // Run with the extras; io.cross_k/v may be f16 (half the bytes of the largest read).
  absl::Status RunWith(const DecoderStepIo& io, const Extras& extras);

  // Whether Run takes the cluster step for `batch` rows with f16 (or f32) cross K/V on this
  // device (tuning.cluster and ClusterDecoderAvailable), for the benchmark's labels.
  bool UsesClusterStep(int batch, bool f16_cross) const;

  // After a step with tuning.profile_mode == kProfileTimeline (cluster step): block 0's clock64()
  // stamps (kClusterTimelineStamps: kernel start, then each phase's start and end; unused ones
  // as they were). Synchronises.
  absl::StatusOr<std::vector<int64_t>> ReadTimeline();

 private:
  PersistentDecoderStep(Backend& backend, CudaExtensions& ext) : backend_(backend), ext_(ext) {}

  struct Layer {
    Tensor ln1_g, ln1_b, qkv_w, qkv_b, out_w, out_b;
    Tensor ln2_g, ln2_b, cq_w, cq_b, cout_w, cout_b;
    Tensor ln3_g, ln3_b, ff1_w, ff1_b, ff2_w, ff2_b;
  };
  Backend& backend_;
  CudaExtensions& ext_;
  DecoderStepDims dims_;
  PersistentStepTuning tuning_;
  // The most rows the device runs the step for (PersistentDecoderFits: all 8 on a Hopper or an
  // A100; set by Create).
  int max_batch_ = 0;
  Tensor token_embedding_, positions_, final_g_, final_b_;
  std::vector<Layer> layers_;
  Tensor workspace_, sync_;
};

}  // namespace waav::cuda

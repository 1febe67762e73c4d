// The CUDA backend: waav::Backend on one NVIDIA GPU. The same sources compile for AMD with hipcc
// (kernels/hip/, a compile check: no HIP backend is registered yet; docs/gpu.md).
//
// Execution: every kernel, copy and graph replay goes onto one non-blocking stream, in submission
// order; nothing waits for the device except Synchronize(), CopyToHost() and EndCapture().
// Memory comes from a stream-ordered caching pool (memory_pool.h): after warm-up, Allocate never
// reaches cudaMalloc. Kernels are launched with programmatic dependent launch on Hopper, so the
// next kernel's launch overlaps the tail of the current one (see common.cuh).
//
// GEMMs (Linear, LinearResidual, Conv1d): up to CudaBackendOptions::skinny_max_rows rows, a
// memory-bound kernel of our own with bias and activation fused (decoder steps); above that, in
// kFast with f16 weights, HalfGemm (half_gemm.cuh: one tensor-core kernel that rounds the f32
// activations to f16 as it loads them, with bias, activation and residual in its epilogue, and
// Conv1d as an implicit GEMM); otherwise cuBLAS (loaded at run time, blas.h) then one epilogue
// kernel for bias and activation (and im2col before it for Conv1d). Without cuBLAS, a built-in
// tiled kernel (slower) takes cuBLAS's place.
//
// Arithmetic (CudaMath), stated per path so tests can hold each to a tolerance:
//  * kAccurate: f32 throughout. f32 weights: cuBLAS SGEMM, no TF32. f16 weights: activations are
//    split into hi + lo f16 halves and multiplied on f16 tensor cores with f32 accumulation (two
//    GEMMs), which keeps ~22 significant bits of x (relative error ~1e-6, like f32). Attention on
//    f32 CUDA cores.
//  * kFast (default): activations rounded to f16 for HalfGemm or the cuBLAS GEMMs (f16 weights)
//    or TF32 (f32 weights), f32 accumulation: relative error ~1e-3 per GEMM. Encoder-size attention
//    (head_dim 64, >= 16 queries) on f16 tensor cores with an f32 softmax. The skinny path (up to
//    skinny_max_rows rows: decoder steps of small batches) and every other kernel stay exact f32
//    in both modes.
//
// Semantics where backend.h leaves room (matching the CPU backend unless said here):
//  * A query that sees no key outputs zeros; LayerNorm, Add, Gelu, LogSoftmax may work in place.
//  * Index values inside i32 tensors (token ids, start positions, KV positions, kv_lengths) are
//    checked on the device, where the kernel runs. A bad value makes that kernel skip the
//    affected batch row (the rest is written) and is reported as InvalidArgument, naming the op,
//    the index and the value, by the next Synchronize() or CopyToHost() (the CPU backend reports
//    it from the call itself, or from Replay(), and writes nothing).
//  * While capturing, Allocate, CopyFromHost, CopyToHost and Synchronize return
//    FailedPrecondition; Copy is captured.
//  * Graphs: see graph.h (CUDA graphs, signature cache with cudaGraphExecUpdate, eager switch).
//  * A backend and its graphs must be driven from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/backend.h"

namespace waav {
namespace cuda {
struct LaunchContext;  // kernels/cuda/launch.h
}

enum class CudaMath : uint8_t { kAccurate, kFast };

struct CudaBackendOptions {
  // Device ordinal. Default: 0.
  int device_index = 0;
  // Arithmetic of the large GEMMs and of encoder attention (see above). Default: kFast.
  CudaMath math = CudaMath::kFast;
  // Capture into CUDA graphs; false records the calls and replays them one by one (graph.h).
  // Default: true.
  bool use_graphs = true;
  // Programmatic dependent launch (compute capability 9.0 and later; ignored before).
  // Default: true.
  bool use_pdl = true;
  // With use_pdl, only grids of at most this many blocks per SM launch early (larger ones wait
  // on SMs the previous kernel needs; 1 leaves flash v2's grid, 432 blocks per window on an
  // H100, to launch normally). Default: 4.
  int pdl_max_blocks_per_sm = 4;
  // With use_pdl: whether calls under Backend::LaunchHint::kLargeKernels (the Whisper encoder
  // pass and cross K/V projections) launch with PDL too. A whole graph without PDL ran the
  // encoder 18-27 us per 30 s window faster on an H100, but the encoder pass alone without it
  // (round 4) gained nothing measurable (docs/benchmarks.md, "Encoder at batch 1, round 4"), so
  // the default keeps PDL until the cross projections' share is timed. Default: true.
  bool pdl_large_kernels = true;
  // Load cuBLAS for GEMMs of more than skinny_max_rows rows; when false or when it cannot be
  // loaded, the built-in tiled kernel runs them. Default: true.
  bool use_cublas = true;
  // cuBLAS GEMMs with a bias and no activation add the bias in their own kernel through
  // cuBLASLt's bias epilogue (loaded beside cuBLAS) instead of an epilogue kernel after them;
  // without cuBLASLt, or where it has no algorithm for a shape, the kernel runs as before.
  // Default: true.
  bool blas_bias_epilogue = true;
  // f16 results of cuBLAS GEMMs over f16 x (the Whisper encoder's Q/K/V planes and FFN1, the
  // cross K/V projection, a large decoder step's FFN1) stored in f16 by cuBLAS itself: planes
  // one GEMM each, the bias in cuBLASLt's epilogue (in f16, its rule for an f16 output); with
  // an activation (GELU), bias and activation in one in-place f16 pass, the GEMM's sums rounded
  // to f16 before it. false: an f32 result, then one pass adding the bias (and activation) and
  // rounding it. Default: true.
  bool blas_half_output = true;
  // Rows up to which Linear uses the memory-bound skinny kernel. 8: a decoder step of 16 rows
  // took 553 us with the skinny kernel and 467 us with HalfGemm on an H100 (batches 8 and 32
  // unchanged; docs/benchmarks.md, "Skinny GEMMs up to 8 rows"). Default: 8.
  int skinny_max_rows = 8;
  // HalfGemm with 32 x 32 tiles where 32 x 64 ones would leave multiprocessors idle (a decoder
  // step's GEMMs of tens of rows). Default: true.
  bool half_gemm_narrow_tiles = true;
  // HalfGemm splits K into ranges (their partial sums added by the last block of each tile) where
  // its tiles alone would fill fewer than this many blocks per SM (few-row GEMMs: a decoder step
  // of 64 rows has its 384 x 384 projections in 24 tiles walking 12 steps of K each). 0: never.
  // Default: 0: on an H100 it made the step of 64 rows slower (699 -> 738 us; the partials' fence
  // and arrival cost more than the shorter walk saved; docs/benchmarks.md, "Session 9").
  int half_gemm_split_k_waves = 0;
  // GEMMs of at most this many rows (and more than skinny_max_rows) take HalfGemm whatever their
  // N and K (half_gemm_max_k and _max_n below then apply to larger ones only). 0: none.
  // Default: 0: at 64 rows the FFN's GEMMs by HalfGemm made the step slower than cuBLAS with its
  // conversion and epilogue kernels (671 -> 738 us on an H100; docs/benchmarks.md, "Session 9").
  int64_t half_gemm_few_rows = 0;
  // kFast, f16 weights, more than skinny_max_rows rows: our HalfGemm kernel (f32 → f16 in the
  // loader, bias, activation and residual fused; Conv1d as an implicit GEMM) instead of
  // conversion + cuBLAS + epilogue, within the limits below. Default: true, for N, K <= 384
  // only (the Whisper encoder's Q, K, V and output projections, one kernel each with the
  // residual) and no convs: on an H100 it lost to cuBLAS on the wider GEMMs and the convs (it
  // re-reads the f32 activations through L2 for every 64 or 128 output columns;
  // docs/benchmarks.md, "Encoder at batch 1").
  bool use_half_gemm = true;
  // With use_half_gemm: Linear only up to this K and this N (0: any), Conv1d only with
  // half_gemm_conv, and only up to half_gemm_max_rows rows (0: any); the rest goes to cuBLAS.
  int64_t half_gemm_max_k = 384;
  int64_t half_gemm_max_n = 384;
  int64_t half_gemm_max_rows = 0;
  bool half_gemm_conv = false;
  // Linear takes HalfGemm only from this many rows (GEMMs of up to half_gemm_few_rows rows
  // aside); fewer go to cuBLAS, whose bias (blas_bias_epilogue) and in-place residual (beta = 1)
  // cost no kernel. Default: 512, between the decoder steps' 9-256 rows, where cuBLAS measured
  // faster for the self-attention's output projection (H100, fresh process each, 3 rounds:
  // 283.1-283.7 against 287.2-288.5 us a step at 16 rows, 381.3-381.9 against 387.8-389.0 at 64,
  // 767.0-767.1 against 798.4-799.7 at 256; docs/benchmarks.md, "Summary: H100, session 17"),
  // and the encoder's 1500 rows a window, for which HalfGemm was chosen ("Encoder at batch 1");
  // the rows between were not measured.
  int64_t half_gemm_min_rows = 512;
  // kFast encoder attention: the tuned flash kernel (keys split to fill the chip, merged in the
  // same launch) instead of the first one. Default: true.
  bool use_flash_v2 = true;
  // LinearPlanes of f32 planes (a decoder step's Q, K and V in one GEMM) by HalfGemm writing the
  // planes, up to this many rows (above skinny_max_rows; 0: never), with use_half_gemm and kFast;
  // larger ones by cuBLAS, then a pass writing the planes. Default: 64 (H100, one call: at 16
  // rows 360 against 366 us a step, at 64 the same, at 256 1263 against 1237;
  // docs/benchmarks.md, "Session 9").
  int64_t half_gemm_planes_max_rows = 64;
  // The decoder's attention (SplitAttention: a few queries per row against a K/V cache) splits
  // the keys into ranges until its grid has about this many blocks per SM. Default: 2 (8 before:
  // a step of 64 rows then split its 384 (row, head) groups in 3, and merging the ranges cost
  // more than it saved: 600.6 -> 540.5 us on an H100 with 2, which leaves them whole; 16 rows
  // 388.7 -> 360.0; docs/benchmarks.md, "Session 9").
  int split_attention_blocks_per_sm = 2;
  // One query per row, head_dim 64, f32 q (a decoder step's self- and cross-attention above the
  // fused step's rows): DecodeAttention, a block per (row, key range) over every head, reading
  // whole K and V rows, instead of SplitAttention's block per (row, head). Its keys are split
  // until the grid has about decode_attention_blocks_per_sm blocks per SM. Default: off (H100,
  // session 11: the engine's step within 1% of SplitAttention's at 16 and 64 rows, 256 rows
  // 1195.0-1198.5 against 1204.9 us; but waavd with the real tiny.en kept up with 1024 jfk
  // streams in 0 of 4 ramps with it and 3 of 3 without, same machine; docs/benchmarks.md,
  // "Session 11").
  bool decode_attention = false;
  int decode_attention_blocks_per_sm = 1;
  // DecodeAttention's keys a pass (a block then has 8 (f16) or 16 (f32) x heads x this many
  // threads); 0: as many as 512 threads take (the default).
  int decode_attention_keys_per_pass = 0;
  // DecodeAttention loads K and V evict-first in L2 (read once a step, so that the step's
  // weights, read again next step, may stay). Default: false (no gain measured, same calls).
  bool decode_attention_evict_first = false;
  // Flash v2 key ranges per query block: 0 lets the plan choose (as many as one wave of
  // resident blocks holds, up to 4); 1 to 4 forces that many (for measurements).
  int flash_splits = 0;
  // Flash v2 m-tiles of 16 queries a warp: 1 (64 queries a block, 4 blocks an SM) or 2 (128 a
  // block, 2 an SM: each K and V fragment read from shared memory feeds twice the MMAs); 0 lets
  // the plan choose (2 where their grid fills at least 4 waves: the encoder from ~15 windows a
  // pass; H100, session 21: 157 against 163 us a window at 64 windows, 6-7% slower at 1 and 4).
  // The split-q form (f32 q over f16 K/V) takes 1 either way. Default: 0.
  int flash_m_tiles = 0;
  // kFast: an f32 q over an f16 K/V cache (a prompt over the cross-attention cache, the word
  // alignment's teacher-forced pass) through Flash v2 from this many queries a row: K and V read
  // once per 64 queries on tensor cores, q and the probabilities as f16 hi + lo parts (as exact
  // as SplitAttention's f32 arithmetic); fewer queries (a decoder step's one) through
  // SplitAttention. 0: never. Default: 2 (H100, WhisperModel::PrefillRows: at 8 and 64 rows
  // 1.4-2.7x faster from 8 tokens a row, within the noise at 2-4 tokens and at one row;
  // docs/benchmarks.md, "Summary: H100, session 19").
  int flash_half_kv_min_queries = 2;
  // SharedKvAttention's key ranges per (row, group of 8 queries): 0 lets the plan choose (until
  // the grid fills the resident blocks once); n > 0 forces n (for tests and measurements).
  int shared_kv_splits = 0;
  // SharedKvAttention with one block per multiprocessor and as many tiles as fit in its shared
  // memory (5 at Whisper tiny's width, 4 in flight), instead of two double-buffered blocks.
  // Default: false (H100, one call: the engine's step 967.5 against 847.9 us at 256 rows, 437.6
  // against 420.6 at 64; six warps a multiprocessor hide less than twelve; docs/benchmarks.md,
  // "Summary: H100, session 16").
  bool shared_kv_deep_pipeline = false;
  // SharedKvAttention's stages for an i8 kv (an i8 encoder output: WhisperModelOptions::
  // quantized_cross_source): 0 lets the plan choose (2); 2 or 3 forces that many where they fit;
  // others are refused. H100, session 30 (the engine's step, docs/benchmarks.md): 2 stages
  // 566.7 us at 256 rows against 622.0 with 3 (only 2 hold the queries' terms in registers),
  // 353.0 against 362.8 at 64, 286.3 against 294.7 at 16 (session 29's kernel was faster in 3).
  int shared_kv_i8_stages = 0;
  // SharedKvAttention's L2 hints (SharedKvPlan::retain_rows): -1 none; n >= 0: n bytes of L2 set
  // aside for persisting lines while the backend lives (cudaLimitPersistingL2CacheSize, up to
  // the device's maximum; shared with the process's other backends on the device), and the rows
  // of the encoder output that fit in it kept there (SharedKvAttention's access-policy window,
  // persisting), so that the next layer and the next step (which read the same rows) find them in
  // L2. Default: -1. H100, session 27, measured in the kernel's former form (those rows' copies
  // evict-last, the others evict-first: miscompiled in some shapes, docs/gpu.md)
  // (docs/benchmarks.md, "Summary: H100, session 27"): 16 MB makes the op-by-op step of
  // back-to-back replays 357.5 against 378.3 us at 64 rows, 303.2 against 318.0 at 32, 487.9
  // against 506.5 at 128, 751.1 against 760.2 at 256 (24 MB alike up to 128 rows, 32 MB slower from
  // 64: less L2 for the weights); but in serving (waavd, 1536 streams) the encoder passes took 5-6%
  // longer beside the kept lines (41-64-window rounds 13.2-13.3 against 12.1 ms) while the steps
  // saved 2-9%: a loss. BackendOptions::gpu_l2_encoder_bytes (waavd's gpu_l2_encoder_mb) sets it.
  int64_t shared_kv_l2_retain_bytes = -1;
  // Report LinearResidual as supported, so that the Whisper encoder adds its residuals in the
  // projections (HalfGemm's epilogue, or cuBLAS with beta = 1 followed by the bias) instead of
  // separate Add kernels; the op itself works either way. Default: true.
  bool linear_residual = true;
  // LayerNorm may write f16, Linear may read and write f16 (Op::kHalfActivations, reported in
  // kFast only), so that the Whisper encoder's FFN passes f16 between its kernels (no f32 → f16
  // conversion kernel before its GEMMs). Default: true.
  bool half_activations = true;
  // Report LinearPlanes as supported, so that the Whisper encoder computes Q, K and V in one
  // GEMM (weights stacked at load) written as three planes, f16 with half_activations, which
  // flash v2 then reads without its conversion pass. Default: true.
  bool linear_planes = true;
  // With linear_planes, report LinearPlanesAppend too, so that a Whisper decoder step writes K
  // and V straight into the self-attention caches from its QKV GEMM (the epilogue places each
  // row at its position) instead of two WriteRows kernels per layer. Default: true.
  bool linear_planes_append = true;
  // Conv1d through the f16 cuBLAS GEMM (kFast, f16 weights): the im2col kernel writes the
  // column matrix in f16, which the GEMM reads as it is (no f32 columns and conversion pass).
  // It rounds as the conversion pass does (to nearest). Default: true.
  bool half_conv_columns = true;
  // ArgmaxLogSumExp (the greedy choice) on a thread-block cluster of this many blocks per row
  // where the GPU has clusters (compute capability 9.0 and up): 8, or 16 (a non-portable
  // cluster size), which takes 16 only while the rows' clusters fit on the GPU at once (H100:
  // up to 33 rows) and 8 above; 0, or without clusters: one block per row (a greedy token at
  // one row 161-167 us on an H100 with it, 120-124 with 8 blocks; with 16, 94 against 95-96:
  // docs/benchmarks.md, session 24). The same choice and maximum either way. Default: 16.
  int argmax_cluster_blocks = 16;
  // cuBLAS workspace. Default: 32 MiB.
  size_t cublas_workspace_bytes = size_t{32} << 20;
};

// CUDA-only kernels beyond the Backend interface, for callers that know they hold a CUDA backend
// (the GPU benchmark's fused decoder step, and its parity test; the persistent decoder step of
// PrepareDecoderStep, kernels/cuda/persistent_step.h). Candidates for optional
// Backend ops: see docs/gpu.md.
class CudaExtensions {
 public:
  enum class Output : uint8_t {
    kStore,       // y = result
    kAccumulate,  // y += result (a residual connection; y is read and written)
    kQkv,         // result columns [0, C) to q, [C, 2C) to k_cache, [2C, 3C) to v_cache
  };
  struct FusedLinearArgs {
    Tensor x;                      // f32 [.., K]: M rows
    Tensor norm_gamma, norm_beta;  // f32 [K]: LayerNorm x first; undefined: no LayerNorm
    float eps = 1e-5f;
    Tensor weight;  // f32 or f16 [N, K]
    Tensor bias;    // f32 [N], or undefined
    Activation act = Activation::kNone;
    Output output = Output::kStore;
    Tensor y;                 // kStore, kAccumulate: f32 [M, N] (any leading dims)
    Tensor q;                 // kQkv: f32 [M, C] (any leading dims), N = 3·C
    Tensor k_cache, v_cache;  // kQkv: f32 [M, L, C]; row positions[m] of batch row m
    Tensor positions;         // kQkv: i32 [M]
  };
  virtual ~CudaExtensions() = default;
  // result = act(LayerNorm?(x) · weightᵀ + bias), exact f32 like Linear's skinny path; one kernel
  // for up to 16 rows (K a multiple of 8, K <= 1024 with LayerNorm), else the same ops composed.
  // A position outside the caches is reported by the next Synchronize() like WriteRows's.
  virtual absl::Status FusedLinear(const FusedLinearArgs& args) = 0;

  // Runs `launch` on the backend's stream as one call, like an op: at once, or into the graph
  // being captured. For kernels that live outside the backend (the persistent decoder step of
  // bench/gpu/). `launch` gets the backend's launch context and returns a cudaError_t (as int);
  // `keep` holds the tensors it uses, alive as long as a graph that captured the call;
  // `signature` describes the call's shape for the graph cache (graph.h).
  using RawLaunch = std::function<int(const cuda::LaunchContext&)>;
  virtual absl::Status LaunchRaw(const std::string& what, RawLaunch launch,
                                 std::vector<Tensor> keep, std::vector<int64_t> signature) = 0;
  // Multiprocessors of the backend's device (LaunchContext::sm_count): the persistent kernels'
  // grid, for sizing their workspaces.
  virtual int multiprocessor_count() const = 0;
};

// The CUDA extensions of `backend`, or null when it is not this CUDA backend.
CudaExtensions* GetCudaExtensions(Backend& backend);

// Creates the backend, or Unavailable when there is no usable device (no driver, no GPU, a GPU
// this build has no kernels for) with the reason. CreateBackend("cuda") calls this with the
// defaults above and BackendOptions::device_index.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace waav

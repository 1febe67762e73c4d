// Backend: the one device-agnostic interface that model code is written against.
//
// A backend owns device memory, executes kernels in submission order on its stream, and can
// capture a sequence of kernel calls into a Graph that is replayed later without re-issuing
// each call. Model code never names a backend; it asks `supports()` before an optional op.
//
// Threads: a Backend is used by one thread at a time (kernel submission is not synchronised).
// Code that submits from several threads (the streaming engine's frontend worker and scheduler)
// creates one backend per thread; tensors belong to the backend that allocated them. The one
// exception is stats(), which any thread may call at any time (for metrics).
//
// Conventions for every kernel:
//  * All tensors are row-major and contiguous, and live on this backend's device.
//  * Kernels are stream-ordered: they may return before the work is done. Synchronize() waits.
//    CopyToHost() synchronizes implicitly.
//  * Shapes and dtypes are validated; a mismatch returns InvalidArgument naming the tensors.
//  * Values that change from one replay of a graph to the next (token ids, positions, cache
//    lengths) are passed as device tensors, never as C++ scalars, so a captured graph reads
//    the current values when it runs.
//  * Activations are f32 (f16 where a backend supports Op::kHalfActivations). Weights (the `weight`
//  of Linear and Conv1d, embedding tables) may be
//    f32 or f16; f16 values are widened exactly and accumulated in f32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/head_scores_item.h"
#include "engine/runtime/host_buffer.h"
#include "engine/runtime/tensor.h"

namespace waav {

// Elementwise functions applied as the epilogue of Linear and Conv1d, or alone by Activate.
// Every backend implements every value in all three places; a value outside the enum is
// InvalidArgument.
enum class Activation : uint8_t {
  kNone,
  kGelu,     // exact, erf-based, as in Whisper
  kRelu,     // max(x, 0); NaN stays NaN
  kSigmoid,  // 1 / (1 + e^−x)
};

// Every kernel a backend may implement, for `supports()` and for parity tests.
enum class Op : uint8_t {
  kLinear,
  kConv1d,
  kLayerNorm,
  kAdd,
  kGelu,
  kAttention,
  kWriteRows,
  kEmbed,
  kLogSoftmax,
  kGraphCapture,
  // Optional kernels (Silero VAD).
  kActivate,
  kComplexMagnitude,
  kLstmCell,
  // Optional kernel (greedy decoding).
  kArgmaxLogSumExp,
  // Optional kernel (a residual connection fused into a GEMM's epilogue; Whisper's encoder).
  kLinearResidual,
  // Optional capability (f16 activations between kernels; Whisper's encoder): LayerNorm may
  // write y as f16, Linear may read x as f16 and write y as f16, LinearResidual may read x as
  // f16 (its residual and y stay f32), LinearPlanes may write f16 planes, Attention may read an
  // f32 q with f16 k and v (Whisper's cross-attention K/V caches, written f16 by the encoder's
  // projection) and write its out as f16. An f16 value is the f32 result rounded to nearest;
  // arithmetic stays f32. Backends without it accept f32 activations only.
  kHalfActivations,
  // Optional (a whole transformer decoder step in one call: PrepareDecoderStep).
  kDecoderStep,
  // Optional kernel (one GEMM for several projections of one input, each written as its own
  // plane; Whisper's encoder Q, K and V). With kHalfActivations, Attention may also read f16
  // q, k and v (the planes written f16).
  kLinearPlanes,
  // Optional kernel (LinearPlanes whose last planes are caches appended to as WriteRows appends:
  // a decoder step's Q, K and V, K and V straight into the self-attention caches).
  kLinearPlanesAppend,
  // Optional kernel (attention of several query heads over keys that are also the values:
  // Whisper's cross-attention with its key and value projections absorbed into the query and
  // output projections, so that a decoder step reads the encoder output once per layer instead
  // of that layer's K and V caches). With kHalfActivations, kv may be f16 and Copy converts f32
  // to f16 (the encoder output into such a cache).
  kSharedKvAttention,
  // Optional kernel (chosen heads' scaled query-key dot products in a defined order, so that
  // every backend computes the same floats: Whisper's word alignment).
  kHeadScores,
  // Optional kernel (greedy decoding: the next step's inputs written from the choices where
  // they are, so that the loop need not upload them).
  kFeedChoices,
  // Optional kernel (int8 with a scale per row and channel: QuantizeChannels). With
  // kSharedKvAttention, kv may then be i8 with its scales (the encoder output that a large
  // batch's decoder steps read, in half the bytes of f16).
  kQuantizeChannels,
};

// A captured sequence of kernel calls. Replay() re-runs them on the tensors they were captured
// with, reading whatever those tensors hold at replay time. RAII: destroying the graph releases
// its device resources and its references to the captured tensors.
class Graph {
 public:
  virtual ~Graph() = default;
  virtual absl::Status Replay() = 0;
  // Number of kernel calls captured (for metrics and tests).
  virtual int num_nodes() const = 0;
};

// Counters a backend keeps about its own work, read by the daemon for its metrics
// (waav_kernel_launches_total, waav_graph_replays_total, waav_device_memory_*_bytes).
// Totals count from the backend's creation; memory is a level.
struct BackendStats {
  // Kernel calls (ops, including Copy) executed eagerly, one submission each. Calls recorded
  // during a capture and the calls inside graph replays are not counted; one call may issue a
  // few device kernels (e.g. im2col + GEMM), so this counts dispatches, not device kernels.
  uint64_t kernel_launches = 0;
  // Graph::Replay() calls on graphs captured from this backend (after it is gone, too).
  uint64_t graph_replays = 0;
  // Device memory in tensors now (pool blocks handed out, at their size-class size).
  uint64_t memory_in_use_bytes = 0;
  // Device memory the backend holds from the system or driver: in use plus the blocks its pool
  // caches for reuse. What competes with other processes for the device.
  uint64_t memory_held_bytes = 0;
  // Total memory of the device (host RAM for the CPU); 0 when unknown.
  uint64_t memory_capacity_bytes = 0;
};

// A pre-norm transformer decoder with cross-attention (Whisper's decoder) as one step function.
// Per layer, with LN the layer normalisation of LayerNorm (eps `norm_eps`):
//   x += out(Attention(q = LN1(x)·q_wᵀ + q_b, k, v = LN1(x)·{k,v}_wᵀ + b appended to the self
//        caches at `positions`, causal, over `lengths` keys))
//   x += cross_out(Attention(q = LN2(x)·cross_q_wᵀ + b, the cross K/V of the step, all keys))
//   x += ff2(gelu(ff1(LN3(x))))
// with x = Embed(tokens, positions) first and logits = LN_f(x) · token_embeddingᵀ last (the
// embedding is tied to the output projection). Every matrix is [out, in] as Linear's weight
// (f32 or f16), every bias and gain f32.
struct DecoderStepDims {
  int d_model = 0;
  int n_heads = 0;
  int ffn_dim = 0;  // hidden width of the feed-forward block
  int n_layers = 0;
  int n_vocab = 0;
  int n_positions = 0;  // rows of the position table and of each self-attention cache
  int n_source = 0;     // rows of each cross-attention K/V (encoder positions)
  float attention_scale = 0.125f;
  float norm_eps = 1e-5f;
};
struct DecoderStepLayerWeights {
  Tensor self_norm_gamma, self_norm_beta;
  Tensor q_w, q_b, k_w, k_b, v_w, v_b, out_w, out_b;  // [d, d], [d]
  Tensor cross_norm_gamma, cross_norm_beta;
  Tensor cross_q_w, cross_q_b, cross_out_w, cross_out_b;  // [d, d], [d]
  Tensor ffn_norm_gamma, ffn_norm_beta;
  Tensor ff1_w, ff1_b, ff2_w, ff2_b;  // [ffn, d], [ffn], [d, ffn], [d]
};
struct DecoderStepWeights {
  DecoderStepDims dims;
  Tensor token_embedding;  // [n_vocab, d]: input embedding and output projection
  Tensor position_table;   // f32 [n_positions, d]
  std::vector<DecoderStepLayerWeights> layers;
  Tensor final_norm_gamma, final_norm_beta;
};
// The device tensors of one step of B rows (B <= PreparedDecoderStep::max_batch()). Values that
// change per step are read when the step runs (a captured step replays with new values).
struct DecoderStepIo {
  Tensor tokens;                         // i32 [B] or [B, 1]
  Tensor positions;                      // i32 [B]: where each row's K/V go in its self caches
  Tensor lengths;                        // i32 [B]: keys each row attends to (positions + 1)
  std::vector<Tensor> self_k, self_v;    // per layer f32 [B, n_positions, d], appended in place
  std::vector<Tensor> cross_k, cross_v;  // per layer f32 [B, n_source, d] (a backend may take f16)
  Tensor logits;                         // f32 [B, n_vocab], written
};
// Checks `io` against `dims` and `max_batch` (shapes, dtypes, layer counts): InvalidArgument
// naming the tensor. For implementations of PreparedDecoderStep::Run.
absl::Status CheckDecoderStepIo(const DecoderStepDims& dims, int max_batch,
                                const DecoderStepIo& io);
// Checks that `weights` has the shapes its dims say (and f32 biases, gains and position table).
absl::Status CheckDecoderStepWeights(const DecoderStepWeights& weights);

// The greedy choice made with a decoder step (PreparedDecoderStep::RunAndChoose): what
// Backend::ArgmaxLogSumExp(logits, masks, mask_index, out) and then Backend::FeedChoices(out,
// mask_index, max_position, tokens, positions, lengths) do with the step's own logits and inputs.
struct DecoderStepChoice {
  Tensor masks;       // i32 [M, ceil(V / 32)]
  Tensor mask_index;  // i32 [B]: row b's mask, or −1 to leave it out
  Tensor out;         // f32 [B, 5]
  int32_t max_position = 0;
};

// A decoder step prepared by Backend::PrepareDecoderStep: the weights are the backend's own
// (references or converted copies, e.g. Q/K/V fused into one matrix), so that a step is one
// call. Equal to the composition of this header's ops above up to rounding (a backend may sum in
// another, even varying, order). Owned by the caller; uses the backend that made it, which must
// outlive it, and is driven from that backend's thread.
class PreparedDecoderStep {
 public:
  virtual ~PreparedDecoderStep() = default;
  virtual const DecoderStepDims& dims() const = 0;
  // Rows a step takes at most; larger batches are the caller's to split or to run unfused.
  virtual int max_batch() const = 0;
  // One step: appends each row's K/V at its position and writes its logits. Allocates nothing,
  // copies nothing to or from the host, does not wait: capturable (Backend::BeginCapture).
  // Index values (tokens, positions, lengths) are checked as Embed, WriteRows and Attention
  // check them.
  virtual absl::Status Run(const DecoderStepIo& io) = 0;
  // Whether RunAndChoose takes `io` (its rows and element types) on this device. Default: false.
  virtual bool ChoosesInStep(const DecoderStepIo& io) const;
  // Run(io), then `choice` (DecoderStepChoice) made in the step's own launches, so that a greedy
  // loop's step is one replay with no kernels of its own. The same logits, tokens and maxima as
  // those two ops; the sum s within a relative 1e-5 of ArgmaxLogSumExp's (a backend may sum in
  // f32 per slice of columns, merged in f64). Checks as those ops; capturable. Default (and
  // where !ChoosesInStep(io)): Unimplemented.
  virtual absl::Status RunAndChoose(const DecoderStepIo& io, const DecoderStepChoice& choice);
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Identity. `name()` is what `--backend` accepts ("cpu", "cuda", ...).
  virtual std::string_view name() const = 0;
  virtual DeviceKind device() const = 0;
  // One line about the device, for logs: e.g. "cpu: 2 threads, AVX2".
  virtual std::string Describe() const = 0;
  // Whether `op` is implemented. Required ops are always supported.
  virtual bool supports(Op op) const = 0;

  // ---- Memory (required) -------------------------------------------------------------------
  // Uninitialised storage. Pooled: allocation on the hot path must not reach the driver.
  virtual absl::StatusOr<Tensor> Allocate(const Shape& shape, DType dtype) = 0;
  // Host -> device; `bytes` must equal dst.size_bytes(). `src` may be reused on return.
  virtual absl::Status CopyFromHost(const void* src, size_t bytes, const Tensor& dst) = 0;
  // Host memory for large uploads (CopyFromHostAsync): page-locked where the device copies from
  // it without staging (CUDA), plain memory otherwise (the default). Reaches the driver: allocate
  // once, not per upload. The buffer must outlive every copy from it (Synchronize first).
  virtual absl::StatusOr<HostBuffer> AllocateHost(size_t bytes);
  // Host -> device from bytes [src_offset, src_offset + bytes) of `src` (AllocateHost's memory),
  // `bytes` equal to dst.size_bytes(). May return before the copy has run: those bytes must stay
  // as they are until the next Synchronize(). Default: CopyFromHost.
  virtual absl::Status CopyFromHostAsync(const HostBuffer& src, size_t bytes, const Tensor& dst,
                                         size_t src_offset = 0);
  // Device -> host; waits for prior work. `bytes` must equal src.size_bytes().
  virtual absl::Status CopyToHost(const Tensor& src, void* dst, size_t bytes) = 0;
  // Device -> host into bytes [dst_offset, dst_offset + src.size_bytes()) of `dst` (AllocateHost's
  // memory), after the work submitted before it, without waiting for it: returns a ticket for
  // WaitForCopy, until which those bytes must not be read and `dst` must stay alive. The copy
  // may run beside work submitted after it (CUDA: on a copy stream of its own), so that work
  // must not write `src` before WaitForCopy(ticket) has returned. Lets a loop submit its next
  // step before it reads this one's result. Not while capturing.
  // Default: CopyToHost (done on return; ticket 0).
  virtual absl::StatusOr<uint64_t> CopyToHostAsync(const Tensor& src, const HostBuffer& dst,
                                                   size_t dst_offset = 0);
  // Waits until the copy of `ticket` (CopyToHostAsync) and the work submitted before it have
  // finished (later work may still be running), then reports what kernels reported, as
  // Synchronize does. A ticket not yet issued is InvalidArgument. Default: nothing to wait for.
  virtual absl::Status WaitForCopy(uint64_t ticket);
  // Device -> device, same dtype and element count (shapes may differ). With
  // Op::kHalfActivations also f32 src into an f16 dst, each value rounded to nearest.
  virtual absl::Status Copy(const Tensor& src, const Tensor& dst) = 0;
  // Waits until every submitted kernel has finished.
  virtual absl::Status Synchronize() = 0;

  // ---- Kernels (required) ------------------------------------------------------------------
  // y[M, N] = act(x[M, K] · weight[N, K]ᵀ + bias[N]). x may have any leading dims (M is
  // their product); bias is optional (pass nullptr).
  virtual absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              Activation act, const Tensor& y) = 0;
  // 1-D convolution over time, time-major: x[B, T, Cin], weight[Cout, Cin, K], bias[Cout],
  // y[B, Tout, Cout] with Tout = (T + 2·padding − K) / stride + 1, zero padding.
  virtual absl::Status Conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int stride,
                              int padding, Activation act, const Tensor& y) = 0;
  // Row-wise layer normalisation over the last dim: y = (x − mean) / sqrt(var + eps) · γ + β.
  virtual absl::Status LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float eps, const Tensor& y) = 0;
  // y = a + b, elementwise; b has a's shape or a's trailing dims (then it is added to each of
  // a's leading rows: y[r, ...] = a[r, ...] + b[...]); y may alias a, or b of a's shape.
  virtual absl::Status Add(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  // y = gelu(x), exact (erf) form; y may alias x.
  virtual absl::Status Gelu(const Tensor& x, const Tensor& y) = 0;

  // Multi-head scaled dot-product attention.
  //   q[B, Tq, H·D], k[B, Tk, H·D], v[B, Tk, H·D] -> out[B, Tq, H·D]; scale multiplies q·kᵀ.
  //   kv_lengths: optional i32[B]; row b attends to keys [0, kv_lengths[b]) only (nullptr: all
  //   Tk). With `causal`, query i of row b sits at position kv_lengths[b] − Tq + i and sees keys
  //   at positions ≤ its own (this is how a decoder attends to its KV cache). f32 throughout;
  //   with Op::kHalfActivations q, k, v may be f16 (or k, v alone: an f16 cache) and out f16
  //   (the f32 result rounded, for a GEMM that reads f16).
  virtual absl::Status Attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor* kv_lengths, int num_heads, float scale, bool causal,
                                 const Tensor& out) = 0;

  // Writes src[B, T, C] into dst[B, L, C] at rows positions[b] .. positions[b] + T − 1 of each
  // batch row b (positions: i32[B]). Used to append to KV caches.
  virtual absl::Status WriteRows(const Tensor& src, const Tensor& positions, const Tensor& dst) = 0;

  // dst[i, :] = src[rows[i], :] for src [N, C] and dst [rows.size(), C] of one dtype, each index
  // in [0, N) (checked here, on the host). Default: one Copy per row.
  virtual absl::Status GatherRows(const Tensor& src, absl::Span<const int64_t> rows,
                                  const Tensor& dst);

  // y[B, T, C] = token_table[tokens[b, t]] + position_table[start_positions[b] + t].
  // tokens: i32[B, T]; start_positions: i32[B]; tables [V, C] and [P, C] (f32 or f16).
  virtual absl::Status Embed(const Tensor& tokens, const Tensor& start_positions,
                             const Tensor& token_table, const Tensor& position_table,
                             const Tensor& y) = 0;

  // Row-wise log-softmax over the last dim; y may alias x.
  virtual absl::Status LogSoftmax(const Tensor& x, const Tensor& y) = 0;

  // ---- Kernels (optional; default Unimplemented, see supports()) ----------------------------
  // y = act(x) elementwise; y may alias x. kNone copies.
  virtual absl::Status Activate(const Tensor& x, Activation act, const Tensor& y);

  // Magnitude of a complex spectrum stored as all real parts, then all imaginary parts, along the
  // last dim (the layout of an STFT computed as a convolution with [cos; sin] bases):
  //   x[..., 2N] -> y[..., N],  y[i] = sqrt(x[i]² + x[N + i]²), evaluated in f32 as written
  //   (no hypot-style rescaling: |x| beyond ~1e19 overflows to inf, as in the ONNX graphs this
  //   mirrors).
  virtual absl::Status ComplexMagnitude(const Tensor& x, const Tensor& y);

  // One step of an LSTM cell, PyTorch's LSTMCell semantics and gate order (i, f, g, o):
  //   gates[B, 4H] = [x | h] · weightᵀ + bias
  //   i = σ(gates[:, 0:H]), f = σ(gates[:, H:2H]), g = tanh(gates[:, 2H:3H]),
  //   o = σ(gates[:, 3H:4H]);  c_out = f ⊙ c + i ⊙ g;  h_out = o ⊙ tanh(c_out)
  // x[B, I], h and c [B, H]; weight [4H, I + H] is PyTorch's weight_ih [4H, I] and weight_hh
  // [4H, H] side by side (f32 or f16), bias [4H] is bias_ih + bias_hh (f32). h_out and c_out
  // [B, H] may be exactly h and c (the state updated in place) but must not otherwise overlap
  // any input.
  virtual absl::Status LstmCell(const Tensor& x, const Tensor& h, const Tensor& c,
                                const Tensor& weight, const Tensor& bias, const Tensor& h_out,
                                const Tensor& c_out);

  // Greedy choice over masked logits, per row: what sampling at temperature 0 needs, reduced
  // where the logits are, so that a decoder step downloads a few numbers per row instead of them.
  //   logits f32 [B, V], V < 2^24. masks i32 [M, ceil(V / 32)]: bit t % 32 of word t / 32 of row m
  //   is set when mask m disables token t. mask_index i32 [B]: the mask of row b, or −1 to leave
  //   row b out (its row of `out` is not written).
  //   out f32 [B, 5]; for row b, over the tokens t its mask allows, with x_t its logit:
  //     [0] the token of the largest x_t, the lowest such id on ties, as a float (exact: V < 2^24);
  //     [1] that largest logit, mx;
  //     [2..4] s = Σ_t exp(double(x_t − mx)) (the difference in f32, exp and sum in f64) as three
  //         floats whose double sum JoinF64(&out[2]) is s exactly (SplitF64). The row's
  //         log-sum-exp is mx + log(s).
  //   When no allowed logit is above −inf: token 0, mx = −inf, s = 0 (as std::max_element and a
  //   log-sum-exp on the host give: the first element, −inf). The CPU backend sums s in token
  //   order, so its result equals that host loop bit for bit; other backends may add in another
  //   order (s then differs in the last bits of a double). NaN logits: unspecified. A mask_index
  //   outside [−1, M) is InvalidArgument (on a GPU, reported like a bad token id).
  virtual absl::Status ArgmaxLogSumExp(const Tensor& logits, const Tensor& masks,
                                       const Tensor& mask_index, const Tensor& out);

  // The next decoder step's inputs from ArgmaxLogSumExp's choices, where they are: for each row
  // b whose mask_index[b] >= 0 (the rows the choice was made for),
  //   tokens[b] = choices[b][0] (the chosen token), positions[b] = min(positions[b] + 1,
  //   max_position), lengths[b] = that new position + 1;
  // other rows are left as they are. choices f32 [B, 5] (ArgmaxLogSumExp's out), mask_index i32
  // [B], tokens i32 of B elements ([B] or [B, 1]), positions and lengths i32 [B], none of the
  // written ones overlapping another tensor; 0 <= max_position < 2^24. A chosen token that is
  // not a whole number in [0, 2^24) is InvalidArgument (on a GPU, reported like a bad token id).
  // Capturable. Default: Unimplemented.
  virtual absl::Status FeedChoices(const Tensor& choices, const Tensor& mask_index,
                                   int32_t max_position, const Tensor& tokens,
                                   const Tensor& positions, const Tensor& lengths);

  // y = residual + act(x · weightᵀ + bias): Linear followed by Add(residual, ·, y) in one call,
  // so that a backend can add the residual in the GEMM's epilogue instead of a second pass over
  // y. residual and y are f32 of Linear's y shape; y may be residual (in place) and must not
  // overlap x. Equal to that Linear then Add up to the rounding of the backend's Linear.
  virtual absl::Status LinearResidual(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                      Activation act, const Tensor& residual, const Tensor& y);

  // A decoder step prepared once from `weights` (see PreparedDecoderStep). Backends that offer it
  // report supports(Op::kDecoderStep) and may still refuse dims they have no kernel for
  // (Unimplemented, naming what they take). Not while capturing (it may allocate and copy).
  // Default: Unimplemented.
  virtual absl::StatusOr<std::unique_ptr<PreparedDecoderStep>> PrepareDecoderStep(
      const DecoderStepWeights& weights);
  // Linear(x, weight, bias, kNone) with weight [P·C, K] (P projections stacked), written as P
  // separate outputs: planes[p] (any shape of M·C elements, C last; M = rows of x) gets
  // x · weight[p·C .. p·C + C)ᵀ + bias[p·C .. p·C + C), so that each projection lands in a
  // tensor of its own (Q, K and V of the encoder; every decoder layer's cross-attention K and V,
  // straight into the caches) from one GEMM. 1 to kMaxLinearPlanes planes, pairwise disjoint, of
  // one dtype: f32, or f16 with Op::kHalfActivations (x too). Equal to P Linear calls on the
  // weight's row blocks up to the rounding of the backend's Linear.
  static constexpr int kMaxLinearPlanes = 16;
  virtual absl::Status LinearPlanes(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                    absl::Span<const Tensor> planes);
  // LinearPlanes of f32 planes whose planes from `first_appended` on are caches [M, L, C] that
  // receive one row per batch row, as WriteRows appends: plane p's row m is written at
  // [m, positions[m]] (positions i32 [M]; all appended caches of one L). The planes before
  // `first_appended` get their M·C values as in LinearPlanes. A position outside [0, L) is an
  // error as in WriteRows (that row of the caches is not written). Equal to LinearPlanes into
  // [M, C] planes followed by WriteRows of the appended ones, up to the rounding of the
  // backend's Linear: a decoder step's K and V land in their caches without a copy.
  virtual absl::Status LinearPlanesAppend(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                          absl::Span<const Tensor> planes, int first_appended,
                                          const Tensor& positions);
  // Attention of H query heads of width D over keys that are also the values, shared by the
  // heads (one K/V head of width D, K = V):
  //   q f32 [B, Tq, H·D], kv [B, Tk, D] (f32, or f16 with Op::kHalfActivations) -> out
  //   [B, Tq, H·D] (f32, or f16 with Op::kHalfActivations: the f32 result rounded) with
  //   out[b, t, h] = Σ_j softmax_j(scale · q[b, t, h]·kv[b, j]) · kv[b, j], every query over
  //   all Tk ≥ 1 keys (no lengths, not causal).
  // D is a multiple of 64 from 64 to kMaxSharedKvWidth (Whisper tiny's and base's d_model; the
  // GPU kernel keeps a D/64-warp block's accumulators in registers). Whisper's cross-attention
  // is this with q = its query projected back through each head's key projection (q_h·Wk_hᵀ)
  // and kv = the encoder output, its output then projected through each head's value and
  // output projections (WhisperModelOptions::absorbed_cross_attention).
  static constexpr int kMaxSharedKvWidth = 512;
  // The widest D this backend's device takes (at most kMaxSharedKvWidth; less on a GPU whose
  // shared memory holds no block of the wider kernel: Ada at 512).
  virtual int shared_kv_max_width() const { return kMaxSharedKvWidth; }
  // With Op::kQuantizeChannels kv may be i8 with `kv_scales` f32 [B, D] (QuantizeChannels'
  // output): the attention is then over kv[b, j, c] · kv_scales[b, c]. kv_scales must be null
  // for a float kv.
  virtual absl::Status SharedKvAttention(const Tensor& q, const Tensor& kv, const Tensor* kv_scales,
                                         int num_heads, float scale, const Tensor& out);
  // Symmetric int8 quantization with a scale per batch row and channel:
  //   x f32 [B, T, C] -> q i8 [B, T, C] and scales f32 [B, C], where
  //   scales[b, c] = max_t |x[b, t, c]| / 127 and
  //   q[b, t, c] = x[b, t, c] / scales[b, c] rounded to nearest even (0 where the scale is 0),
  // each division IEEE's: the same integers and scales on every backend. The error of a value is
  // at most half its channel's step (1/254 of the channel's largest magnitude). x must be finite
  // (a NaN or infinity gives unspecified values, not an error: checking would cost a pass).
  virtual absl::Status QuantizeChannels(const Tensor& x, const Tensor& q, const Tensor& scales);
  // Scaled dot products of chosen heads' queries and keys (pre-softmax attention scores):
  //   q f32 [B, Tq, C], k [B, Tk, C] (f32, or f16 widened exactly), heads of width head_dim at
  //   columns [h·head_dim, (h + 1)·head_dim) of C; out f32 of any shape, flat. For each item:
  //     out[offset + t·keys + j] = scale · Σ_e q[row, t, h·D + e] · k[row, j, h·D + e]
  //   for t < queries ≤ Tq and j < keys ≤ Tk, where every product is rounded to f32 and added
  //   in the order e = 0, 1, ..., D − 1 to a sum starting at 0, rounded after each addition (no
  //   fused multiply-add), then the sum multiplied by scale: the same floats on every backend,
  //   so that what is decided from them (word alignment's path through the scores) does not
  //   depend on the device. Items must lie inside out and not overlap each other; elements of
  //   out no item covers are left as they are; no items: nothing. (Whisper's word alignment:
  //   the alignment heads of the teacher-forced pass, against the cross-attention keys.)
  virtual absl::Status HeadScores(const Tensor& q, const Tensor& k, int head_dim, float scale,
                                  absl::Span<const HeadScoresItem> items, const Tensor& out);

  // ---- Launch hints (optional) -------------------------------------------------------------
  // How the kernel calls issued from now on (eager, or recorded by a capture) are best launched;
  // it stays in force until the next call. kLargeKernels: a long dependent chain of kernels that
  // each fill the device (Whisper's encoder pass), so a kernel may gain nothing from starting
  // before the previous one ends (the CUDA backend then launches without PDL where
  // CudaBackendOptions::pdl_large_kernels is false; it is true by default, because the hint
  // around the encoder measured no gain, docs/benchmarks.md). Performance only: results are the
  // same under any hint. Default: ignored.
  enum class LaunchHint : uint8_t { kDefault, kLargeKernels };
  virtual void SetLaunchHint(LaunchHint hint);

  // ---- Graph capture (optional) ------------------------------------------------------------
  // Between BeginCapture() and EndCapture(), kernel calls are recorded instead of (or as well
  // as, backend-defined) executed; EndCapture() returns the graph. Memory calls other than
  // Copy are not capturable. Default: Unimplemented.
  virtual absl::Status BeginCapture();
  virtual absl::StatusOr<std::unique_ptr<Graph>> EndCapture();

  // ---- Statistics (optional) ---------------------------------------------------------------
  // A snapshot of the counters above. Unlike everything else here it may be called from any
  // thread while another one submits work: counters are relaxed atomics (a snapshot may miss
  // the calls in flight), memory figures take the pool's lock (in use and held are read apart,
  // so a block changing hands meanwhile may be missing from one of them). Counting costs one
  // relaxed atomic add per call or replay, never anything per element. Default: all zeros.
  virtual BackendStats stats() const;
};

// A double as three floats whose sum in double, parts[0] + (parts[1] + parts[2]), is the double
// exactly (24 + 24 + 24 bits cover its 53; for values well inside float range), and back:
// ArgmaxLogSumExp's sums travel in f32.
inline void SplitF64(double value, float* parts) {
  parts[0] = static_cast<float>(value);
  const double rest = value - static_cast<double>(parts[0]);  // exact
  parts[1] = static_cast<float>(rest);
  parts[2] = static_cast<float>(rest - static_cast<double>(parts[1]));  // exact
}
inline double JoinF64(const float* parts) {
  return static_cast<double>(parts[0]) +
         (static_cast<double>(parts[1]) + static_cast<double>(parts[2]));
}

// Uploads host data into a new tensor on `backend`.
absl::StatusOr<Tensor> Upload(Backend& backend, const Shape& shape, DType dtype, const void* src);
// Downloads a tensor's contents (any dtype) into a host vector of its raw elements.
template <typename T>
absl::StatusOr<std::vector<T>> Download(Backend& backend, const Tensor& t);
// Downloads an f32 or f16 tensor as floats (f16 widened exactly).
absl::StatusOr<std::vector<float>> DownloadFloats(Backend& backend, const Tensor& t);

}  // namespace waav

#include "engine/runtime/backend_inl.h"

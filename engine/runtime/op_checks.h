// Argument validation of the Backend kernels, shared by backends so that every backend accepts
// and rejects the same calls with the same messages (InvalidArgument naming the op and the
// tensors). Each Validate* checks dtypes, ranks, shapes and overlaps of one op as backend.h and
// the CPU backend define them, and returns the sizes the kernel needs. Values inside i32
// tensors (token ids, positions, lengths) are not read here: they live on the device.
//
// The CUDA backend uses these; the CPU backend (older) has its own copy of the same rules in
// kernels/cpu/cpu_backend.cc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/runtime/backend.h"

namespace waav::checks {

absl::Status Invalid(const char* op, const std::string& message);

// `t` is defined, on `device`, of one of `dtypes`, and of rank `rank` (or at least `min_rank`
// when rank < 0).
absl::Status CheckTensor(DeviceKind device, const char* op, const char* name, const Tensor& t,
                         std::initializer_list<DType> dtypes, int rank, int min_rank = 0);
absl::Status CheckShape(const char* op, const char* name, const Tensor& t, const Shape& expected,
                        const std::string& why);
bool Overlap(const Tensor& a, const Tensor& b);
// `y` may be exactly `x` (in place) but must not partially overlap it.
absl::Status CheckInPlaceOrDisjoint(const char* op, const char* y_name, const Tensor& y,
                                    const char* x_name, const Tensor& x);
absl::Status CheckDisjoint(const char* op, const char* y_name, const Tensor& y, const char* x_name,
                           const Tensor& x);

absl::Status ValidateCopyFromHost(DeviceKind device, const void* src, size_t bytes,
                                  const Tensor& dst);
// Backend::CopyFromHostAsync's and CopyToHostAsync's own check: `buffer` holds `bytes` from
// `offset` on (the tensor's checks are ValidateCopyFromHost's and ValidateCopyToHost's).
absl::Status ValidateHostBufferHolds(const HostBuffer& buffer, size_t bytes, size_t offset = 0,
                                     const char* op = "CopyFromHostAsync");
absl::Status ValidateCopyToHost(DeviceKind device, const Tensor& src, const void* dst,
                                size_t bytes);
// (`half_activations`: dst may also be f16 for an f32 src, a conversion.)
absl::Status ValidateCopy(DeviceKind device, const Tensor& src, const Tensor& dst,
                          bool half_activations = false);

struct LinearDims {
  int64_t m, n, k;
};
// `half_activations`: x and y may also be f16 (Op::kHalfActivations).
absl::StatusOr<LinearDims> ValidateLinear(DeviceKind device, const Tensor& x, const Tensor& weight,
                                          const Tensor* bias, const Tensor& y,
                                          bool half_activations = false);

// LinearPlanes: weight [P·C, K], P planes of M·C elements (last dim C) for x of M rows of K
// (dims: m = M, n = P·C, k = K).
absl::StatusOr<LinearDims> ValidateLinearPlanes(DeviceKind device, const Tensor& x,
                                                const Tensor& weight, const Tensor* bias,
                                                absl::Span<const Tensor> planes,
                                                bool half_activations = false);

// LinearPlanesAppend: LinearPlanes of f32 whose planes from `first_appended` on are caches
// [M, L, C] (one L) with positions i32 [M]; capacity = L (0 when no plane is appended).
struct LinearPlanesAppendDims {
  LinearDims linear;
  int64_t capacity;
};
absl::StatusOr<LinearPlanesAppendDims> ValidateLinearPlanesAppend(
    DeviceKind device, const Tensor& x, const Tensor& weight, const Tensor* bias,
    absl::Span<const Tensor> planes, int first_appended, const Tensor& positions);

struct Conv1dDims {
  int64_t batch, time, in_channels, out_channels, kernel_size, out_time;
  int stride, padding;
};
absl::StatusOr<Conv1dDims> ValidateConv1d(DeviceKind device, const Tensor& x, const Tensor& weight,
                                          const Tensor& bias, int stride, int padding,
                                          const Tensor& y);

struct RowDims {
  int64_t rows, cols;
};
// `half_activations`: y may also be f16 (Op::kHalfActivations).
absl::StatusOr<RowDims> ValidateLayerNorm(DeviceKind device, const Tensor& x, const Tensor& gamma,
                                          const Tensor& beta, float eps, const Tensor& y,
                                          bool half_activations = false);
absl::Status ValidateAdd(DeviceKind device, const Tensor& a, const Tensor& b, const Tensor& y);
absl::Status ValidateGelu(DeviceKind device, const Tensor& x, const Tensor& y);
absl::StatusOr<RowDims> ValidateLogSoftmax(DeviceKind device, const Tensor& x, const Tensor& y);

struct ArgmaxDims {
  int64_t rows, cols, num_masks, mask_words;
};
absl::StatusOr<ArgmaxDims> ValidateArgmaxLogSumExp(DeviceKind device, const Tensor& logits,
                                                   const Tensor& masks, const Tensor& mask_index,
                                                   const Tensor& out);

// Backend::FeedChoices; returns the rows.
absl::StatusOr<int64_t> ValidateFeedChoices(DeviceKind device, const Tensor& choices,
                                            const Tensor& mask_index, int32_t max_position,
                                            const Tensor& tokens, const Tensor& positions,
                                            const Tensor& lengths);

struct AttentionDims {
  int64_t batch, q_len, kv_len, heads, head_dim;
};
absl::StatusOr<AttentionDims> ValidateAttention(DeviceKind device, const Tensor& q, const Tensor& k,
                                                const Tensor& v, const Tensor* kv_lengths,
                                                int num_heads, float scale, const Tensor& out,
                                                bool half_activations = false);
// (`half_activations`: q, k and v may also be f16, all three alike; out stays f32.)

struct SharedKvAttentionDims {
  int64_t batch, q_len, kv_len, heads, width;
};
// Backend::SharedKvAttention's contract (`half_activations`: kv may be f16; `quantized`: kv
// may be i8 with kv_scales).
absl::StatusOr<SharedKvAttentionDims> ValidateSharedKvAttention(
    DeviceKind device, const Tensor& q, const Tensor& kv, const Tensor* kv_scales, int num_heads,
    float scale, const Tensor& out, bool half_activations = false, bool quantized = false);

struct QuantizeChannelsDims {
  int64_t batch, rows, channels;
};
// Backend::QuantizeChannels' contract: x f32 [B, T, C], q i8 [B, T, C], scales f32 [B, C].
absl::StatusOr<QuantizeChannelsDims> ValidateQuantizeChannels(DeviceKind device, const Tensor& x,
                                                              const Tensor& q,
                                                              const Tensor& scales);

struct HeadScoresDims {
  int64_t batch, q_len, k_len, channels;
};
// Backend::HeadScores' contract: every item inside q, k and out, the items' blocks of out
// pairwise disjoint (checked on the host, O(n log n) in the items).
absl::StatusOr<HeadScoresDims> ValidateHeadScores(DeviceKind device, const Tensor& q,
                                                  const Tensor& k, int head_dim, float scale,
                                                  absl::Span<const HeadScoresItem> items,
                                                  const Tensor& out);

struct WriteRowsDims {
  int64_t batch, rows, channels, capacity;
};
absl::StatusOr<WriteRowsDims> ValidateWriteRows(DeviceKind device, const Tensor& src,
                                                const Tensor& positions, const Tensor& dst);

struct GatherRowsDims {
  int64_t rows, channels;
};
absl::StatusOr<GatherRowsDims> ValidateGatherRows(DeviceKind device, const Tensor& src,
                                                  absl::Span<const int64_t> rows,
                                                  const Tensor& dst);

struct EmbedDims {
  int64_t batch, time, channels, vocab, max_positions;
};
absl::StatusOr<EmbedDims> ValidateEmbed(DeviceKind device, const Tensor& tokens,
                                        const Tensor& start_positions, const Tensor& token_table,
                                        const Tensor& position_table, const Tensor& y);

}  // namespace waav::checks

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embed.cuh"

namespace waav::cuda {
namespace {

constexpr int kThreads = 128;

template <typename TokenT, typename PositionT>
__global__ void EmbedKernel(const int32_t* tokens, const int32_t* start_positions, int64_t time,
                            const TokenT* token_table, int64_t vocab,
                            const PositionT* position_table, int64_t max_positions,
                            int64_t channels, unsigned long long* error_word, float* y) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t row = blockIdx.x;  // b·time + t
  const int64_t b = row / time, t = row % time;
  const int32_t token = tokens[row];
  const int32_t start = start_positions[b];
  if (token < 0 || token >= vocab) {
    if (threadIdx.x == 0) ReportDeviceError(error_word, DeviceErrorOp::kEmbed, row, token);
    return;
  }
  if (start < 0 || start + time > max_positions) {
    // Reported as a negative index so the host can tell positions from tokens.
    if (threadIdx.x == 0) ReportDeviceError(error_word, DeviceErrorOp::kEmbed, -1 - b, start);
    return;
  }
  const TokenT* tok = token_table + static_cast<int64_t>(token) * channels;
  const PositionT* pos = position_table + (static_cast<int64_t>(start) + t) * channels;
  float* out = y + row * channels;
  for (int64_t c = threadIdx.x; c < channels; c += kThreads) {
    out[c] = ToFloat(tok[c]) + ToFloat(pos[c]);
  }
}

// One block per (batch row, source row); 16-byte copies when the row allows.
template <typename Word>
__global__ void WriteRowsKernel(const Word* src, const int32_t* positions, int64_t rows,
                                int64_t row_words, int64_t capacity, unsigned long long* error_word,
                                Word* dst) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const int64_t b = blockIdx.y, r = blockIdx.x;
  const int32_t position = positions[b];
  if (position < 0 || position + rows > capacity) {
    if (threadIdx.x == 0 && r == 0) {
      ReportDeviceError(error_word, DeviceErrorOp::kWriteRows, b, position);
    }
    return;
  }
  const Word* s = src + (b * rows + r) * row_words;
  Word* d = dst + (b * capacity + position + r) * row_words;
  for (int64_t i = threadIdx.x; i < row_words; i += kThreads) d[i] = s[i];
}

bool Aligned(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

constexpr int kGatherPerLaunch = 256;
struct GatherIndex {
  int64_t row[kGatherPerLaunch];
};

// One block per gathered row.
template <typename Word>
__global__ void GatherRowsKernel(const Word* src, GatherIndex index, int64_t row_words, Word* dst) {
  WaitForPreviousKernel();
  AllowNextKernel();
  const Word* s = src + index.row[blockIdx.x] * row_words;
  Word* d = dst + int64_t{blockIdx.x} * row_words;
  for (int64_t i = threadIdx.x; i < row_words; i += kThreads) d[i] = s[i];
}

}  // namespace

cudaError_t LaunchEmbed(const LaunchContext& ctx, const int32_t* tokens,
                        const int32_t* start_positions, int64_t batch, int64_t time,
                        const void* token_table, bool token_f16, int64_t vocab,
                        const void* position_table, bool position_f16, int64_t max_positions,
                        int64_t channels, float* y) {
  if (batch == 0 || time == 0 || channels == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(batch * time)), block(kThreads);
  auto launch = [&](auto* tok, auto* pos) {
    return Launch(ctx,
                  EmbedKernel<std::remove_const_t<std::remove_pointer_t<decltype(tok)>>,
                              std::remove_const_t<std::remove_pointer_t<decltype(pos)>>>,
                  grid, block, 0, tokens, start_positions, time, tok, vocab, pos, max_positions,
                  channels, ctx.error_word, y);
  };
  const auto* th = static_cast<const __half*>(token_table);
  const auto* tf = static_cast<const float*>(token_table);
  const auto* ph = static_cast<const __half*>(position_table);
  const auto* pf = static_cast<const float*>(position_table);
  if (token_f16) return position_f16 ? launch(th, ph) : launch(th, pf);
  return position_f16 ? launch(tf, ph) : launch(tf, pf);
}

cudaError_t LaunchWriteRows(const LaunchContext& ctx, const void* src, const int32_t* positions,
                            int64_t batch, int64_t rows, int64_t row_bytes, int64_t capacity,
                            void* dst) {
  if (batch == 0 || rows == 0 || row_bytes == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(batch)), block(kThreads);
  if (row_bytes % 16 == 0 && Aligned(src, 16) && Aligned(dst, 16)) {
    return Launch(ctx, WriteRowsKernel<uint4>, grid, block, 0, static_cast<const uint4*>(src),
                  positions, rows, row_bytes / 16, capacity, ctx.error_word,
                  static_cast<uint4*>(dst));
  }
  if (row_bytes % 4 == 0 && Aligned(src, 4) && Aligned(dst, 4)) {
    return Launch(ctx, WriteRowsKernel<uint32_t>, grid, block, 0, static_cast<const uint32_t*>(src),
                  positions, rows, row_bytes / 4, capacity, ctx.error_word,
                  static_cast<uint32_t*>(dst));
  }
  return Launch(ctx, WriteRowsKernel<uint16_t>, grid, block, 0, static_cast<const uint16_t*>(src),
                positions, rows, row_bytes / 2, capacity, ctx.error_word,
                static_cast<uint16_t*>(dst));
}

cudaError_t LaunchGatherRows(const LaunchContext& ctx, const void* src, const int64_t* rows,
                             int64_t count, int64_t row_bytes, void* dst) {
  for (int64_t first = 0; first < count && row_bytes > 0; first += kGatherPerLaunch) {
    const int64_t n = std::min<int64_t>(kGatherPerLaunch, count - first);
    GatherIndex index{};
    std::copy(rows + first, rows + first + n, index.row);
    auto launch = [&](auto word) {
      using Word = decltype(word);
      return Launch(
          ctx, GatherRowsKernel<Word>, dim3(static_cast<unsigned>(n)), dim3(kThreads), 0,
          static_cast<const Word*>(src), index, row_bytes / static_cast<int64_t>(sizeof(Word)),
          static_cast<Word*>(dst) + first * (row_bytes / static_cast<int64_t>(sizeof(Word))));
    };
    cudaError_t err;
    if (row_bytes % 16 == 0 && Aligned(src, 16) && Aligned(dst, 16)) {
      err = launch(uint4{});
    } else if (row_bytes % 4 == 0 && Aligned(src, 4) && Aligned(dst, 4)) {
      err = launch(uint32_t{});
    } else {
      err = launch(uint8_t{});
    }
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace waav::cuda

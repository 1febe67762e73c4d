#include "kernels/cuda/attention_choice.h"

#include <tuple>

#include "kernels/cuda/backend_util.h"
#include "kernels/cuda/linear.cuh"

namespace waav::cuda {

AttentionChoice ChooseAttention(AttentionArgs& args, int64_t q_numel, int64_t kv_numel,
                                const CudaBackendOptions& options, int sm_count,
                                int64_t max_counters) {
  const int64_t out_numel = q_numel;  // out is shaped like q
  AttentionChoice c;
  c.q_numel = q_numel;
  c.kv_numel = kv_numel;
  const bool fast = options.math == CudaMath::kFast;
  // An f32 q over f16 K/V: Flash v2 (its split-q form) from flash_half_kv_min_queries queries.
  const bool flash_kv_half = args.kv_half && options.flash_half_kv_min_queries > 0 &&
                             args.q_len >= options.flash_half_kv_min_queries;
  c.flash2 = (!args.kv_half || flash_kv_half) && fast && options.use_flash_v2 &&
             FlashAttention2Supported(args);
  // f16 inputs elsewhere than flash v2: converted to f32 first (the other kernels read f32).
  if (args.half_inputs && !c.flash2) {
    c.convert_bytes = RoundUp256(static_cast<size_t>(q_numel) * 4) +
                      2 * RoundUp256(static_cast<size_t>(kv_numel) * 4);
    args.half_inputs = false;
  }
  c.flash = c.flash2 || (!args.kv_half && fast && FlashAttentionSupported(args));
  if (!c.flash && c.convert_bytes == 0 && options.decode_attention) {
    c.decode =
        PlanDecodeAttention(args, sm_count, max_counters, options.decode_attention_blocks_per_sm,
                            options.decode_attention_keys_per_pass);
    c.decode.evict_first = options.decode_attention_evict_first;
  }
  size_t own = 0;
  if (c.decode.supported) {
    own = c.decode.partial_bytes;
  } else if (c.flash2) {
    c.flash_plan = PlanFlashAttention2(args, sm_count, max_counters, options.flash_splits,
                                       options.flash_m_tiles);
    own = c.flash_plan.scratch_bytes;
  } else if (c.flash) {
    c.flash_plan = PlanFlashAttention(args, sm_count, max_counters);
    own = c.flash_plan.scratch_bytes;
  } else {
    c.split =
        PlanSplitAttention(args, sm_count, max_counters, options.split_attention_blocks_per_sm);
    own = c.split.partial_bytes;
  }
  // An f16 out: SplitAttention and Flash v2 round as they store; the other kernels write f32
  // into scratch, then one conversion.
  if (args.out_half && (c.decode.supported || (c.flash && !c.flash2))) {
    c.out32_bytes = RoundUp256(static_cast<size_t>(out_numel) * 4);
  }
  c.scratch_bytes = c.convert_bytes + own + c.out32_bytes;
  return c;
}

cudaError_t LaunchAttention(const LaunchContext& ctx, AttentionArgs args, const AttentionChoice& c,
                            void* scratch, int* counters) {
  char* own = static_cast<char*>(scratch);
  if (c.convert_bytes > 0) {
    const size_t q_bytes = RoundUp256(static_cast<size_t>(c.q_numel) * 4);
    const size_t kv_bytes = RoundUp256(static_cast<size_t>(c.kv_numel) * 4);
    auto* q32 = reinterpret_cast<float*>(own);
    auto* k32 = reinterpret_cast<float*>(own + q_bytes);
    auto* v32 = reinterpret_cast<float*>(own + q_bytes + kv_bytes);
    for (const auto& [from, n, to] :
         {std::tuple{args.q16, c.q_numel, q32}, std::tuple{args.k16, c.kv_numel, k32},
          std::tuple{args.v16, c.kv_numel, v32}}) {
      if (const cudaError_t err = LaunchToFloat(ctx, from, n, to); err != cudaSuccess) return err;
    }
    args.q = q32;
    args.k = k32;
    args.v = v32;
    own += c.convert_bytes;
  }
  if (c.out32_bytes > 0) {  // the kernel into f32 at the scratch's end, then rounded to f16
    args.out =
        reinterpret_cast<float*>(static_cast<char*>(scratch) + c.scratch_bytes - c.out32_bytes);
    args.out_half = false;
    cudaError_t err = cudaSuccess;
    if (c.decode.supported) {
      err = LaunchDecodeAttention(ctx, args, c.decode, reinterpret_cast<float*>(own), counters);
    } else {
      err = LaunchFlashAttention(ctx, args, c.flash_plan, own, counters);
    }
    if (err != cudaSuccess) return err;
    return LaunchToHalf(ctx, args.out, c.q_numel, args.out16);
  }
  if (c.decode.supported) {
    return LaunchDecodeAttention(ctx, args, c.decode, reinterpret_cast<float*>(own), counters);
  }
  if (c.flash2) return LaunchFlashAttention2(ctx, args, c.flash_plan, own, counters);
  if (c.flash) return LaunchFlashAttention(ctx, args, c.flash_plan, own, counters);
  return LaunchSplitAttention(
      ctx, args, c.split,
      own != nullptr && c.split.partial_bytes > 0 ? reinterpret_cast<float*>(own) : nullptr,
      counters);
}

}  // namespace waav::cuda

// The persistent decoder step (persistent_whisper_step.h) against the CPU backend's DecodeStep on
// a fresh random tiny.en-shaped model, batches 1, 1, 2, 4 and 8 with a different position per row
// (row 0 of the first case from position 0, of the second from text_ctx - 5, so that its last
// step attends all text_ctx keys; rows 0 and 1 of the larger batches likewise; the rest random),
// self caches filled with the same random history on both sides, eagerly and replayed from a
// graph; both attention versions (block chunks, the default; warp items), and the fused FFN
// and fused self-attention + output projection (atomic sums). Outputs are poisoned
// (NaN, -7) before every step. Checked per step:
//  * the K/V rows the step appended to every layer's self cache (layer 0's depend on nothing
//    but the step's inputs; later layers' show where an error starts);
//  * the logits, relative L2 error <= 1e-5 with f32 cross K/V (f32 arithmetic throughout; both
//    sides get the same random cross K/V), <= 3e-3 with f16 cross K/V (K and V rounded to f16,
//    ~2.4e-4 relative each);
//  * the greedy token: identical to the CPU's argmax unless the CPU's top two are closer than
//    four times the largest logit error (then it must be one of them);
//  * its log-softmax value and the log-sum-exp, within 1e-4 + 4 x the largest logit error;
//  * suppression (every row's CPU argmax suppressed: the best of the rest must win) and a bad
//    token id
//    (reported as InvalidArgument by the next Synchronize()).
// Skips without a GPU.
#include "bench/gpu/persistent_whisper_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cluster_decoder.cuh"
#include "tests/support/random_whisper.h"
#include "tests/support/test_env.h"

namespace waav::bench {
namespace {

double RelativeError(const float* got, const float* want, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

struct StepCase {
  bool f16_cross;
  bool block_attention;
  bool fuse_ffn = false;
  bool fuse_self_out = false;
  bool cluster = false;    // the cluster step (kernels/cuda/cluster_decoder.cuh); f16 cross only
  bool logits_mma = true;  // the cluster step's logits on tensor cores
  int logits_pace_ns = 0;  // its logits loads paced (kernels/cuda/persistent_step.h)
  bool norm_one_warp = false;     // the cluster step's LayerNorms by one warp (not 12)
  bool half_partials = false;     // its attention partials exchanged with o as f16
  bool idle_cross_lanes = false;  // its cross-attention as before session 12 (lanes idle)
  bool full_merge = false;        // its whole attention partials to every block (no reduce-scatter)
  bool narrow_logits = false;     // its logits as before session 13 (no wide tiles at 1-4 rows)
  // Its weight columns staged in shared memory (PersistentStepTuning::cluster_staged_weights): 2
  // FFN1, FFN2 and QKV; 1 FFN2 and QKV; 0 none, all loaded into registers (before session 14).
  int staged_weights = 2;
  bool cuda_core_cross = false;  // its cross-attention on the CUDA cores (before session 15)
};
void PrintTo(const StepCase& c, std::ostream* os) {
  *os << (c.f16_cross ? "f16" : "f32") << " cross, "
      << (c.block_attention ? "block attention" : "warp items") << (c.fuse_ffn ? ", fused FFN" : "")
      << (c.fuse_self_out ? ", fused self-attention" : "") << (c.cluster ? ", cluster step" : "")
      << (c.cluster && !c.logits_mma ? ", logits on CUDA cores" : "")
      << (c.logits_pace_ns > 0 ? ", paced logits loads" : "")
      << (c.norm_one_warp ? ", LayerNorms by one warp" : "")
      << (c.half_partials ? ", f16 attention partials" : "")
      << (c.idle_cross_lanes ? ", cross-attention with idle lanes" : "")
      << (c.cuda_core_cross ? ", cross-attention on CUDA cores" : "")
      << (c.full_merge ? ", whole partials to every block" : "")
      << (c.narrow_logits ? ", narrow logits tiles" : "")
      << (c.staged_weights == 0   ? ", weights into registers"
          : c.staged_weights == 1 ? ", FFN2 and QKV weights staged"
                                  : "");
}

class PersistentStepTest : public ::testing::TestWithParam<StepCase> {};

TEST_P(PersistentStepTest, MatchesCpuDecodeStep) {
  const bool f16_cross = GetParam().f16_cross;
  CudaBackendOptions options;
  options.math = CudaMath::kAccurate;
  auto gpu = CreateCudaBackend(options);
  if (!gpu.ok()) GTEST_SKIP() << "no usable GPU, CUDA test skipped: " << gpu.status().message();
  std::unique_ptr<Backend> cpu = CreateCpuBackend({});
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const auto dir = waav::testing::MakeTempDir("waav-persistent-step");
  ASSERT_TRUE(waav::testing::WriteRandomWhisperModel(dir.string(), seed));
  auto cpu_model = whisper::WhisperModel::Load(dir.string(), *cpu);
  ASSERT_TRUE(cpu_model.ok()) << cpu_model.status();
  whisper::WhisperModelOptions gpu_options;
  gpu_options.weight_dtype = DType::kF16;
  gpu_options.fused_decoder_step = whisper::GraphUse::kNever;  // the op-by-op step where it steps
  gpu_options.half_cross_cache = false;  // f32 caches, copied to f16 by RefreshCross() or not
  auto gpu_model = whisper::WhisperModel::Load(dir.string(), **gpu, gpu_options);
  ASSERT_TRUE(gpu_model.ok()) << gpu_model.status();
  auto persistent = PersistentWhisperDecoder::Load(dir.string(), **gpu);
  ASSERT_TRUE(persistent.ok()) << persistent.status();
  std::filesystem::remove_all(dir);
  Backend& g = **gpu;
  const whisper::WhisperDims& d = (*cpu_model)->dims();
  const double logits_tolerance = f16_cross ? 3e-3 : 1e-5;

  const int batches[] = {1, 1, 2, 4, 8};
  for (size_t case_index = 0; case_index < std::size(batches); ++case_index) {
    const int batch = batches[case_index];
    SCOPED_TRACE(absl::StrCat("batch ", batch, ", f16 cross ", f16_cross, ", block attention ",
                              GetParam().block_attention, ", seed ", seed));
    std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
    auto cpu_state = (*cpu_model)->NewDecoderState(batch);
    auto gpu_state = (*gpu_model)->NewDecoderState(batch);
    ASSERT_TRUE(cpu_state.ok() && gpu_state.ok());
    // The same random history in both self caches, and the same random cross K/V (instead of
    // an encoder pass: the encoder is not under test, and B windows of it on the CPU are slow).
    const size_t cache_n = static_cast<size_t>(batch) * d.n_text_ctx * d.d_model;
    const size_t cross_n = static_cast<size_t>((*cpu_state)->cross_k(0).numel());
    for (int layer = 0; layer < d.n_decoder_layers; ++layer) {
      for (int kv = 0; kv < 4; ++kv) {
        const whisper::DecoderState& cs = **cpu_state;
        const whisper::DecoderState& gs = **gpu_state;
        const Tensor& c = kv == 0   ? cs.self_k(layer)
                          : kv == 1 ? cs.self_v(layer)
                          : kv == 2 ? cs.cross_k(layer)
                                    : cs.cross_v(layer);
        const Tensor& t = kv == 0   ? gs.self_k(layer)
                          : kv == 1 ? gs.self_v(layer)
                          : kv == 2 ? gs.cross_k(layer)
                                    : gs.cross_v(layer);
        std::vector<float> values(kv < 2 ? cache_n : cross_n);
        for (float& v : values) v = dist(rng);
        ASSERT_TRUE(cpu->CopyFromHost(values.data(), values.size() * 4, c).ok());
        ASSERT_TRUE(g.CopyFromHost(values.data(), values.size() * 4, t).ok());
      }
    }
    PersistentStepOptions step_options;
    step_options.f16_cross = f16_cross;
    step_options.tuning.block_attention = GetParam().block_attention;
    step_options.tuning.fuse_ffn = GetParam().fuse_ffn;
    step_options.tuning.fuse_self_out = GetParam().fuse_self_out;
    step_options.tuning.cluster = GetParam().cluster;
    step_options.tuning.logits_mma = GetParam().logits_mma;
    step_options.tuning.logits_mma_wide = !GetParam().narrow_logits;
    step_options.tuning.logits_pace_ns = GetParam().logits_pace_ns;
    step_options.tuning.cluster_norm_all_warps = !GetParam().norm_one_warp;
    step_options.tuning.cluster_half_partials = GetParam().half_partials;
    step_options.tuning.cluster_balanced_cross = !GetParam().idle_cross_lanes;
    step_options.tuning.cluster_mma_cross =
        !GetParam().cuda_core_cross && !GetParam().idle_cross_lanes;
    step_options.tuning.cluster_staged_weights = GetParam().staged_weights;
    // (f16 partials apply to the whole-partials merge only.)
    step_options.tuning.cluster_scatter_merge = !GetParam().full_merge && !GetParam().half_partials;
    const absl::Status prepared = (*persistent)->Prepare(**gpu_state, step_options);
    if (absl::IsUnimplemented(prepared)) {
      GTEST_SKIP() << "no persistent step on this device: " << prepared.message();
    }
    ASSERT_TRUE(prepared.ok()) << prepared;
    ASSERT_TRUE((*persistent)->RefreshCross(**gpu_state).ok());
    if (GetParam().cluster && !(*persistent)->UsesClusterStep()) {
      GTEST_SKIP() << "the cluster step does not run on this device (clusters of "
                   << cuda::kClusterDecoderBlocks << " blocks, sm_90): not tested";
    }

    constexpr int kSteps = 5;
    std::vector<int32_t> start(static_cast<size_t>(batch));
    for (int32_t& s : start) s = static_cast<int32_t>(rng() % (d.n_text_ctx - kSteps));
    const int32_t last_start = d.n_text_ctx - kSteps;  // its last step: position text_ctx - 1
    if (case_index == 0) start[0] = 0;
    if (case_index == 1) start[0] = last_start;
    if (batch >= 2) {
      start[0] = 0;
      start[1] = last_start;
    }
    std::unique_ptr<Graph> graph;
    for (int step = 0; step < kSteps; ++step) {
      SCOPED_TRACE(absl::StrCat("step ", step));
      const bool suppress = step == 4;
      std::vector<int32_t> tokens(static_cast<size_t>(batch)), positions(tokens.size()),
          lengths(tokens.size());
      for (size_t b = 0; b < tokens.size(); ++b) {
        tokens[b] = static_cast<int32_t>(rng() % static_cast<uint32_t>(d.n_vocab));
        positions[b] = start[b] + step;
        lengths[b] = positions[b] + 1;
      }
      auto want = (*cpu_model)->Decode(tokens, 1, positions, **cpu_state);
      ASSERT_TRUE(want.ok()) << want.status();
      const whisper::DecoderState& s = **gpu_state;
      {
        // Poison: every output the step must write.
        const std::vector<float> nan(static_cast<size_t>(s.step_logits().numel()), NAN);
        ASSERT_TRUE(g.CopyFromHost(nan.data(), nan.size() * 4, s.step_logits()).ok());
        const std::vector<int32_t> minus7(tokens.size(), -7);
        ASSERT_TRUE(
            g.CopyFromHost(minus7.data(), minus7.size() * 4, (*persistent)->best_token()).ok());
        ASSERT_TRUE(
            g.CopyFromHost(nan.data(), tokens.size() * 4, (*persistent)->best_logprob()).ok());
        ASSERT_TRUE(g.CopyFromHost(nan.data(), tokens.size() * 4, (*persistent)->logsumexp()).ok());
      }
      ASSERT_TRUE(g.CopyFromHost(tokens.data(), tokens.size() * 4, s.step_tokens()).ok());
      ASSERT_TRUE(g.CopyFromHost(positions.data(), positions.size() * 4, s.positions()).ok());
      ASSERT_TRUE(g.CopyFromHost(lengths.data(), lengths.size() * 4, s.lengths()).ok());
      // The CPU's argmax of each row, suppressed in the last step.
      std::vector<int32_t> cpu_best(tokens.size());
      for (size_t b = 0; b < tokens.size(); ++b) {
        const float* row = want->data() + b * d.n_vocab;
        cpu_best[b] = static_cast<int32_t>(std::max_element(row, row + d.n_vocab) - row);
      }
      // Suppression is one set for all rows: every row's CPU argmax.
      auto suppressed = [&](int token) {
        return std::find(cpu_best.begin(), cpu_best.end(), token) != cpu_best.end();
      };
      if (suppress) {
        ASSERT_TRUE((*persistent)->SetSuppressedTokens(cpu_best).ok());
        ASSERT_TRUE((*persistent)->Step(s).ok());
      } else if (step < 2) {
        ASSERT_TRUE((*persistent)->Step(s).ok());
      } else {
        if (!graph) {
          ASSERT_TRUE(g.BeginCapture().ok());
          ASSERT_TRUE((*persistent)->Step(s).ok());
          auto captured = g.EndCapture();
          ASSERT_TRUE(captured.ok()) << captured.status();
          graph = std::move(*captured);
        }
        ASSERT_TRUE(graph->Replay().ok());
      }
      ASSERT_TRUE(g.Synchronize().ok());
      // Appended K/V, per layer.
      for (int layer = 0; layer < d.n_decoder_layers; ++layer) {
        for (int kv = 0; kv < 2; ++kv) {
          const Tensor& c = kv == 0 ? (*cpu_state)->self_k(layer) : (*cpu_state)->self_v(layer);
          const Tensor& t = kv == 0 ? s.self_k(layer) : s.self_v(layer);
          auto cw = Download<float>(*cpu, c);
          auto gw = Download<float>(g, t);
          ASSERT_TRUE(cw.ok() && gw.ok());
          std::vector<float> cr, gr;
          for (size_t b = 0; b < tokens.size(); ++b) {
            const size_t off = (b * d.n_text_ctx + static_cast<size_t>(positions[b])) * d.d_model;
            cr.insert(cr.end(), cw->begin() + off, cw->begin() + off + d.d_model);
            gr.insert(gr.end(), gw->begin() + off, gw->begin() + off + d.d_model);
          }
          const double error = RelativeError(gr.data(), cr.data(), cr.size());
          if (step == 0 || error > logits_tolerance) {
            std::cout << "parity: persistent step batch " << batch << " layer " << layer
                      << (kv == 0 ? " K" : " V") << " appended: relative L2 error " << error
                      << "\n";
          }
          EXPECT_LE(error, layer == 0 ? 1e-5 : logits_tolerance) << "layer " << layer;
        }
      }
      auto logits = Download<float>(g, s.step_logits());
      auto best = Download<int32_t>(g, (*persistent)->best_token());
      auto logprob = Download<float>(g, (*persistent)->best_logprob());
      auto lse = Download<float>(g, (*persistent)->logsumexp());
      ASSERT_TRUE(logits.ok() && best.ok() && logprob.ok() && lse.ok());
      const double error = RelativeError(logits->data(), want->data(), want->size());
      std::cout << "parity: persistent step batch " << batch << (f16_cross ? " f16" : " f32")
                << " cross" << (GetParam().block_attention ? "" : ", warp items")
                << (GetParam().fuse_ffn ? ", fused FFN" : "")
                << (GetParam().fuse_self_out ? ", fused self-attention + out-proj" : "")
                << (GetParam().cluster ? ", cluster step" : "") << ", step " << step
                << (suppress ? " (suppressed argmax)" : "") << ": logits relative L2 error "
                << error << " (tolerance " << logits_tolerance << ")\n";
      EXPECT_LE(error, logits_tolerance);
      for (size_t b = 0; b < tokens.size(); ++b) {
        const float* w = want->data() + b * d.n_vocab;
        const float* got = logits->data() + b * d.n_vocab;
        double max_err = 0, m = -INFINITY;
        for (int i = 0; i < d.n_vocab; ++i) {
          max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - w[i]));
          if (!(suppress && suppressed(i))) m = std::max(m, static_cast<double>(w[i]));
        }
        double sum = 0;
        int first = -1, second = -1;  // the CPU's top two (outside the suppressed one)
        for (int i = 0; i < d.n_vocab; ++i) {
          if (suppress && suppressed(i)) continue;
          sum += std::exp(static_cast<double>(w[i]) - m);
          if (first < 0 || w[i] > w[first]) {
            second = first;
            first = i;
          } else if (second < 0 || w[i] > w[second]) {
            second = i;
          }
        }
        const double want_lse = m + std::log(sum);
        const int32_t token = (*best)[b];
        if (w[first] - w[second] > 4 * max_err) {
          EXPECT_EQ(token, first) << "row " << b;
        } else {
          std::cout << "row " << b << ": CPU top two " << first << ", " << second
                    << " within 4x the logit error; GPU chose " << token << "\n";
          EXPECT_TRUE(token == first || token == second) << "row " << b;
        }
        if (suppress) {
          EXPECT_FALSE(suppressed(token))
              << "row " << b << ": suppressed token " << token << " won";
        }
        const double tol = 1e-4 + 4 * max_err;
        EXPECT_NEAR((*lse)[b], want_lse, tol) << "row " << b;
        if (token >= 0 && token < d.n_vocab) {
          EXPECT_NEAR((*logprob)[b], w[token] - want_lse, tol) << "row " << b;
        }
      }
    }
    ASSERT_TRUE((*persistent)->SetSuppressedTokens({}).ok());
    // A token outside the vocabulary is reported by the next Synchronize().
    graph.reset();
    std::vector<int32_t> bad(static_cast<size_t>(batch), 3);
    bad[0] = d.n_vocab + 5;
    ASSERT_TRUE(g.CopyFromHost(bad.data(), bad.size() * 4, (*gpu_state)->step_tokens()).ok());
    ASSERT_TRUE((*persistent)->Step(**gpu_state).ok());
    const absl::Status status = g.Synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("Embed"), absl::string_view::npos) << status;
  }
}

// (The device script's compute-sanitizer pass runs the cases named *F16Cross*.)
INSTANTIATE_TEST_SUITE_P(
    CrossKv, PersistentStepTest,
    ::testing::Values(
        StepCase{false, true}, StepCase{true, true}, StepCase{true, false}, StepCase{false, false},
        StepCase{true, true, true}, StepCase{false, true, true}, StepCase{true, true, false, true},
        StepCase{true, true, true, true}, StepCase{false, true, true, true},
        StepCase{true, true, false, false, true}, StepCase{true, true, false, false, true, false},
        StepCase{true, true, false, false, true, true, 8000},
        StepCase{true, true, false, false, true, true, 8000, true},
        StepCase{true, true, false, false, true, true, 8000, false, true},
        StepCase{true, true, false, false, true, true, 8000, false, false, true},
        StepCase{true, true, false, false, true, true, 8000, false, false, false, true},
        StepCase{true, true, false, false, true, true, 8000, false, false, false, false, true},
        StepCase{true, true, false, false, true, true, 8000, false, false, false, false, false, 0},
        StepCase{true, true, false, false, true, true, 8000, false, false, false, false, false, 1},
        StepCase{true, true, false, false, true, true, 8000, false, false, false, false, false, 2,
                 true}),
    [](const ::testing::TestParamInfo<StepCase>& info) {
      if (info.param.norm_one_warp) return std::string("ClusterStepNormOneWarp");
      if (info.param.half_partials) return std::string("ClusterStepHalfPartials");
      if (info.param.idle_cross_lanes) return std::string("ClusterStepIdleCrossLanes");
      if (info.param.full_merge) return std::string("ClusterStepFullMerge");
      if (info.param.narrow_logits) return std::string("ClusterStepNarrowLogits");
      if (info.param.staged_weights == 0) return std::string("ClusterStepRegisterWeights");
      if (info.param.staged_weights == 1) return std::string("ClusterStepStagedFfn2Qkv");
      if (info.param.cuda_core_cross) return std::string("ClusterStepCudaCoreCross");
      if (info.param.cluster && info.param.logits_pace_ns > 0) {
        return std::string("ClusterStepPacedLogits");
      }
      if (info.param.cluster) {
        return std::string(info.param.logits_mma ? "ClusterStepF16Cross"
                                                 : "ClusterStepCudaCoreLogits");
      }
      if (!info.param.block_attention) {
        return std::string(info.param.f16_cross ? "WarpItemsF16" : "WarpItemsF32");
      }
      return std::string(info.param.f16_cross ? "F16Cross" : "F32Cross") +
             (info.param.fuse_ffn ? "FusedFfn" : "") +
             (info.param.fuse_self_out ? "FusedSelf" : "");
    });

}  // namespace
}  // namespace waav::bench

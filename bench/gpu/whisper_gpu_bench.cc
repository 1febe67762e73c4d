// Whisper tiny.en on the CUDA backend, random weights of the real shapes: decoder step latency at
// batch 1, 8, 64, 256 and encoder time per 30 s window at batch 1 and 16, for several backend
// variants (eager kernel launches, CUDA graphs with and without programmatic dependent launch,
// fast and accurate math). Prints a table and writes it as TSV.
//
// Two numbers per case, both medians over repeated runs:
//  * per step (or window), back to back: R replays (or eager passes) queued without waiting,
//    wall time / R. What a busy GPU sustains; launch gaps the host hides do not count.
//  * round trip: one replay (or pass) followed by Synchronize(), as a real-time loop that waits
//    for each step's logits sees it (launch, execution, completion signal).
// Decoder steps run at position 64 (65 keys in the self-attention cache of 448; the persistent
// steps' rows at --position) against a cross cache of 1500 encoder positions, with f16 weights
// and f32 activations and caches.
//
// The engine variants run WhisperModel::DecodeStep op by op, except "engine fused step", where it
// runs the backend's prepared step (the persistent kernel, f32 cross K/V) up to 8 rows.
// The persistent step (bench/gpu/persistent_whisper_step.h, one cooperative launch per step,
// batches 1 to 8) also reduces the greedy token and log-sum-exp on the device; its variants
// differ in one knob each (f16 or f32 cross K/V, L2 prefetch, graph or direct launch, ...).
//
// Usage: whisper_gpu_bench [--out results.tsv] [--quick] [--filter SUBSTRING]
//                          [--exclude SUBSTRING] [--no-ops] [--encoder-batches 1,16|none]
//                          [--decoder-batches 1,8,64,256] [--prefill-tokens 4,16,64]
//                          [--position 64]
//   --filter / --exclude: only the variants whose name contains / lacks SUBSTRING (--exclude may
//   be given several times);
//   --only "NAME;NAME": only the variants of exactly these names;
//   --no-ops: skip the op profile; --list: print the variants selected and exit;
//   --prefill-tokens T,...: also time WhisperModel::PrefillRows of each decoder batch with
//   prompts of T random tokens (graphs where the model uses them, logits at the last; not for the
//   fused or persistent rows);
//   --position P: the persistent steps' rows at position P (P + 1 self-attention keys; 0-447)
//   instead of 64;
//   --encoder-only: only the encoder rows (its ops, and the variants that run the encoder),
//   with the encoder ops profiled on the first kernels (cuBLAS GEMMs, flash v1) and the new.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/gpu/bench_variants.h"
#include "bench/gpu/fused_whisper_step.h"
#include "bench/gpu/persistent_whisper_step.h"
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/dtype.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/persistent_decoder.cuh"
#include "tests/support/random_whisper.h"

namespace waav {
namespace {

using Clock = std::chrono::steady_clock;

using bench::BackendVariant;

struct Row {
  std::string what, variant;
  int batch;
  double per_item_us, round_trip_us;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Times `run` (one step or pass, queued without waiting): `reps` rounds of `burst` back-to-back
// runs, and `reps` single runs each followed by a synchronization.
absl::Status Time(Backend& backend, const std::function<absl::Status()>& run, int burst, int reps,
                  double* per_item_us, double* round_trip_us) {
  for (int i = 0; i < 5; ++i) RETURN_IF_ERROR(run());  // warm-up
  RETURN_IF_ERROR(backend.Synchronize());
  std::vector<double> bursts, singles;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < burst; ++i) RETURN_IF_ERROR(run());
    RETURN_IF_ERROR(backend.Synchronize());
    bursts.push_back(MicrosSince(start) / burst);
  }
  for (int r = 0; r < reps * 4; ++r) {
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(run());
    RETURN_IF_ERROR(backend.Synchronize());
    singles.push_back(MicrosSince(start));
  }
  *per_item_us = Median(bursts);
  *round_trip_us = Median(singles);
  return absl::OkStatus();
}

std::vector<float> RandomVector(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Batch sizes of the encoder and decoder-step cases (--encoder-batches, --decoder-batches).
std::vector<int> g_encoder_batches = {1, 16};
int g_position = 64;  // the persistent steps' position (--position)
std::vector<int> g_decoder_batches = {1, 8, 64, 256};
// Prompt lengths of the prefill rows (--prefill-tokens; none by default).
std::vector<int> g_prefill_tokens;
bool g_encoder_only = false;

std::vector<int> ParseList(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 1 || v > 4096) return {};
    out.push_back(static_cast<int>(v));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

// The cluster step's timeline (kProfileTimeline): first every block's globaltimer at the end of
// each of its phases (per phase of layers 0 and 1: the spread between the first and the last
// block and which came last), then block 0's clock64() at its start and at each phase's start
// and end: per phase the wait for its inputs (the previous end to this start) and its work
// (start to end), in cycles; then the launches' globaltimer stamps; then per layer the
// attention phases' insides (cluster_decoder_parts.cuh, kTimelineInner).
void PrintClusterTimeline(const std::vector<int64_t>& all, int batch) {
  constexpr int kBlocks = 16, kPerBlock = 36, kMain = 96, kInner = 16, kGlobal = 8;
  std::string spread;
  for (int i = 0; i < 16; ++i) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    int last_block = -1;
    for (int b = 0; b < kBlocks; ++b) {
      const int64_t t = all[static_cast<size_t>(b * kPerBlock + i)];
      first = std::min(first, t);
      if (t > last) {
        last = t;
        last_block = b;
      }
    }
    spread += absl::StrFormat(" %lld(b%d)", static_cast<long long>(last - first), last_block);
  }
  std::cout << "timeline B=" << batch << " phase-end spread ns (last block), layers 0-1:" << spread
            << "\n";
  const std::vector<int64_t> stamps(all.end() - kMain, all.end());
  static const char* const kPhases[] = {"qkv",   "self", "out",  "cq",
                                        "cross", "cout", "ffn1", "ffn2"};
  int64_t work = 0, waits = 0;
  std::string line;
  const size_t g = stamps.size() - kInner - kGlobal;  // the globaltimer stamps
  const size_t phases = (g - 1) / 2;
  for (size_t i = 0; i < phases; ++i) {
    const int64_t before = stamps[2 * i], begin = stamps[2 * i + 1], end = stamps[2 * i + 2];
    if (begin <= 0 || end < begin || before <= 0 || begin < before) break;
    line += absl::StrFormat(" %s %lld+%lld", kPhases[i % 8], static_cast<long long>(begin - before),
                            static_cast<long long>(end - begin));
    work += end - begin;
    waits += begin - before;
    if (i % 8 == 7) {
      std::cout << "timeline B=" << batch << " layer " << i / 8 << " (wait+work cycles):" << line
                << "\n";
      line.clear();
    }
  }
  std::cout << "timeline B=" << batch << ": " << work << " cycles of work, " << waits
            << " cycles waiting for inputs" << line << "\n";
  // Inside the attention phases (block 0, cycles): self = its warps' attention, then merging
  // and sending the partial; cross = waiting for the staged K/V, the warps, the merge and send.
  // Phase i of a layer starts at stamp 16 layer + 2 i + 1 and ends at the next (self: i = 1,
  // cross: i = 4).
  for (int layer = 0; layer < 4 && static_cast<size_t>(16 * layer + 10) < g; ++layer) {
    const int64_t* in = &stamps[g + kGlobal + static_cast<size_t>(3 * layer)];
    const int64_t* ph = &stamps[static_cast<size_t>(16 * layer)];
    if (in[0] <= 0 || in[2] <= 0) break;
    std::cout << absl::StrFormat(
        "timeline B=%d layer %d inside (cycles): self warps %lld + merge/send %lld; cross "
        "stage wait %lld + warps %lld + merge/send %lld\n",
        batch, layer, static_cast<long long>(in[0] - ph[3]), static_cast<long long>(ph[4] - in[0]),
        static_cast<long long>(in[1] - ph[9]), static_cast<long long>(in[2] - in[1]),
        static_cast<long long>(ph[10] - in[2]));
  }
  // globaltimer stamps (ns) after the phases': layers start, end; logits start, waited, done.
  const int64_t t0 = stamps[g];
  std::cout << absl::StrFormat(
                   "timeline B=%d (ns from the layers' start): layers end %lld, logits block 0 "
                   "start %lld, wait returned %lld, normed %lld, staged columns %lld, "
                   "register columns %lld, columns done %lld",
                   batch, static_cast<long long>(stamps[g + 1] - t0),
                   static_cast<long long>(stamps[g + 2] - t0),
                   static_cast<long long>(stamps[g + 3] - t0),
                   static_cast<long long>(stamps[g + 5] - t0),
                   static_cast<long long>(stamps[g + 6] - t0),
                   static_cast<long long>(stamps[g + 7] - t0),
                   static_cast<long long>(stamps[g + 4] - t0))
            << std::endl;
}

absl::Status BenchVariant(const std::string& model_dir, const BackendVariant& variant, bool quick,
                          std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateCudaBackend(variant.options));
  std::cout << "# " << variant.name << ": " << backend->Describe() << std::endl;
  whisper::WhisperModelOptions model_options;
  model_options.weight_dtype = DType::kF16;
  model_options.embedding_dtype = DType::kF16;
  model_options.fused_decoder_step = variant.engine_fused_step;
  model_options.stacked_cross_projection = variant.stacked_cross;
  // The persistent bench variants keep f32 caches (their f16 copies are RefreshCross()'s).
  model_options.half_cross_cache = variant.half_cross && !variant.persistent;
  model_options.absorbed_cross_attention = variant.absorbed_cross;
  model_options.quantized_cross_source = variant.quantized_cross;
  model_options.half_encoder_attention_output = variant.half_encoder_attention;
  ASSIGN_OR_RETURN(std::unique_ptr<whisper::WhisperModel> model,
                   whisper::WhisperModel::Load(model_dir, *backend, model_options));
  if (model->fused_step_max_batch() > 0) {
    std::cout << "# engine decoder step: the backend's prepared step up to "
              << model->fused_step_max_batch() << " rows, op by op above" << std::endl;
  }
  std::mt19937 rng(1234);

  std::unique_ptr<bench::FusedWhisperDecoder> fused;
  if (variant.fused) {
    ASSIGN_OR_RETURN(fused, bench::FusedWhisperDecoder::Load(model_dir, *backend));
  }
  std::unique_ptr<bench::PersistentWhisperDecoder> persistent;
  if (variant.persistent) {
    ASSIGN_OR_RETURN(persistent, bench::PersistentWhisperDecoder::Load(model_dir, *backend));
  }

  // ---- Encoder ----------------------------------------------------------------------------------
  for (int batch : g_encoder_batches) {
    if (variant.fused || variant.persistent) break;
    ASSIGN_OR_RETURN(std::unique_ptr<whisper::EncoderBuffers> buffers,
                     model->NewEncoderBuffers(batch));
    ASSIGN_OR_RETURN(std::unique_ptr<whisper::DecoderState> state, model->NewDecoderState(batch));
    const std::vector<float> mel =
        RandomVector(static_cast<size_t>(buffers->mel().numel()), rng, -1.5f, 1.5f);
    RETURN_IF_ERROR(backend->CopyFromHost(mel.data(), mel.size() * 4, buffers->mel()));
    // The pass alone (what PyTorch's anchor times as "encoder pass") and the pass with every
    // decoder layer's cross-attention K/V projected into the state (what a new window costs).
    for (whisper::DecoderState* into :
         {static_cast<whisper::DecoderState*>(nullptr), state.get()}) {
      std::unique_ptr<Graph> graph;
      std::function<absl::Status()> run = [&] { return model->EncodeOnDevice(*buffers, into); };
      if (variant.capture) {
        RETURN_IF_ERROR(backend->BeginCapture());
        RETURN_IF_ERROR(model->EncodeOnDevice(*buffers, into));
        ASSIGN_OR_RETURN(graph, backend->EndCapture());
        run = [&] { return graph->Replay(); };
      }
      Row row{into == nullptr ? "encoder pass (per window)" : "encoder + cross K/V (per window)",
              variant.name, batch, 0, 0};
      const int burst = quick ? 3 : std::max(2, 20 / batch);
      RETURN_IF_ERROR(
          Time(*backend, run, burst, quick ? 3 : 7, &row.per_item_us, &row.round_trip_us));
      row.per_item_us /= batch;
      row.round_trip_us /= batch;
      rows->push_back(row);
      std::cout << absl::StrFormat("%-32s %-34s B=%-4d %9.1f us  round trip %9.1f us", row.what,
                                   row.variant, batch, row.per_item_us, row.round_trip_us)
                << std::endl;
    }
  }

  // ---- Decoder step
  // -------------------------------------------------------------------------------
  std::vector<int> batches = variant.persistent ? std::vector<int>{1, 2, 4, 8} : g_decoder_batches;
  if (g_encoder_only) batches.clear();
  for (int batch : batches) {
    ASSIGN_OR_RETURN(std::unique_ptr<whisper::DecoderState> state, model->NewDecoderState(batch));
    {
      // Cross-attention K/V of B random windows.
      ASSIGN_OR_RETURN(std::unique_ptr<whisper::EncoderBuffers> buffers,
                       model->NewEncoderBuffers(batch));
      const std::vector<float> mel =
          RandomVector(static_cast<size_t>(buffers->mel().numel()), rng, -1.5f, 1.5f);
      RETURN_IF_ERROR(backend->CopyFromHost(mel.data(), mel.size() * 4, buffers->mel()));
      RETURN_IF_ERROR(model->EncodeOnDevice(*buffers, state.get()));
      RETURN_IF_ERROR(backend->Synchronize());
    }
    const int64_t b = batch;
    std::vector<int32_t> tokens(static_cast<size_t>(b)),
        positions(static_cast<size_t>(b), g_position),
        lengths(static_cast<size_t>(b), g_position + 1);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 50000);
    RETURN_IF_ERROR(backend->CopyFromHost(tokens.data(), tokens.size() * 4, state->step_tokens()));
    RETURN_IF_ERROR(
        backend->CopyFromHost(positions.data(), positions.size() * 4, state->positions()));
    RETURN_IF_ERROR(backend->CopyFromHost(lengths.data(), lengths.size() * 4, state->lengths()));
    std::unique_ptr<Graph> graph;
    std::function<absl::Status()> run = [&] { return model->DecodeStep(*state); };
    if (fused) {
      RETURN_IF_ERROR(fused->Prepare(*state));
      run = [&] { return fused->Step(*state); };
    }
    if (persistent) {
      RETURN_IF_ERROR(persistent->Prepare(*state, variant.persistent_options));
      RETURN_IF_ERROR(persistent->RefreshCross(*state));
      RETURN_IF_ERROR(backend->Synchronize());
      if (variant.persistent_options.tuning.cluster && !persistent->UsesClusterStep()) {
        std::cout << "note: " << variant.name << ", batch " << batch
                  << ": the cluster step does not run here; the cooperative kernel ran\n";
      }
      run = [&] { return persistent->Step(*state); };
    }
    if (variant.capture) {
      RETURN_IF_ERROR(backend->BeginCapture());
      RETURN_IF_ERROR(run());
      ASSIGN_OR_RETURN(graph, backend->EndCapture());
      run = [&] { return graph->Replay(); };
    }
    Row row{"decoder step", variant.name, batch, 0, 0};
    RETURN_IF_ERROR(
        Time(*backend, run, quick ? 10 : 100, quick ? 3 : 9, &row.per_item_us, &row.round_trip_us));
    rows->push_back(row);
    std::cout << absl::StrFormat("%-22s %-34s B=%-4d %9.1f us  round trip %9.1f us  %s", row.what,
                                 row.variant, batch, row.per_item_us, row.round_trip_us,
                                 graph ? absl::StrCat(graph->num_nodes(), " calls") : "")
              << std::endl;
    if (persistent && variant.persistent_options.tuning.profile_mode == cuda::kProfileTimeline) {
      ASSIGN_OR_RETURN(const std::vector<int64_t> stamps, persistent->ReadTimeline());
      PrintClusterTimeline(stamps, batch);
    }
    // The rows' prompts of t random tokens in one pass (WhisperModel::PrefillRows as the streaming
    // engine runs it: a graph replayed per padded length where the model uses graphs), logits at
    // each row's last token.
    for (int t : g_prefill_tokens) {
      if (fused || persistent) break;
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(b));
      for (std::vector<int32_t>& prompt : prompts) {
        for (int k = 0; k < t; ++k) prompt.push_back(static_cast<int32_t>(rng() % 50000));
      }
      const std::vector<int> read_at(static_cast<size_t>(b), t - 1);
      const std::function<absl::Status()> prefill = [&]() -> absl::Status {
        return model->PrefillRows(prompts, read_at, *state).status();
      };
      Row prefill_row{absl::StrCat("prefill, ", t, " tokens"), variant.name, batch, 0, 0};
      RETURN_IF_ERROR(Time(*backend, prefill, quick ? 3 : 10, quick ? 3 : 7,
                           &prefill_row.per_item_us, &prefill_row.round_trip_us));
      rows->push_back(prefill_row);
      std::cout << absl::StrFormat("%-22s %-34s B=%-4d %9.1f us  round trip %9.1f us",
                                   prefill_row.what, prefill_row.variant, batch,
                                   prefill_row.per_item_us, prefill_row.round_trip_us)
                << std::endl;
    }
  }
  return absl::OkStatus();
}

// Per-op cost inside a graph: `copies` back-to-back calls of one op captured once, the graph
// replayed; the time per call includes its share of launch gaps, as in the decoder step graph.
absl::Status ProfileOps(const CudaBackendOptions& options, const std::string& label,
                        std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateCudaBackend(options));
  std::mt19937 rng(99);
  auto random = [&](const Shape& shape, DType dtype, float lo, float hi) -> absl::StatusOr<Tensor> {
    const std::vector<float> v = RandomVector(static_cast<size_t>(shape.numel()), rng, lo, hi);
    if (dtype == DType::kF32) return Upload(*backend, shape, dtype, v.data());
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = FloatToHalf(v[i]);
    return Upload(*backend, shape, dtype, h.data());
  };
  auto ints = [&](const Shape& shape, int32_t value) -> absl::StatusOr<Tensor> {
    std::vector<int32_t> v(static_cast<size_t>(shape.numel()), value);
    return Upload(*backend, shape, DType::kI32, v.data());
  };
  constexpr int kCopies = 20;
  auto profile = [&](const std::string& what, int batch,
                     const std::function<absl::Status()>& op) -> absl::Status {
    RETURN_IF_ERROR(op());  // eager once (warms cuBLAS)
    RETURN_IF_ERROR(backend->BeginCapture());
    for (int i = 0; i < kCopies; ++i) RETURN_IF_ERROR(op());
    ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, backend->EndCapture());
    Row row{what, "op in graph (fast, PDL" + label + ")", batch, 0, 0};
    RETURN_IF_ERROR(Time(
        *backend, [&] { return graph->Replay(); }, 10, 5, &row.per_item_us, &row.round_trip_us));
    row.per_item_us /= kCopies;
    row.round_trip_us /= kCopies;
    rows->push_back(row);
    std::cout << absl::StrFormat("op %-40s B=%-5d %8.2f us%s", what, batch, row.per_item_us, label)
              << std::endl;
    return absl::OkStatus();
  };
  const int64_t d = 384;
  for (int b : {1, 64, 256}) {
    if (g_encoder_only) break;
    const int64_t B = b;
    ASSIGN_OR_RETURN(Tensor x, random({B, 1, d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor y, random({B, 1, d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor hidden, random({B, 4 * d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor logits, backend->Allocate({B, 51864}, DType::kF32));
    ASSIGN_OR_RETURN(Tensor gamma, random({d}, DType::kF32, 0.5, 1.5));
    ASSIGN_OR_RETURN(Tensor w_dd, random({d, d}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor w_ff1, random({4 * d, d}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor w_ff2, random({d, 4 * d}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor emb, random({51864, d}, DType::kF16, -0.5, 0.5));
    ASSIGN_OR_RETURN(Tensor pos_table, random({448, d}, DType::kF32, -0.5, 0.5));
    ASSIGN_OR_RETURN(Tensor bias, random({d}, DType::kF32, -0.1, 0.1));
    ASSIGN_OR_RETURN(Tensor bias_ff, random({4 * d}, DType::kF32, -0.1, 0.1));
    ASSIGN_OR_RETURN(Tensor self_cache, random({B, 448, d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor cross, random({B, 1500, d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor tokens, ints({B, 1}, 7));
    ASSIGN_OR_RETURN(Tensor positions, ints({B}, 64));
    ASSIGN_OR_RETURN(Tensor lengths, ints({B}, 65));
    ASSIGN_OR_RETURN(Tensor x2, x.Reshape({B, d}));
    ASSIGN_OR_RETURN(Tensor y2, y.Reshape({B, d}));
    RETURN_IF_ERROR(profile("Add of 4 floats (launch floor)", b, [&]() -> absl::Status {
      ASSIGN_OR_RETURN(Tensor t, x.Slice(0, 1));
      ASSIGN_OR_RETURN(t, t.Reshape({d}));
      ASSIGN_OR_RETURN(t, t.Slice(0, 4));
      return backend->Add(t, t, t);
    }));
    RETURN_IF_ERROR(profile("Embed [B,1,384]", b,
                            [&] { return backend->Embed(tokens, positions, emb, pos_table, x); }));
    RETURN_IF_ERROR(profile("LayerNorm [B,384]", b,
                            [&] { return backend->LayerNorm(x, gamma, bias, 1e-5f, y); }));
    RETURN_IF_ERROR(profile("Linear 384->384 f16", b, [&] {
      return backend->Linear(x2, w_dd, &bias, Activation::kNone, y2);
    }));
    RETURN_IF_ERROR(profile("Linear 384->1536 f16 gelu", b, [&] {
      return backend->Linear(x2, w_ff1, &bias_ff, Activation::kGelu, hidden);
    }));
    RETURN_IF_ERROR(profile("Linear 1536->384 f16", b, [&] {
      return backend->Linear(hidden, w_ff2, &bias, Activation::kNone, y2);
    }));
    RETURN_IF_ERROR(profile("Linear 384->51864 f16 (logits)", b, [&] {
      return backend->Linear(x2, emb, nullptr, Activation::kNone, logits);
    }));
    RETURN_IF_ERROR(profile("WriteRows into [B,448,384]", b,
                            [&] { return backend->WriteRows(x, positions, self_cache); }));
    RETURN_IF_ERROR(profile("Attention self (65 of 448 keys)", b, [&] {
      return backend->Attention(x, self_cache, self_cache, &lengths, 6, 0.125f, true, y);
    }));
    RETURN_IF_ERROR(profile("Attention cross (1500 keys)", b, [&] {
      return backend->Attention(x, cross, cross, nullptr, 6, 0.125f, false, y);
    }));
    RETURN_IF_ERROR(profile("Add [B,384]", b, [&] { return backend->Add(x, y, x); }));
    RETURN_IF_ERROR(
        profile("LogSoftmax [B,51864]", b, [&] { return backend->LogSoftmax(logits, logits); }));
  }
  // Encoder ops, one 30 s window.
  {
    ASSIGN_OR_RETURN(Tensor mel, random({1, 3000, 80}, DType::kF32, -1.5, 1.5));
    ASSIGN_OR_RETURN(Tensor c1, backend->Allocate({1, 3000, d}, DType::kF32));
    ASSIGN_OR_RETURN(Tensor x, random({1, 1500, d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor y, backend->Allocate({1, 1500, d}, DType::kF32));
    ASSIGN_OR_RETURN(Tensor k, random({1, 1500, d}, DType::kF32, -1, 1));
    ASSIGN_OR_RETURN(Tensor hidden, backend->Allocate({1500, 4 * d}, DType::kF32));
    ASSIGN_OR_RETURN(Tensor w1, random({d, 80, 3}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor w2, random({d, d, 3}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor w_dd, random({d, d}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor w_ff1, random({4 * d, d}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor w_ff2, random({d, 4 * d}, DType::kF16, -0.05, 0.05));
    ASSIGN_OR_RETURN(Tensor bias, random({d}, DType::kF32, -0.1, 0.1));
    ASSIGN_OR_RETURN(Tensor bias_ff, random({4 * d}, DType::kF32, -0.1, 0.1));
    ASSIGN_OR_RETURN(Tensor gamma, random({d}, DType::kF32, 0.5, 1.5));
    ASSIGN_OR_RETURN(Tensor x2, x.Reshape({1500, d}));
    ASSIGN_OR_RETURN(Tensor y2, y.Reshape({1500, d}));
    RETURN_IF_ERROR(profile("enc Conv1d 80->384 k3 (3000 frames)", 1, [&] {
      return backend->Conv1d(mel, w1, bias, 1, 1, Activation::kGelu, c1);
    }));
    RETURN_IF_ERROR(profile("enc Conv1d 384->384 k3 s2", 1, [&] {
      return backend->Conv1d(c1, w2, bias, 2, 1, Activation::kGelu, x);
    }));
    RETURN_IF_ERROR(profile("enc LayerNorm [1500,384]", 1,
                            [&] { return backend->LayerNorm(x, gamma, bias, 1e-5f, y); }));
    RETURN_IF_ERROR(profile("enc Linear 1500x384->384", 1, [&] {
      return backend->Linear(x2, w_dd, &bias, Activation::kNone, y2);
    }));
    RETURN_IF_ERROR(profile("enc Linear 1500x384->1536 gelu", 1, [&] {
      return backend->Linear(x2, w_ff1, &bias_ff, Activation::kGelu, hidden);
    }));
    RETURN_IF_ERROR(profile("enc Linear 1500x1536->384", 1, [&] {
      return backend->Linear(hidden, w_ff2, &bias, Activation::kNone, y2);
    }));
    RETURN_IF_ERROR(profile("enc Attention 1500x1500", 1, [&] {
      return backend->Attention(x, k, k, nullptr, 6, 0.125f, false, y);
    }));
    RETURN_IF_ERROR(profile("enc Add [1500,384]", 1, [&] { return backend->Add(x, y, x); }));
    RETURN_IF_ERROR(profile("enc LinearResidual 1500x1536->384", 1, [&] {
      return backend->LinearResidual(hidden, w_ff2, &bias, Activation::kNone, y2, y2);
    }));
    if (backend->supports(Op::kHalfActivations)) {  // the encoder's FFN with f16 activations
      ASSIGN_OR_RETURN(Tensor h16, backend->Allocate({1500, d}, DType::kF16));
      ASSIGN_OR_RETURN(Tensor hidden16, backend->Allocate({1500, 4 * d}, DType::kF16));
      RETURN_IF_ERROR(profile("enc LayerNorm [1500,384] -> f16", 1,
                              [&] { return backend->LayerNorm(x2, gamma, bias, 1e-5f, h16); }));
      RETURN_IF_ERROR(profile("enc Linear f16 1500x384->1536 gelu -> f16", 1, [&] {
        return backend->Linear(h16, w_ff1, &bias_ff, Activation::kGelu, hidden16);
      }));
      RETURN_IF_ERROR(profile("enc LinearResidual f16 1500x1536->384", 1, [&] {
        return backend->LinearResidual(hidden16, w_ff2, &bias, Activation::kNone, y2, y2);
      }));
      if (backend->supports(Op::kLinearPlanes)) {  // Q, K, V in one GEMM, f16 planes
        ASSIGN_OR_RETURN(Tensor w_qkv, random({3 * d, d}, DType::kF16, -0.05, 0.05));
        ASSIGN_OR_RETURN(Tensor b_qkv, random({3 * d}, DType::kF32, -0.1, 0.1));
        ASSIGN_OR_RETURN(Tensor qkv16, backend->Allocate({3, 1500, d}, DType::kF16));
        RETURN_IF_ERROR(profile("enc LinearPlanes f16 1500x384->3x384 -> f16", 1, [&] {
          const Tensor planes[] = {*qkv16.Slice(0, 1), *qkv16.Slice(1, 2), *qkv16.Slice(2, 3)};
          return backend->LinearPlanes(h16, w_qkv, &b_qkv, planes);
        }));
        ASSIGN_OR_RETURN(Tensor q16, qkv16.Slice(0, 1));
        ASSIGN_OR_RETURN(Tensor k16, qkv16.Slice(1, 2));
        RETURN_IF_ERROR(profile("enc Attention f16 q,k,v 1500x1500", 1, [&] {
          return backend->Attention(q16, k16, k16, nullptr, 6, 0.125f, false, y);
        }));
      }
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::string out_path, filter, only;
  std::vector<std::string> excludes;
  bool quick = false, ops = true, list = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
      filter = argv[++i];
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = std::string(";") + argv[++i] + ";";
    } else if (std::strcmp(argv[i], "--exclude") == 0 && i + 1 < argc) {
      excludes.push_back(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-ops") == 0) {
      ops = false;
    } else if (std::strcmp(argv[i], "--encoder-only") == 0) {
      g_encoder_only = true;
    } else if (std::strcmp(argv[i], "--list") == 0) {
      list = true;
    } else if (std::strcmp(argv[i], "--encoder-batches") == 0 && i + 1 < argc &&
               std::strcmp(argv[i + 1], "none") == 0) {
      g_encoder_batches.clear();
      ++i;
    } else if (std::strcmp(argv[i], "--encoder-batches") == 0 && i + 1 < argc &&
               !(g_encoder_batches = ParseList(argv[++i])).empty()) {
    } else if (std::strcmp(argv[i], "--decoder-batches") == 0 && i + 1 < argc &&
               !(g_decoder_batches = ParseList(argv[++i])).empty()) {
    } else if (std::strcmp(argv[i], "--prefill-tokens") == 0 && i + 1 < argc &&
               !(g_prefill_tokens = ParseList(argv[++i])).empty()) {
    } else if (std::strcmp(argv[i], "--position") == 0 && i + 1 < argc &&
               (g_position = std::atoi(argv[++i])) >= 0 && g_position < 448) {
    } else {
      std::cerr << "usage: whisper_gpu_bench [--out results.tsv] [--quick] [--filter SUBSTRING] "
                   "[--exclude SUBSTRING] [--only NAME;NAME] [--no-ops] [--list] "
                   "[--encoder-only] [--encoder-batches 1,16|none] "
                   "[--decoder-batches 1,8,64,256] [--prefill-tokens 4,16,64] "
                   "[--position 64]\n";
      return 2;
    }
  }
  std::vector<BackendVariant> variants = bench::BenchVariants();
  std::erase_if(variants, [&](const BackendVariant& v) {
    if (g_encoder_only && (v.fused || v.persistent || v.name.find("skinny") != std::string::npos)) {
      return true;
    }
    if (!only.empty() && only.find(";" + v.name + ";") == std::string::npos) return true;
    if (!filter.empty() && v.name.find(filter) == std::string::npos) return true;
    for (const std::string& e : excludes) {
      if (v.name.find(e) != std::string::npos) return true;
    }
    return false;
  });

  if (list) {
    for (const BackendVariant& v : variants) std::cout << v.name << "\n";
    return 0;
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "waav-gpu-bench";
  if (!waav::testing::WriteRandomWhisperModel(dir.string(), 42)) {
    std::cerr << "cannot write the random model into " << dir << "\n";
    return 1;
  }

  std::vector<Row> rows;
  if (ops) {
    CudaBackendOptions o;  // fast, CUDA graphs, PDL
    absl::Status status = ProfileOps(o, "", &rows);
    if (status.ok() && g_encoder_only) {
      CudaBackendOptions first = o;
      first.use_flash_v2 = false;
      first.use_half_gemm = false;
      first.linear_residual = false;
      first.half_activations = false;
      status = ProfileOps(first, ", first kernels", &rows);
      CudaBackendOptions half = o;
      half.use_half_gemm = true;
      half.half_gemm_max_k = half.half_gemm_max_n = 0;
      half.half_gemm_conv = true;
      if (status.ok()) status = ProfileOps(half, ", HalfGemm", &rows);
    }
    if (!status.ok()) {
      std::cerr << "op profile: " << status << "\n";
      return 1;
    }
  }
  for (const BackendVariant& v : variants) {
    const absl::Status status = BenchVariant(dir.string(), v, quick, &rows);
    if (!status.ok()) {
      std::cerr << v.name << ": " << status << "\n";
      return 1;
    }
  }
  std::filesystem::remove_all(dir);
  if (!out_path.empty()) {
    std::ofstream out(out_path);
    out << "what\tvariant\tbatch\tper_item_us\tround_trip_us\n";
    for (const Row& r : rows) {
      out << r.what << "\t" << r.variant << "\t" << r.batch << "\t" << r.per_item_us << "\t"
          << r.round_trip_us << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace waav

int main(int argc, char** argv) { return waav::Main(argc, argv); }

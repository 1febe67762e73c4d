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
  // WhisperModelOptions::half_encoder_attention_output (false: f32, the rows before it).
  bool half_encoder_attention = true;
};

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
  // The default: block attention, split barriers, fused FFN and fused self-attention +
  // out-proj. The variants below change one knob each ("no fusions": the configuration that
  // the knobs after it were first measured on, bench/gpu/persistent_notes.md).
  auto no_fusions = [](bench::PersistentStepOptions& o) {
    o.tuning.fuse_ffn = false;
    o.tuning.fuse_self_out = false;
  };
  add_persistent("f16 cross, CUDA graph", true, [](auto&) {});
  add_persistent("f16 cross, direct launch", false, [](auto&) {});
  add_persistent("f32 cross, CUDA graph", true, [](auto& o) { o.f16_cross = false; });
  add_persistent("f16 cross, no fusions", true, no_fusions);
  add_persistent("f16 cross, fused FFN only", true,
                 [](auto& o) { o.tuning.fuse_self_out = false; });
  add_persistent("f16 cross, fused self-attention + out-proj only", true,
                 [](auto& o) { o.tuning.fuse_ffn = false; });
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

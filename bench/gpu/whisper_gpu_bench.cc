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
// Decoder steps run at position 64 (65 keys in the self-attention cache of 448) against a cross
// cache of 1500 encoder positions, with f16 weights and f32 activations and caches.
//
// Usage: whisper_gpu_bench [--out results.tsv] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
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
#include "engine/models/whisper/whisper_model.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/support/random_whisper.h"

namespace waav {
namespace {

using Clock = std::chrono::steady_clock;

struct BackendVariant {
  std::string name;
  CudaBackendOptions options;
  bool capture;  // replay a captured graph; false: issue the kernels each time
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

absl::Status BenchVariant(const std::string& model_dir, const BackendVariant& variant, bool quick,
                          std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateCudaBackend(variant.options));
  std::cout << "# " << variant.name << ": " << backend->Describe() << std::endl;
  whisper::WhisperModelOptions model_options;
  model_options.weight_dtype = DType::kF16;
  model_options.embedding_dtype = DType::kF16;
  ASSIGN_OR_RETURN(std::unique_ptr<whisper::WhisperModel> model,
                   whisper::WhisperModel::Load(model_dir, *backend, model_options));
  std::mt19937 rng(1234);

  // ---- Encoder ----------------------------------------------------------------------------------
  for (int batch : {1, 16}) {
    ASSIGN_OR_RETURN(std::unique_ptr<whisper::EncoderBuffers> buffers,
                     model->NewEncoderBuffers(batch));
    ASSIGN_OR_RETURN(std::unique_ptr<whisper::DecoderState> state, model->NewDecoderState(batch));
    const std::vector<float> mel = RandomVector(
        static_cast<size_t>(buffers->mel().numel()), rng, -1.5f, 1.5f);
    RETURN_IF_ERROR(backend->CopyFromHost(mel.data(), mel.size() * 4, buffers->mel()));
    std::unique_ptr<Graph> graph;
    std::function<absl::Status()> run = [&] { return model->EncodeOnDevice(*buffers, state.get()); };
    if (variant.capture) {
      RETURN_IF_ERROR(backend->BeginCapture());
      RETURN_IF_ERROR(model->EncodeOnDevice(*buffers, state.get()));
      ASSIGN_OR_RETURN(graph, backend->EndCapture());
      run = [&] { return graph->Replay(); };
    }
    Row row{"encoder (per window)", variant.name, batch, 0, 0};
    const int burst = quick ? 3 : (batch == 1 ? 20 : 4);
    RETURN_IF_ERROR(Time(*backend, run, burst, quick ? 3 : 7, &row.per_item_us,
                         &row.round_trip_us));
    row.per_item_us /= batch;
    row.round_trip_us /= batch;
    rows->push_back(row);
    std::cout << absl::StrFormat("%-22s %-34s B=%-4d %9.1f us  round trip %9.1f us", row.what,
                                 row.variant, batch, row.per_item_us, row.round_trip_us)
              << std::endl;
  }

  // ---- Decoder step -------------------------------------------------------------------------------
  for (int batch : {1, 8, 64, 256}) {
    ASSIGN_OR_RETURN(std::unique_ptr<whisper::DecoderState> state, model->NewDecoderState(batch));
    {
      // Cross-attention K/V of B random windows.
      ASSIGN_OR_RETURN(std::unique_ptr<whisper::EncoderBuffers> buffers,
                       model->NewEncoderBuffers(batch));
      const std::vector<float> mel = RandomVector(
          static_cast<size_t>(buffers->mel().numel()), rng, -1.5f, 1.5f);
      RETURN_IF_ERROR(backend->CopyFromHost(mel.data(), mel.size() * 4, buffers->mel()));
      RETURN_IF_ERROR(model->EncodeOnDevice(*buffers, state.get()));
      RETURN_IF_ERROR(backend->Synchronize());
    }
    const int64_t b = batch;
    std::vector<int32_t> tokens(static_cast<size_t>(b)), positions(static_cast<size_t>(b), 64),
        lengths(static_cast<size_t>(b), 65);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 50000);
    RETURN_IF_ERROR(backend->CopyFromHost(tokens.data(), tokens.size() * 4, state->step_tokens()));
    RETURN_IF_ERROR(backend->CopyFromHost(positions.data(), positions.size() * 4,
                                          state->positions()));
    RETURN_IF_ERROR(backend->CopyFromHost(lengths.data(), lengths.size() * 4, state->lengths()));
    std::unique_ptr<Graph> graph;
    std::function<absl::Status()> run = [&] { return model->DecodeStep(*state); };
    if (variant.capture) {
      RETURN_IF_ERROR(backend->BeginCapture());
      RETURN_IF_ERROR(model->DecodeStep(*state));
      ASSIGN_OR_RETURN(graph, backend->EndCapture());
      run = [&] { return graph->Replay(); };
    }
    Row row{"decoder step", variant.name, batch, 0, 0};
    RETURN_IF_ERROR(Time(*backend, run, quick ? 10 : 100, quick ? 3 : 9, &row.per_item_us,
                         &row.round_trip_us));
    rows->push_back(row);
    std::cout << absl::StrFormat("%-22s %-34s B=%-4d %9.1f us  round trip %9.1f us  %s",
                                 row.what, row.variant, batch, row.per_item_us, row.round_trip_us,
                                 graph ? absl::StrCat(graph->num_nodes(), " calls") : "")
              << std::endl;
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  std::string out_path;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::cerr << "usage: whisper_gpu_bench [--out results.tsv] [--quick]\n";
      return 2;
    }
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "waav-gpu-bench";
  if (!waav::testing::WriteRandomWhisperModel(dir.string(), 42)) {
    std::cerr << "cannot write the random model into " << dir << "\n";
    return 1;
  }

  std::vector<BackendVariant> variants;
  auto add = [&](const std::string& name, CudaMath math, bool graphs, bool pdl, bool capture) {
    CudaBackendOptions o;
    o.math = math;
    o.use_graphs = graphs;
    o.use_pdl = pdl;
    variants.push_back({name, o, capture});
  };
  add("fast, eager launches", CudaMath::kFast, true, false, false);
  add("fast, CUDA graph", CudaMath::kFast, true, false, true);
  add("fast, CUDA graph + PDL", CudaMath::kFast, true, true, true);
  add("accurate, CUDA graph + PDL", CudaMath::kAccurate, true, true, true);

  std::vector<Row> rows;
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

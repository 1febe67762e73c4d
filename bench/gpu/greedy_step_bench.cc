// What a greedy token costs in the engine's own decoding loop on the GPU, host included:
// DecodeGreedyBatch (engine/models/whisper/greedy_decoder.h) over a DecoderStatePool on the CUDA
// backend, as waavd runs it (text prompts, the greedy choice on the device), with Whisper tiny.en's
// shapes and random weights. Beside it, the same state's step alone (RunDecodeStep replayed and
// waited for), so the loop's host share shows: the step's inputs going up, the choice coming
// down, the rules on the host.
//
// Method: every row's window is encoded from a random log-mel; the prompt is
// <|startoftranscript|> <|notimestamps|> (what UtteranceDecoder feeds) and <|endoftext|> is
// suppressed, so each row decodes to the length limit (224 tokens with max_length 448). One
// warm-up call (graphs captured), then --reps calls; per call the host wall clock of the whole
// call and GreedyBatchTimings' step and sample times, each divided by the call's token steps
// (those whose choices were read: a pipelined call also runs steps ahead that may end up
// unread; the "ahead" column counts the steps submitted ahead / unread); medians over the calls,
// with the smallest and largest. --pipeline sets GreedyOptions::pipeline (default auto: on,
// on a GPU). Then the loop's step taken apart, --reps × 50
// times each on the bucket's state, each waited for: the replay alone (RunDecodeStep), with the
// inputs uploaded first (DecodeStepAsync), and with the device's choice downloaded after it;
// and the pipelined step's parts back to back (bursts of 100 steps, one wait): the replay,
// with ArgmaxLogSumExp, with FeedChoices, with CopyToHostAsync; then the step with the choice
// as the loop runs it (WhisperModel::RunDecodeStepAndChoose, in the step's own launches where
// the prepared step chooses) with CopyToHostAsync (its positions advance from 8 over a burst,
// where the parts before hold them at 8).
//
// Usage: greedy_step_bench --tokenizer PATH/tokenizer.json [--rows 1,2,4,8] [--reps 9]
//                          [--pipeline never|auto|always] [--argmax-blocks 8|16|0]
//                          [--step-choice never|auto|always] [--out results.tsv]
// --argmax-blocks: CudaBackendOptions::argmax_cluster_blocks (0: one block a row).
// --step-choice: WhisperModelOptions::step_choice (always: the choice in the prepared step's
// launches wherever it offers that; auto, the default: there up to kStepChoiceAutoRows rows;
// never: the choice's ops after the step).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/support/random_whisper.h"

namespace waav {
namespace {

using Clock = std::chrono::steady_clock;
using whisper::GraphUse;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

struct Spread {
  double median = 0, low = 0, high = 0;
};

Spread Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return {};
  return {v[v.size() / 2], v.front(), v.back()};
}

std::optional<GraphUse> ParseGraphUse(std::string_view text) {
  if (text == "never") return GraphUse::kNever;
  if (text == "auto") return GraphUse::kAuto;
  if (text == "always") return GraphUse::kAlways;
  return std::nullopt;
}

const char* GraphUseName(GraphUse use) {
  return use == GraphUse::kNever ? "never" : (use == GraphUse::kAuto ? "auto" : "always");
}

std::vector<int> ParseList(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < 1 || v > 256) return {};
    out.push_back(static_cast<int>(v));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

struct Result {
  int rows = 0, steps = 0, device_steps = 0, pipelined_steps = 0, unread_steps = 0;
  bool choice_in_step = false;  // WhisperModel::ChoosesInStep on the bucket's state
  Spread loop_us, step_us, sample_us;
  // The loop's step taken apart on the bucket's state: the replay alone; with the step's inputs
  // uploaded first (WhisperModel::DecodeStepAsync); and with the device's choice after it as the
  // loop makes it (mask indices up, ArgmaxLogSumExp, five floats a row down). Each waited for.
  Spread replay_us, inputs_us, choice_us;
  // Back to back, µs a step: the replay; with ArgmaxLogSumExp; with FeedChoices; with the
  // choices' download (CopyToHostAsync): the pipelined loop's step on the GPU, made of ops;
  // then RunDecodeStepAndChoose with the download, as the loop runs it.
  Spread burst_us[5];
};

absl::StatusOr<Result> Measure(const whisper::Transcriber& transcriber,
                               whisper::DecoderStatePool& pool, int rows, int reps,
                               GraphUse pipeline) {
  const whisper::WhisperModel& model = transcriber.model();
  const whisper::Vocabulary& vocabulary = transcriber.vocabulary();
  const whisper::SpecialTokens& special = vocabulary.special();
  std::vector<int> prompt = vocabulary.SotSequence();
  prompt.push_back(special.no_timestamps);
  const std::vector<std::vector<int>> prompts(static_cast<size_t>(rows), prompt);
  whisper::GreedyOptions options;
  options.suppress_tokens = vocabulary.SuppressedTokens();
  options.suppress_tokens.push_back(special.eot);  // every row runs to the length limit
  options.pipeline = pipeline;

  Result result;
  result.rows = rows;
  std::vector<double> loop, step, sample;
  for (int r = 0; r <= reps; ++r) {  // call 0 warms up (captures the graphs)
    whisper::GreedyBatchTimings timings;
    const Clock::time_point start = Clock::now();
    ASSIGN_OR_RETURN(
        const std::vector<whisper::GreedyResult> decoded,
        whisper::DecodeGreedyBatch(model, vocabulary, prompts, options, pool, nullptr, &timings));
    const double wall = MicrosSince(start);
    if (timings.steps < 1 || decoded.size() != static_cast<size_t>(rows)) {
      return absl::InternalError("the greedy batch took no steps");
    }
    if (r == 0) continue;
    // Per token step: the steps whose choices were read (a pipelined call also runs steps
    // ahead that end up unread).
    const double steps = timings.steps - timings.unread_steps;
    loop.push_back(wall / steps);
    step.push_back(timings.step_ms * 1e3 / steps);
    sample.push_back(timings.sample_ms * 1e3 / steps);
    result.steps = timings.steps;
    result.device_steps = timings.device_steps;
    result.pipelined_steps = timings.pipelined_steps;
    result.unread_steps = timings.unread_steps;
  }
  result.loop_us = Summarize(loop);
  result.step_us = Summarize(step);
  result.sample_us = Summarize(sample);

  whisper::DecoderState& state = pool.ForRows(rows);
  const int batch = state.batch_size();
  result.choice_in_step = model.ChoosesInStep(state);
  Backend& backend = model.backend();
  const std::vector<int32_t> bits = whisper::LogitRules(vocabulary, options).FixedMaskBits();
  const int64_t words = static_cast<int64_t>(bits.size()) / whisper::LogitRules::kNumFixedMasks;
  ASSIGN_OR_RETURN(const Tensor masks,
                   backend.Allocate({whisper::LogitRules::kNumFixedMasks, words}, DType::kI32));
  RETURN_IF_ERROR(backend.CopyFromHost(bits.data(), bits.size() * 4, masks));
  // Over the bucket (RunDecodeStepAndChoose's shapes); the ops take rows [0, rows).
  ASSIGN_OR_RETURN(const Tensor bucket_index, backend.Allocate({batch}, DType::kI32));
  ASSIGN_OR_RETURN(const Tensor bucket_chosen, backend.Allocate({batch, 5}, DType::kF32));
  ASSIGN_OR_RETURN(const Tensor index, bucket_index.Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor chosen, bucket_chosen.Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor logits, state.step_logits().Slice(0, rows));
  const std::vector<int32_t> tokens(static_cast<size_t>(batch), special.eot);
  const std::vector<int32_t> positions(static_cast<size_t>(batch), 8);
  std::vector<int32_t> mask_index(static_cast<size_t>(batch), -1);
  std::fill(mask_index.begin(), mask_index.begin() + rows, whisper::LogitRules::kText);
  std::vector<float> host_chosen(static_cast<size_t>(rows) * 5);
  std::vector<double> replays, inputs, choices;
  for (int i = 0; i < reps * 50; ++i) {
    Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(model.RunDecodeStep(state));
    RETURN_IF_ERROR(backend.Synchronize());
    replays.push_back(MicrosSince(start));
    start = Clock::now();
    RETURN_IF_ERROR(model.DecodeStepAsync(tokens, positions, state));
    RETURN_IF_ERROR(backend.Synchronize());
    inputs.push_back(MicrosSince(start));
    start = Clock::now();
    RETURN_IF_ERROR(model.DecodeStepAsync(tokens, positions, state));
    RETURN_IF_ERROR(backend.CopyFromHost(mask_index.data(), mask_index.size() * 4, bucket_index));
    RETURN_IF_ERROR(backend.ArgmaxLogSumExp(logits, masks, index, chosen));
    RETURN_IF_ERROR(backend.CopyToHost(chosen, host_chosen.data(), chosen.size_bytes()));
    choices.push_back(MicrosSince(start));
  }
  result.replay_us = Summarize(replays);
  result.inputs_us = Summarize(inputs);
  result.choice_us = Summarize(choices);

  // The pipelined step's parts back to back (kBurst steps queued, then one wait; the position
  // held at 8 by FeedChoices' max_position): what each adds to the GPU's time a step.
  constexpr int kBurst = 100;
  ASSIGN_OR_RETURN(const HostBuffer host, backend.AllocateHost(chosen.size_bytes()));
  ASSIGN_OR_RETURN(const Tensor step_tokens, state.step_tokens().Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor step_positions, state.positions().Slice(0, rows));
  ASSIGN_OR_RETURN(const Tensor step_lengths, state.lengths().Slice(0, rows));
  RETURN_IF_ERROR(model.DecodeStepAsync(tokens, positions, state));
  RETURN_IF_ERROR(backend.CopyFromHost(mask_index.data(), mask_index.size() * 4, bucket_index));
  for (int parts = 0; parts < 5; ++parts) {
    std::vector<double> per_step;
    for (int r = 0; r < reps + 1; ++r) {
      RETURN_IF_ERROR(backend.Synchronize());
      const Clock::time_point start = Clock::now();
      if (parts == 4) RETURN_IF_ERROR(model.DecodeStepAsync(tokens, positions, state));
      for (int i = 0; i < kBurst && parts == 4; ++i) {
        RETURN_IF_ERROR(model.RunDecodeStepAndChoose(state, {masks, bucket_index, bucket_chosen}));
        RETURN_IF_ERROR(backend.CopyToHostAsync(chosen, host).status());
      }
      for (int i = 0; i < kBurst && parts < 4; ++i) {
        RETURN_IF_ERROR(model.RunDecodeStep(state));
        if (parts >= 1) RETURN_IF_ERROR(backend.ArgmaxLogSumExp(logits, masks, index, chosen));
        if (parts >= 2) {
          RETURN_IF_ERROR(
              backend.FeedChoices(chosen, index, 8, step_tokens, step_positions, step_lengths));
        }
        if (parts >= 3) RETURN_IF_ERROR(backend.CopyToHostAsync(chosen, host).status());
      }
      RETURN_IF_ERROR(backend.Synchronize());
      if (r > 0) per_step.push_back(MicrosSince(start) / kBurst);  // r = 0 warms up
    }
    result.burst_us[parts] = Summarize(per_step);
  }
  return result;
}

int Run(int argc, char** argv) {
  std::string tokenizer, out;
  std::vector<int> row_counts = {1, 2, 4, 8};
  int reps = 9;
  GraphUse pipeline = GraphUse::kAuto;
  int argmax_blocks = CudaBackendOptions{}.argmax_cluster_blocks;
  GraphUse step_choice = GraphUse::kAuto;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--tokenizer" && has_value) {
      tokenizer = argv[++i];
    } else if (arg == "--rows" && has_value) {
      row_counts = ParseList(argv[++i]);
    } else if (arg == "--reps" && has_value) {
      reps = std::atoi(argv[++i]);
    } else if ((arg == "--pipeline" || arg == "--step-choice") && has_value) {
      const std::optional<GraphUse> use = ParseGraphUse(argv[++i]);
      if (!use.has_value()) {
        std::cerr << "greedy_step_bench: " << arg << " takes never, auto or always\n";
        return 2;
      }
      (arg == "--pipeline" ? pipeline : step_choice) = *use;
    } else if (arg == "--argmax-blocks" && has_value) {
      argmax_blocks = std::atoi(argv[++i]);
    } else if (arg == "--out" && has_value) {
      out = argv[++i];
    } else {
      std::cerr << "usage: greedy_step_bench --tokenizer PATH/tokenizer.json [--rows 1,2,4,8] "
                   "[--reps 9] [--pipeline never|auto|always] [--argmax-blocks 8] "
                   "[--step-choice never|auto|always] [--out results.tsv]\n";
      return 2;
    }
  }
  if (tokenizer.empty() || row_counts.empty() || reps < 1) {
    std::cerr << "greedy_step_bench: --tokenizer is required; --rows takes 1-256, --reps >= 1\n";
    return 2;
  }
  const std::string dir = testing::TempModelDir("greedy_step_bench", 7);
  if (!testing::WriteRandomWhisperModel(dir, 7)) {
    std::cerr << "greedy_step_bench: cannot write a model into " << dir << "\n";
    return 1;
  }
  std::error_code error;
  std::filesystem::copy_file(tokenizer, dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing, error);
  if (error) {
    std::cerr << "greedy_step_bench: cannot copy " << tokenizer << ": " << error.message() << "\n";
    return 1;
  }
  CudaBackendOptions backend_options;
  backend_options.argmax_cluster_blocks = argmax_blocks;
  auto backend = CreateCudaBackend(backend_options);
  if (!backend.ok()) {
    std::cerr << "greedy_step_bench: " << backend.status() << "\n";
    return 1;
  }
  auto transcriber = whisper::Transcriber::Load(dir, **backend, {.step_choice = step_choice});
  if (!transcriber.ok()) {
    std::cerr << "greedy_step_bench: " << transcriber.status() << "\n";
    return 1;
  }
  const whisper::WhisperModel& model = (*transcriber)->model();
  const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
  auto pool = whisper::DecoderStatePool::Create(model, max_rows);
  if (!pool.ok()) {
    std::cerr << "greedy_step_bench: " << pool.status() << "\n";
    return 1;
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mel_value(-1.0f, 1.0f);
  std::vector<float> mel(static_cast<size_t>(model.dims().n_mels) * model.dims().n_frames());
  for (int b = 0; b < max_rows; ++b) {
    for (float& v : mel) v = mel_value(rng);
    const absl::Status encoded = model.Encode(mel, (*pool)->Row(b));
    if (!encoded.ok()) {
      std::cerr << "greedy_step_bench: " << encoded << "\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat(
      "# greedy_step_bench: DecodeGreedyBatch on %s, tiny.en shapes, random weights, fused "
      "step up to %d rows, pipeline %s, argmax clusters of %d, choice in the step %s; %d calls a "
      "row count (median [min-max], us per token step)\n",
      (*backend)->name(), model.fused_step_max_batch(), GraphUseName(pipeline), argmax_blocks,
      GraphUseName(step_choice), reps);
  std::cout << absl::StrFormat("%-5s %6s %8s %24s %24s %22s | %22s %22s %22s\n", "rows", "steps",
                               "device", "loop (wall / steps)", "step (up, run, down)",
                               "sample (host rules)", "replay + sync", "inputs up + replay",
                               "+ choice down");
  std::string tsv =
      "rows\tsteps\tpipelined_steps\tloop_us\tloop_min\tloop_max\tstep_us\tsample_us"
      "\treplay_us\tinputs_us\tchoice_us\n";
  std::vector<Result> results;
  for (int rows : row_counts) {
    auto result = Measure(**transcriber, **pool, rows, reps, pipeline);
    if (!result.ok()) {
      std::cerr << "greedy_step_bench: " << rows << " rows: " << result.status() << "\n";
      return 1;
    }
    const Result& r = *result;
    results.push_back(r);
    auto cell = [](const Spread& s) {
      return absl::StrFormat("%.1f [%.1f-%.1f]", s.median, s.low, s.high);
    };
    std::cout << absl::StrFormat("%-5d %6d %8s %24s %24s %22s | %22s %22s %22s\n", r.rows, r.steps,
                                 absl::StrCat(r.pipelined_steps, "/", r.unread_steps),
                                 cell(r.loop_us), cell(r.step_us), cell(r.sample_us),
                                 cell(r.replay_us), cell(r.inputs_us), cell(r.choice_us));
    tsv += absl::StrFormat("%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", r.rows,
                           r.steps, r.pipelined_steps, r.loop_us.median, r.loop_us.low,
                           r.loop_us.high, r.step_us.median, r.sample_us.median, r.replay_us.median,
                           r.inputs_us.median, r.choice_us.median);
  }
  std::cout << "# back to back (" << reps
            << " bursts of 100 steps, us a step): the replay, + ArgmaxLogSumExp, + FeedChoices, "
               "+ CopyToHostAsync | the step with its choice (RunDecodeStepAndChoose) + "
               "CopyToHostAsync, choice in the step\n";
  for (const Result& r : results) {
    std::cout << absl::StrFormat("%-5d %10.1f %10.1f %10.1f %10.1f | %10.1f %s\n", r.rows,
                                 r.burst_us[0].median, r.burst_us[1].median, r.burst_us[2].median,
                                 r.burst_us[3].median, r.burst_us[4].median,
                                 r.choice_in_step ? "yes" : "no");
  }
  if (!out.empty()) std::ofstream(out) << tsv;
  return 0;
}

}  // namespace
}  // namespace waav

int main(int argc, char** argv) { return waav::Run(argc, argv); }

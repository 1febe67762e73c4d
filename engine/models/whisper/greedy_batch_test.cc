// Batched greedy decoding (DecodeGreedyBatch over a DecoderStatePool) against decoding each
// window alone (DecodeGreedy on a batch-1 state), with real tiny.en weights on real speech:
// windows of different lengths, prompts of different lengths and kinds (timestamps, text only,
// earlier text, a forced prefix), rows finishing at different steps.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "engine/frontend/log_mel.h"
#include "engine/models/whisper/decoder_pool.h"
#include "engine/models/whisper/greedy_decoder.h"
#include "engine/models/whisper/transcriber.h"
#include "engine/runtime/backend_registry.h"
#include "gtest/gtest.h"
#include "tests/support/deferred_copy_backend.h"
#include "tests/support/speech_clips.h"
#include "tests/support/test_env.h"

namespace waav::whisper {
namespace {

class GreedyBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto model = waav::testing::TinyEnModelDir();
    if (!model) GTEST_SKIP() << "models/whisper-tiny.en absent: run scripts/setup";
    auto clips = waav::testing::LoadSpeechClips(
        {"jfk.wav", "ljspeech/LJ001-0001.wav", "ljspeech/LJ001-0002.wav", "ljspeech/LJ001-0008.wav",
         "ljspeech/LJ001-0015.wav", "ljspeech/LJ001-0026.wav"});
    if (absl::IsNotFound(clips.status())) GTEST_SKIP() << clips.status().message();
    ASSERT_TRUE(clips.ok()) << clips.status();
    clips_ = std::move(*clips);
    auto backend = CreateBackend("cpu", {});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    auto transcriber = Transcriber::Load(*model, *backend_);
    ASSERT_TRUE(transcriber.ok()) << transcriber.status();
    transcriber_ = std::move(*transcriber);
  }

  const WhisperModel& model() const { return transcriber_->model(); }
  const Vocabulary& vocabulary() const { return transcriber_->vocabulary(); }

  // One zero-padded window of `samples` ([n_mels, n_frames]), as the streaming engine builds it.
  std::vector<float> Window(const std::vector<float>& samples) const {
    return waav::testing::MelWindow(log_mel_, samples, model().dims().n_frames());
  }

  // Prompts of every kind the decoders support, of different lengths.
  std::vector<std::vector<int>> Prompts() const {
    const SpecialTokens& s = vocabulary().special();
    const std::vector<int> sot = vocabulary().SotSequence();
    auto concat = [](std::vector<int> a, const std::vector<int>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    const std::vector<int> text_only = concat(sot, {s.no_timestamps});
    std::vector<int> earlier = {s.sot_prev};
    earlier =
        concat(earlier,
               vocabulary().tokenizer().Encode(" The printing press changed how books were made."));
    return {
        sot,                                                               // with timestamps
        text_only,                                                         // text only
        concat(concat(earlier, sot), {s.no_timestamps}),                   // earlier text
        concat(text_only, vocabulary().tokenizer().Encode(" Printing,")),  // forced prefix
        concat(concat({s.sot_prev}, vocabulary().tokenizer().Encode(" Hello.")), sot),
        text_only,
    };
  }

  GreedyResult DecodeAlone(const std::vector<float>& window, const std::vector<int>& prompt,
                           const GreedyOptions& options = {}) {
    auto state = model().NewDecoderState(1);
    EXPECT_TRUE(state.ok()) << state.status();
    EXPECT_TRUE(model().Encode(window, **state).ok());
    auto result = DecodeGreedy(model(), vocabulary(), prompt, options, **state);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : GreedyResult{};
  }

  // Encodes windows[order[b]] into slot b and decodes them with prompts[order[b]] as one batch.
  std::vector<GreedyResult> DecodeBatched(DecoderStatePool& pool,
                                          const std::vector<std::vector<float>>& windows,
                                          const std::vector<std::vector<int>>& prompts,
                                          const std::vector<int>& order,
                                          const GreedyOptions& options = {},
                                          GreedyBatchTimings* timings = nullptr) {
    auto encoder = model().NewEncoderBuffers(1);
    EXPECT_TRUE(encoder.ok()) << encoder.status();
    std::vector<std::vector<int>> batch_prompts;
    for (size_t b = 0; b < order.size(); ++b) {
      const size_t i = static_cast<size_t>(order[b]);
      EXPECT_TRUE(model().WriteMel(windows[i], 0, **encoder).ok());
      EXPECT_TRUE(model().EncodeOnDevice(**encoder, &pool.Row(static_cast<int>(b))).ok());
      batch_prompts.push_back(prompts[i]);
    }
    auto results =
        DecodeGreedyBatch(model(), vocabulary(), batch_prompts, options, pool, nullptr, timings);
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() ? *results : std::vector<GreedyResult>{};
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Transcriber> transcriber_;
  frontend::LogMel log_mel_;
  std::vector<std::vector<float>> clips_;
};

void ExpectSame(const GreedyResult& batched, const GreedyResult& alone, const std::string& what) {
  EXPECT_EQ(batched.tokens, alone.tokens) << what;
  // The kernels treat rows independently, so not only the tokens but every log-probability is
  // bit for bit the same.
  EXPECT_EQ(batched.token_logprobs, alone.token_logprobs) << what;
  EXPECT_EQ(batched.sum_logprob, alone.sum_logprob) << what;
  EXPECT_EQ(batched.no_speech_prob, alone.no_speech_prob) << what;
  EXPECT_EQ(batched.steps, alone.steps) << what;
}

TEST_F(GreedyBatchTest, EveryRowDecodesAsItDoesAlone) {
  std::vector<std::vector<float>> windows;
  for (const auto& clip : clips_) windows.push_back(Window(clip));
  const std::vector<std::vector<int>> prompts = Prompts();
  ASSERT_EQ(windows.size(), prompts.size());
  std::vector<GreedyResult> alone;
  for (size_t i = 0; i < windows.size(); ++i) alone.push_back(DecodeAlone(windows[i], prompts[i]));
  int min_steps = 1 << 30, max_steps = 0;
  for (const GreedyResult& r : alone) {
    min_steps = std::min(min_steps, r.steps);
    max_steps = std::max(max_steps, r.steps);
  }
  std::cout << "rows alone: " << min_steps << " to " << max_steps << " steps\n";
  ASSERT_LT(min_steps, max_steps) << "the rows should finish at different steps";

  // 6 windows in a pool of 8 slots (bucket 8: two idle rows); then the pool reused for the same
  // windows in a fresh random order and for a subset of 3 (bucket 4), so that slots hold windows
  // and caches of earlier batches.
  auto pool = DecoderStatePool::Create(model(), 8);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<int> order(windows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::vector<int> shuffled = order;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  const std::vector<int> subset(shuffled.begin(), shuffled.begin() + 3);
  for (const std::vector<int>& o : {order, shuffled, subset}) {
    const std::vector<GreedyResult> batched = DecodeBatched(**pool, windows, prompts, o);
    ASSERT_EQ(batched.size(), o.size());
    for (size_t b = 0; b < o.size(); ++b) {
      ExpectSame(batched[b], alone[static_cast<size_t>(o[b])],
                 "window " + std::to_string(o[b]) + " in slot " + std::to_string(b) + " of " +
                     std::to_string(o.size()) + " (shuffle seed " + std::to_string(seed) + ")");
    }
  }
}

// The greedy choice through Backend::ArgmaxLogSumExp (its CPU version sums in the host loop's
// order) gives every row's result bit for bit; the batched prompt prefill (one pass over the
// rows, padded) gives the same tokens, its values differing only by rounding.
TEST_F(GreedyBatchTest, DeviceChoiceAndBatchedPrefillMatchTheHostPath) {
  std::vector<std::vector<float>> windows;
  for (const auto& clip : clips_) windows.push_back(Window(clip));
  const std::vector<std::vector<int>> prompts = Prompts();
  auto pool = DecoderStatePool::Create(model(), 8);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<int> order(windows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  GreedyOptions host;
  host.batch_prefill = GraphUse::kNever;
  host.reduce_on_device = GraphUse::kNever;
  const std::vector<GreedyResult> reference = DecodeBatched(**pool, windows, prompts, order, host);
  GreedyOptions device = host;
  device.reduce_on_device = GraphUse::kAlways;
  GreedyBatchTimings timings;
  const std::vector<GreedyResult> results =
      DecodeBatched(**pool, windows, prompts, order, device, &timings);
  ASSERT_EQ(results.size(), reference.size());
  for (size_t b = 0; b < reference.size(); ++b) {
    ExpectSame(results[b], reference[b],
               "device choice, slot " + std::to_string(b) + " (seed " + std::to_string(seed) + ")");
  }
  std::cout << "device choice: " << timings.device_steps << " of " << timings.steps
            << " steps without logits\n";
  EXPECT_GT(timings.device_steps, 0);

  for (GraphUse reduce : {GraphUse::kNever, GraphUse::kAlways}) {
    GreedyOptions batched = host;
    batched.batch_prefill = GraphUse::kAlways;
    batched.reduce_on_device = reduce;
    const std::vector<GreedyResult> results =
        DecodeBatched(**pool, windows, prompts, order, batched);
    ASSERT_EQ(results.size(), reference.size());
    for (size_t b = 0; b < reference.size(); ++b) {
      const std::string what =
          "batched prefill, slot " + std::to_string(b) + " (seed " + std::to_string(seed) + ")";
      EXPECT_EQ(results[b].tokens, reference[b].tokens) << what;
      ASSERT_EQ(results[b].token_logprobs.size(), reference[b].token_logprobs.size()) << what;
      for (size_t t = 0; t < reference[b].token_logprobs.size(); ++t) {
        EXPECT_NEAR(results[b].token_logprobs[t], reference[b].token_logprobs[t], 1e-4) << what;
      }
      EXPECT_NEAR(results[b].no_speech_prob, reference[b].no_speech_prob, 1e-5) << what;
      EXPECT_EQ(results[b].steps, reference[b].steps) << what;
    }
  }
}

// Pipelined steps (GreedyOptions::pipeline: each step submitted before the last one's choices
// are read, the next inputs fed on the device by FeedChoices) decode every row as one step at a
// time does, bit for bit: text prompts of different kinds and lengths, rows finishing by
// <|endoftext|> and by the length limit at different steps (the highest row among them, so the
// bucket shrinks), in a fresh random order. The extra steps are the unread ones. A batch with a
// timestamp prompt (whose rules need the logits) is not pipelined.
TEST_F(GreedyBatchTest, PipelinedStepsMatchOneStepAtATime) {
  std::vector<std::vector<float>> windows;
  for (const auto& clip : clips_) windows.push_back(Window(clip));
  const SpecialTokens& s = vocabulary().special();
  std::vector<int> text_only = vocabulary().SotSequence();
  text_only.push_back(s.no_timestamps);
  std::vector<int> earlier = {s.sot_prev};
  for (int t :
       vocabulary().tokenizer().Encode(" The printing press changed how books were made.")) {
    earlier.push_back(t);
  }
  for (int t : text_only) earlier.push_back(t);
  std::vector<int> prefix = text_only;
  for (int t : vocabulary().tokenizer().Encode(" Printing,")) prefix.push_back(t);
  const std::vector<std::vector<int>> prompts = {text_only, earlier, prefix,
                                                 text_only, earlier, text_only};
  ASSERT_EQ(windows.size(), prompts.size());
  auto pool = DecoderStatePool::Create(model(), 8);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<int> order(windows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  auto decode = [&](const std::vector<std::vector<int>>& batch_prompts,
                    const GreedyOptions& options, GreedyBatchTimings* timings) {
    return DecodeBatched(**pool, windows, batch_prompts, order, options, timings);
  };
  // The full length, then a limit that stops most rows before <|endoftext|> at different steps
  // (the prompts' lengths differ).
  for (const int max_length : {448, 40}) {
    GreedyOptions one_step;
    one_step.reduce_on_device = GraphUse::kAlways;
    one_step.pipeline = GraphUse::kNever;
    one_step.max_length = max_length;
    GreedyOptions pipelined = one_step;
    pipelined.pipeline = GraphUse::kAlways;
    GreedyBatchTimings want_timings, got_timings;
    const std::vector<GreedyResult> want = decode(prompts, one_step, &want_timings);
    const std::vector<GreedyResult> got = decode(prompts, pipelined, &got_timings);
    ASSERT_EQ(got.size(), want.size());
    int shortest = 1 << 30, longest = 0;
    for (size_t b = 0; b < want.size(); ++b) {
      ExpectSame(got[b], want[b],
                 "max_length " + std::to_string(max_length) + ", slot " + std::to_string(b) +
                     " (seed " + std::to_string(seed) + ")");
      shortest = std::min(shortest, want[b].steps);
      longest = std::max(longest, want[b].steps);
    }
    std::cout << "max_length " << max_length << ": rows of " << shortest << " to " << longest
              << " steps; " << got_timings.steps << " steps pipelined (" << got_timings.unread_steps
              << " unread) against " << want_timings.steps << "\n";
    EXPECT_LT(shortest, longest) << "the rows should finish at different steps";
    EXPECT_EQ(want_timings.pipelined_steps, 0);
    EXPECT_GT(got_timings.pipelined_steps, 0);
    EXPECT_EQ(got_timings.steps - got_timings.unread_steps, want_timings.steps);
    EXPECT_EQ(got_timings.row_steps, want_timings.row_steps);
  }
  std::vector<std::vector<int>> with_timestamps = prompts;
  with_timestamps[2] = vocabulary().SotSequence();
  GreedyOptions one_step;
  one_step.reduce_on_device = GraphUse::kAlways;
  one_step.pipeline = GraphUse::kNever;
  GreedyOptions pipelined = one_step;
  pipelined.pipeline = GraphUse::kAlways;
  GreedyBatchTimings timings;
  const std::vector<GreedyResult> want = decode(with_timestamps, one_step, nullptr);
  const std::vector<GreedyResult> got = decode(with_timestamps, pipelined, &timings);
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b < want.size(); ++b) ExpectSame(got[b], want[b], "timestamps in the batch");
  EXPECT_EQ(timings.pipelined_steps, 0);
}

// The pipelined loop against downloads made as late as CopyToHostAsync allows
// (testing::DeferredCopyBackend: a copy reads its source only when its ticket is waited for, as
// a copy stream that has not run yet): three batches of 6, 3 and 2 rows on one pool, each the
// same as one step at a time; nothing written under a pending download (the two choice buffers
// alternate, and the step a batch leaves in flight when its rows end is waited for by the next
// batch before it writes them); at most that one download pending after a batch, and none once
// the pool is gone (its destructor waits for it).
TEST_F(GreedyBatchTest, PipelinedStepsWithLateDownloads) {
  auto cpu = CreateBackend("cpu", {});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  testing::DeferredCopyBackend deferred(std::move(*cpu));
  auto transcriber = Transcriber::Load(*waav::testing::TinyEnModelDir(), deferred);
  ASSERT_TRUE(transcriber.ok()) << transcriber.status();
  const WhisperModel& late = (*transcriber)->model();
  std::vector<int> text_only = vocabulary().SotSequence();
  text_only.push_back(vocabulary().special().no_timestamps);
  auto pool = DecoderStatePool::Create(late, 8);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto encoder = late.NewEncoderBuffers(1);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  GreedyOptions one_step;
  one_step.reduce_on_device = GraphUse::kAlways;
  one_step.pipeline = GraphUse::kNever;
  GreedyOptions pipelined = one_step;
  pipelined.pipeline = GraphUse::kAlways;
  int unread = 0;
  for (const auto& [first, rows] : {std::pair{0, 6}, std::pair{0, 3}, std::pair{4, 2}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows from clip " << first);
    for (int b = 0; b < rows; ++b) {
      ASSERT_TRUE(late.WriteMel(Window(clips_[static_cast<size_t>(first + b)]), 0, **encoder).ok());
      ASSERT_TRUE(late.EncodeOnDevice(**encoder, &(*pool)->Row(b)).ok());
    }
    const std::vector<std::vector<int>> prompts(static_cast<size_t>(rows), text_only);
    GreedyBatchTimings timings;
    auto got = DecodeGreedyBatch(late, (*transcriber)->vocabulary(), prompts, pipelined, **pool,
                                 nullptr, &timings);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_GT(timings.pipelined_steps, 0);
    EXPECT_LE(deferred.pending(), 1u) << "only the unread step's download may be left";
    unread += timings.unread_steps;
    auto want = DecodeGreedyBatch(late, (*transcriber)->vocabulary(), prompts, one_step, **pool);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t b = 0; b < want->size(); ++b) {
      ExpectSame((*got)[b], (*want)[b], "row " + std::to_string(b));
    }
  }
  EXPECT_GT(unread, 0) << "rows ending with <|endoftext|> leave a step ahead unread";
  EXPECT_EQ(deferred.violations(), 0) << "a download's source was written before its wait";
  auto again =
      DecodeGreedyBatch(late, (*transcriber)->vocabulary(), {text_only}, pipelined, **pool);
  ASSERT_TRUE(again.ok()) << again.status();
  pool->reset();
  EXPECT_EQ(deferred.pending(), 0u) << "the pool must wait for a download into its buffers";
  EXPECT_EQ(deferred.violations(), 0);
}

// The device choice's token masks are kept with the pool (DecoderStatePool::Constant) while the
// options that shape them stay the same: a batch under other options (one more suppressed token,
// the one row 0 picked at its second step, which the device chooses: text only) gets its own
// masks, and the defaults get theirs back, each as the host path decodes it.
TEST_F(GreedyBatchTest, DeviceMasksFollowTheOptions) {
  std::vector<std::vector<float>> windows;
  for (size_t i = 0; i < 2 && i < clips_.size(); ++i) windows.push_back(Window(clips_[i]));
  std::vector<int> text_only = vocabulary().SotSequence();
  text_only.push_back(vocabulary().special().no_timestamps);
  const std::vector<std::vector<int>> prompts = {text_only, text_only};
  const std::vector<int> order = {0, 1};
  auto pool = DecoderStatePool::Create(model(), 2);
  ASSERT_TRUE(pool.ok()) << pool.status();
  GreedyOptions host;
  host.reduce_on_device = GraphUse::kNever;
  GreedyOptions other = host;
  const std::vector<GreedyResult> usual = DecodeBatched(**pool, windows, prompts, order, host);
  ASSERT_FALSE(usual.empty());
  ASSERT_GE(usual[0].tokens.size(), 2u);
  other.suppress_tokens = vocabulary().SuppressedTokens();
  other.suppress_tokens.push_back(usual[0].tokens[1]);
  const std::vector<GreedyResult> suppressed =
      DecodeBatched(**pool, windows, prompts, order, other);
  ASSERT_FALSE(suppressed.empty());
  ASSERT_NE(suppressed[0].tokens, usual[0].tokens) << "the extra suppressed token changes row 0";
  for (const auto& [options, want] :
       {std::pair{host, usual}, std::pair{other, suppressed}, std::pair{host, usual}}) {
    GreedyOptions device = options;
    device.reduce_on_device = GraphUse::kAlways;
    const std::vector<GreedyResult> got = DecodeBatched(**pool, windows, prompts, order, device);
    ASSERT_EQ(got.size(), want.size());
    for (size_t b = 0; b < want.size(); ++b) EXPECT_EQ(got[b].tokens, want[b].tokens) << b;
  }
  // The kept tensor: built once per key, rebuilt for another, nothing kept after a failure.
  int made = 0;
  auto make = [&]() -> absl::StatusOr<Tensor> {
    ++made;
    return backend_->Allocate({4}, DType::kI32);
  };
  auto first = (*pool)->Constant("a", make);
  auto again = (*pool)->Constant("a", make);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->data(), again->data());
  EXPECT_EQ(made, 1);
  ASSERT_TRUE((*pool)->Constant("b", make).ok());
  EXPECT_EQ(made, 2);
  EXPECT_EQ((*pool)
                ->Constant("c", [] { return absl::StatusOr<Tensor>(absl::InternalError("x")); })
                .status()
                .code(),
            absl::StatusCode::kInternal);
  ASSERT_TRUE((*pool)->Constant("b", make).ok());
  EXPECT_EQ(made, 3);
}

TEST_F(GreedyBatchTest, BatchedEncoderMatchesOneWindowAtATime) {
  // For the scheduler's choice of encoding windows one at a time or as a batch: how far the
  // batched encoder's output is from the per-window one on the CPU backend.
  const size_t n = 3;
  std::vector<float> mels;
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<float> w = Window(clips_[i]);
    mels.insert(mels.end(), w.begin(), w.end());
    auto out = model().EncoderOutput(w, 1);
    ASSERT_TRUE(out.ok()) << out.status();
    alone.push_back(std::move(*out));
  }
  auto batched = model().EncoderOutput(mels, static_cast<int>(n));
  ASSERT_TRUE(batched.ok()) << batched.status();
  const size_t per_row = alone[0].size();
  ASSERT_EQ(batched->size(), n * per_row);
  double max_abs = 0;
  size_t differing = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < per_row; ++j) {
      const double d = std::fabs((*batched)[i * per_row + j] - alone[i][j]);
      max_abs = std::max(max_abs, d);
      differing += d != 0;
    }
  }
  std::cout << "batched encoder vs one window at a time: " << differing << " of " << n * per_row
            << " values differ, max abs difference " << max_abs << "\n";
  EXPECT_LT(max_abs, 1e-3);
}

// The streaming scheduler's batched encoder (where WhisperModel::batches_encoder): passes over
// prefixes of one set of encoder buffers (EncoderBuffers::Rows), each replayed into the decoder
// slots of its windows (DecoderStatePool::Range), then one batched decode. The batched encoder's
// output differs from the one-window output in the last bits on the CPU (test above), so the
// tokens are compared exactly and the log-probabilities within a tolerance.
TEST_F(GreedyBatchTest, BatchedEncoderPassesFillTheirSlots) {
  const std::vector<int> prompt = Prompts()[1];  // text only
  const size_t n = 3;
  std::vector<std::vector<float>> windows;
  std::vector<GreedyResult> alone;
  for (size_t i = 0; i < n; ++i) {
    windows.push_back(Window(clips_[i]));
    alone.push_back(DecodeAlone(windows.back(), prompt));
  }
  auto pool = DecoderStatePool::Create(model(), 4);
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto encoder = model().NewEncoderBuffers(4);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  // Windows 0 and 1 in a pass of 2 into slots [0, 2), window 2 in a pass of 1 into slot 2, the
  // way the scheduler splits 3 windows (2 + 1).
  for (const auto& [begin, size] : {std::pair{0, 2}, std::pair{2, 1}}) {
    auto buffers = (*encoder)->Rows(0, size);
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    for (int i = 0; i < size; ++i) {
      ASSERT_TRUE(model().WriteMel(windows[static_cast<size_t>(begin + i)], i, **buffers).ok());
    }
    auto slots = (*pool)->Range(begin, size);
    ASSERT_TRUE(slots.ok()) << slots.status();
    ASSERT_EQ((*slots)->batch_size(), size);
    ASSERT_TRUE(model().RunEncoder(**buffers, *slots).ok());
  }
  const std::vector<std::vector<int>> prompts(n, prompt);
  auto batched = DecodeGreedyBatch(model(), vocabulary(), prompts, GreedyOptions{}, **pool);
  ASSERT_TRUE(batched.ok()) << batched.status();
  ASSERT_EQ(batched->size(), n);
  for (size_t i = 0; i < n; ++i) {
    const GreedyResult& b = (*batched)[i];
    EXPECT_EQ(b.tokens, alone[i].tokens) << "window " << i;
    ASSERT_EQ(b.token_logprobs.size(), alone[i].token_logprobs.size()) << "window " << i;
    for (size_t t = 0; t < b.token_logprobs.size(); ++t) {
      EXPECT_NEAR(b.token_logprobs[t], alone[i].token_logprobs[t], 1e-3) << "window " << i;
    }
  }
  EXPECT_FALSE((*encoder)->Rows(3, 5).ok());
  EXPECT_FALSE((*encoder)->Rows(2, 2).ok());
  EXPECT_FALSE((*pool)->Range(3, 2).ok());
  EXPECT_FALSE((*pool)->Range(-1, 1).ok());
}

// The loop a streaming final fell into: LJ001-0002 ("in being comparatively modern.") plus
// 0.19 s of silence, its whole text forced as the committed prefix. At temperature 0 the model
// goes on with ". . . ." to the length limit; max_repeats stops it, and since the repeated
// n-gram holds no word no copy is kept.
TEST_F(GreedyBatchTest, RepetitionLoopsAreCut) {
  std::vector<float> audio = clips_[2];
  audio.resize(audio.size() + 3040, 0.0f);
  const std::vector<float> window = Window(audio);
  std::vector<int> prompt = vocabulary().SotSequence();
  prompt.push_back(vocabulary().special().no_timestamps);
  const std::vector<int> prefix =
      vocabulary().tokenizer().Encode(" in being comparatively modern.");
  prompt.insert(prompt.end(), prefix.begin(), prefix.end());

  const GreedyResult looping = DecodeAlone(window, prompt);
  GreedyOptions options;
  options.max_repeats = 4;
  const GreedyResult cut = DecodeAlone(window, prompt, options);
  std::cout << "without the cut: " << looping.tokens.size() << " tokens '"
            << vocabulary().tokenizer().Decode(looping.tokens)
            << "'; with it: " << cut.tokens.size() << " tokens '"
            << vocabulary().tokenizer().Decode(cut.tokens) << "'\n";
  ASSERT_GE(looping.tokens.size(), 16u) << "the loop this test is about did not happen";
  EXPECT_FALSE(looping.cut_repetition);
  EXPECT_TRUE(cut.cut_repetition);
  EXPECT_LE(cut.tokens.size(), 16u);
  const std::string cut_text = vocabulary().tokenizer().Decode(cut.tokens);
  EXPECT_TRUE(std::none_of(cut_text.begin(), cut_text.end(), [](char c) { return c == '.'; }))
      << "'" << cut_text << "'";
  // Up to the cut both decodes are the same.
  ASSERT_LE(cut.tokens.size(), looping.tokens.size());
  EXPECT_TRUE(std::equal(cut.tokens.begin(), cut.tokens.end(), looping.tokens.begin()));
  // Another window decodes as before: nothing repeats in it.
  const GreedyResult plain = DecodeAlone(Window(clips_[0]), Prompts()[1], options);
  EXPECT_FALSE(plain.cut_repetition);
  EXPECT_EQ(plain.tokens, DecodeAlone(Window(clips_[0]), Prompts()[1]).tokens);
}

// GreedyOptions::stop_before: a row the policy stops ends before the token it was asked about,
// with the tokens and log-probabilities of the decode without the stop up to there; the other
// rows decode as without it; each row is asked about its own tokens, in order. One step at a
// time, pipelined (each step submitted before the last one's choices are read) and alone.
TEST_F(GreedyBatchTest, RowsStopWhereThePolicySays) {
  std::vector<std::vector<float>> windows;
  for (const auto& clip : clips_) windows.push_back(Window(clip));
  std::vector<int> text_only = vocabulary().SotSequence();
  text_only.push_back(vocabulary().special().no_timestamps);
  const std::vector<std::vector<int>> prompts(windows.size(), text_only);
  auto pool = DecoderStatePool::Create(model(), 8);
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<int> order(windows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::mt19937 rng(std::random_device{}());
  std::shuffle(order.begin(), order.end(), rng);
  for (const GraphUse pipeline : {GraphUse::kNever, GraphUse::kAlways}) {
    GreedyOptions options;
    options.reduce_on_device = GraphUse::kAlways;
    options.pipeline = pipeline;
    const std::vector<GreedyResult> whole = DecodeBatched(**pool, windows, prompts, order, options);
    ASSERT_EQ(whole.size(), windows.size());
    // Rows 1 and 3 stop before a token drawn from their whole decodes (never the first, so
    // that something is kept); the rest never stop.
    std::vector<size_t> stop_at(whole.size(), std::string::npos);
    for (const size_t b : {size_t{1}, size_t{3}}) {
      ASSERT_GE(whole[b].tokens.size(), 3u) << "row " << b;
      stop_at[b] = std::uniform_int_distribution<size_t>(1, whole[b].tokens.size() - 1)(rng);
    }
    std::vector<std::vector<int>> asked(whole.size());
    options.stop_before = [&](int row, int token) {
      std::vector<int>& seen = asked[static_cast<size_t>(row)];
      seen.push_back(token);
      return seen.size() - 1 == stop_at[static_cast<size_t>(row)];
    };
    GreedyBatchTimings timings;
    const std::vector<GreedyResult> got =
        DecodeBatched(**pool, windows, prompts, order, options, &timings);
    ASSERT_EQ(got.size(), whole.size());
    const std::string what = pipeline == GraphUse::kAlways ? "pipelined" : "one step at a time";
    for (size_t b = 0; b < got.size(); ++b) {
      const std::string row = what + ", row " + std::to_string(b);
      if (stop_at[b] == std::string::npos) {
        ExpectSame(got[b], whole[b], row);
        EXPECT_FALSE(got[b].stopped) << row;
        EXPECT_EQ(asked[b], whole[b].tokens) << row;
        continue;
      }
      const auto kept = static_cast<std::ptrdiff_t>(stop_at[b]);
      EXPECT_TRUE(got[b].stopped) << row;
      EXPECT_EQ(got[b].tokens,
                std::vector<int>(whole[b].tokens.begin(), whole[b].tokens.begin() + kept))
          << row;
      EXPECT_EQ(got[b].token_logprobs, std::vector<float>(whole[b].token_logprobs.begin(),
                                                          whole[b].token_logprobs.begin() + kept))
          << row;
      EXPECT_EQ(got[b].steps, kept + 1) << row;
      EXPECT_EQ(asked[b],
                std::vector<int>(whole[b].tokens.begin(), whole[b].tokens.begin() + kept + 1))
          << row;
    }
    std::cout << what << ": rows 1 and 3 stopped before tokens " << stop_at[1] << " and "
              << stop_at[3] << "\n";
  }
  // Alone (DecodeGreedy): the row is row 0.
  GreedyOptions options;
  const GreedyResult whole = DecodeAlone(windows[0], text_only, options);
  ASSERT_GE(whole.tokens.size(), 3u);
  int calls = 0;
  options.stop_before = [&](int row, int) {
    EXPECT_EQ(row, 0);
    return ++calls == 3;
  };
  const GreedyResult stopped = DecodeAlone(windows[0], text_only, options);
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.tokens, std::vector<int>(whole.tokens.begin(), whole.tokens.begin() + 2));
  EXPECT_EQ(stopped.steps, 3);
}

TEST_F(GreedyBatchTest, BadBatchesAreRefused) {
  auto pool = DecoderStatePool::Create(model(), 2);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->BucketFor(1), 1);
  EXPECT_EQ((*pool)->BucketFor(2), 2);
  const std::vector<int> good = vocabulary().SotSequence();
  const std::vector<std::vector<int>> three = {good, good, good};
  auto r = DecodeGreedyBatch(model(), vocabulary(), three, GreedyOptions{}, **pool);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::vector<int>> no_sot = {good, {vocabulary().special().sot_prev, 1, 2}};
  r = DecodeGreedyBatch(model(), vocabulary(), no_sot, GreedyOptions{}, **pool);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("batch row 1"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(CheckPrompt(vocabulary(), no_sot[1], GreedyOptions{}, 448).ok());
  EXPECT_TRUE(CheckPrompt(vocabulary(), good, GreedyOptions{}, 448).ok());
  auto empty = DecodeGreedyBatch(model(), vocabulary(), {}, GreedyOptions{}, **pool);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(DecoderStatePool::Create(model(), 0).ok());

  auto state = model().NewDecoderState(4);
  ASSERT_TRUE(state.ok());
  EXPECT_FALSE((*state)->Rows(-1, 2).ok());
  EXPECT_FALSE((*state)->Rows(2, 2).ok());
  EXPECT_FALSE((*state)->Rows(3, 5).ok());
  auto view = (*state)->Rows(1, 3);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ((*view)->batch_size(), 2);
  EXPECT_EQ((*view)->self_k(0).dim(0), 2);
  EXPECT_EQ((*view)->step_logits().dim(0), 2);

  auto encoder = model().NewEncoderBuffers(2);
  ASSERT_TRUE(encoder.ok());
  EXPECT_FALSE(model().WriteMel(std::vector<float>(10), 0, **encoder).ok());
  const std::vector<float> window(static_cast<size_t>(80 * 3000), 0.0f);
  EXPECT_FALSE(model().WriteMel(window, 2, **encoder).ok());
  EXPECT_TRUE(model().WriteMel(window, 1, **encoder).ok());
  EXPECT_FALSE(
      model()
          .WriteMel(std::vector<float>(10), 0, **encoder, WhisperModel::MelLayout::kTimeMajor)
          .ok());
}

// The two host layouts of WriteMel put the same window on the device: the front end's
// [n_mels, n_frames] transposed, and time-major copied as it is.
TEST_F(GreedyBatchTest, MelLayoutsWriteTheSameWindow) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  const int mels = model().dims().n_mels, frames = model().dims().n_frames();
  std::vector<float> mel_major(static_cast<size_t>(mels) * frames);
  for (float& v : mel_major) v = value(rng);
  std::vector<float> time_major(mel_major.size());
  for (int m = 0; m < mels; ++m) {
    for (int t = 0; t < frames; ++t) {
      time_major[static_cast<size_t>(t) * mels + m] =
          mel_major[static_cast<size_t>(m) * frames + t];
    }
  }
  auto encoder = model().NewEncoderBuffers(2);
  ASSERT_TRUE(encoder.ok());
  ASSERT_TRUE(model().WriteMel(mel_major, 0, **encoder).ok());
  ASSERT_TRUE(model().WriteMel(time_major, 1, **encoder, WhisperModel::MelLayout::kTimeMajor).ok());
  std::vector<float> device(2 * time_major.size());
  ASSERT_TRUE(model()
                  .backend()
                  .CopyToHost((*encoder)->mel(), device.data(), device.size() * sizeof(float))
                  .ok());
  for (size_t i = 0; i < time_major.size(); ++i) {
    ASSERT_EQ(device[i], time_major[i]) << "mel-major row, element " << i;
    ASSERT_EQ(device[time_major.size() + i], time_major[i]) << "time-major row, element " << i;
  }
}

// StageMel + UploadStagedMel put on the device what WriteMel puts there, in either host layout, for
// the first rows of a larger staging buffer, also for windows of fewer frames (their audio
// uploaded, the rest of the row zeroed on the device over what it held before, also where the
// staging row still holds a longer window's frames); bad windows, rows, frame counts and sizes
// are refused.
TEST_F(GreedyBatchTest, StagedMelUploadsWhatWriteMelWrites) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  const size_t window = static_cast<size_t>(model().dims().n_mels) * model().dims().n_frames();
  std::vector<std::vector<float>> windows(3, std::vector<float>(window));
  for (auto& w : windows) {
    for (float& v : w) v = value(rng);
  }
  auto staging = model().backend().AllocateHost(3 * window * sizeof(float));
  ASSERT_TRUE(staging.ok()) << staging.status();
  ASSERT_EQ(staging->size_bytes(), 3 * window * sizeof(float));
  ASSERT_TRUE(model().StageMel(windows[0], 0, *staging).ok());
  ASSERT_TRUE(model().StageMel(windows[1], 1, *staging, WhisperModel::MelLayout::kTimeMajor).ok());
  ASSERT_TRUE(model().StageMel(windows[2], 2, *staging).ok());
  EXPECT_FALSE(model().StageMel(windows[0], 3, *staging).ok());
  EXPECT_FALSE(model().StageMel(windows[0], -1, *staging).ok());
  EXPECT_FALSE(model().StageMel(std::vector<float>(window - 1), 0, *staging).ok());
  EXPECT_FALSE(model()
                   .StageMel(std::vector<float>(window + 1), 0, *staging,
                             WhisperModel::MelLayout::kTimeMajor)
                   .ok());

  auto staged = model().NewEncoderBuffers(4);
  auto written = model().NewEncoderBuffers(2);
  ASSERT_TRUE(staged.ok() && written.ok());
  auto first_two = (*staged)->Rows(0, 2);
  ASSERT_TRUE(first_two.ok());
  const int full = model().dims().n_frames();
  ASSERT_TRUE(model().UploadStagedMel(*staging, {full, full}, **first_two).ok());
  // Four rows need more than the three windows staged; a frame count per row, each of 0 to
  // n_frames.
  EXPECT_FALSE(model().UploadStagedMel(*staging, {full, full, full, full}, **staged).ok());
  EXPECT_FALSE(model().UploadStagedMel(*staging, {full}, **first_two).ok());
  EXPECT_FALSE(model().UploadStagedMel(*staging, {full, full, full}, **first_two).ok());
  EXPECT_FALSE(model().UploadStagedMel(*staging, {full + 1, full}, **first_two).ok());
  EXPECT_FALSE(model().UploadStagedMel(*staging, {full, -1}, **first_two).ok());
  ASSERT_TRUE(model().WriteMel(windows[0], 0, **written).ok());
  ASSERT_TRUE(model().WriteMel(windows[1], 1, **written, WhisperModel::MelLayout::kTimeMajor).ok());
  // The staged rows against the written ones, element for element.
  auto expect_same = [&](const char* what) {
    ASSERT_TRUE(model().backend().Synchronize().ok());
    std::vector<float> from_staging(2 * window), from_write(2 * window);
    const size_t bytes = from_write.size() * sizeof(float);
    ASSERT_TRUE(model().backend().CopyToHost((*first_two)->mel(), from_staging.data(), bytes).ok());
    ASSERT_TRUE(model().backend().CopyToHost((*written)->mel(), from_write.data(), bytes).ok());
    for (size_t i = 0; i < from_write.size(); ++i) {
      ASSERT_EQ(from_staging[i], from_write[i]) << "element " << i << " of the " << what;
    }
  };
  expect_same("full windows");

  // Shorter windows (the frames with audio only, as the streaming scheduler prepares them) into
  // the rows that held full ones: the rest of each row is zeroed, as WriteMel's zero-padded
  // full window has it. Row 0 mel-major [n_mels, f], row 1 time-major [f, n_mels].
  const int mels = model().dims().n_mels, frames = model().dims().n_frames();
  const int f0 = std::uniform_int_distribution<int>(0, frames - 1)(rng);
  const int f1 = std::uniform_int_distribution<int>(1, frames - 1)(rng);
  SCOPED_TRACE(::testing::Message() << "frames " << f0 << " and " << f1);
  std::vector<float> short_mel_major(static_cast<size_t>(mels) * f0);
  for (int m = 0; m < mels; ++m) {
    for (int t = 0; t < f0; ++t) {
      short_mel_major[static_cast<size_t>(m) * f0 + t] =
          windows[2][static_cast<size_t>(m) * frames + t];
    }
  }
  std::vector<float> short_time_major(windows[1].begin(),
                                      windows[1].begin() + static_cast<std::ptrdiff_t>(f1) * mels);
  std::vector<float> padded_mel_major(window, 0.0f), padded_time_major(window, 0.0f);
  for (int m = 0; m < mels; ++m) {
    for (int t = 0; t < f0; ++t) {
      padded_mel_major[static_cast<size_t>(m) * frames + t] =
          windows[2][static_cast<size_t>(m) * frames + t];
    }
  }
  std::copy(short_time_major.begin(), short_time_major.end(), padded_time_major.begin());
  ASSERT_TRUE(model().StageMel(short_mel_major, 0, *staging).ok());
  ASSERT_TRUE(
      model().StageMel(short_time_major, 1, *staging, WhisperModel::MelLayout::kTimeMajor).ok());
  ASSERT_TRUE(model().UploadStagedMel(*staging, {f0, f1}, **first_two).ok());
  ASSERT_TRUE(model().WriteMel(padded_mel_major, 0, **written).ok());
  ASSERT_TRUE(
      model().WriteMel(padded_time_major, 1, **written, WhisperModel::MelLayout::kTimeMajor).ok());
  expect_same("short windows");
  // Not a whole number of frames, or more frames than a window: refused.
  EXPECT_FALSE(
      model().StageMel(std::vector<float>(static_cast<size_t>(mels) * f1 + 1), 0, *staging).ok());
  EXPECT_FALSE(model()
                   .StageMel(std::vector<float>(window + static_cast<size_t>(mels)), 0, *staging,
                             WhisperModel::MelLayout::kTimeMajor)
                   .ok());
}

}  // namespace
}  // namespace waav::whisper

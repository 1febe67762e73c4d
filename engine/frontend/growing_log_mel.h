// The log-mel window of an input that grows between calls (a stream's utterance so far, taken
// again for every partial result), equal bit for bit to LogMel::Compute of the input as it
// stands, but computing only the frames the call before had not: the frames that depend on
// samples alone (LogMel::StableFrames) keep their log-power from call to call, and only the
// new ones and the last few (which see the end's padding) go through the STFT again. What is
// left per call is the normalisation, which depends on the maximum over the whole input, as one
// pass over the kept values.
//
// Why it is exact: each frame's FFT, filterbank and logarithm are the same operations whichever
// frames are computed beside it (LogMel computes 8 frames a vector, lane by lane, and takes the
// logarithm of a value by the same function wherever it sits), and a maximum does not depend on
// the order it is taken in. growing_log_mel_test checks it against Compute on random inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/frontend/log_mel.h"

namespace waav::frontend {

class GrowingLogMel {
 public:
  // Frames [0, frames) of log_mel.Compute(samples) (frames <= log_mel.NumFrames(samples.size()),
  // else InvalidArgument), transposed to time-major [frames, n_mels], into `out` (resized).
  // `key` names the input: a call with the key of the call before should pass that call's
  // samples followed by new ones, or a prefix of them; the kept frames are then reused. Any
  // other key, other front-end options, or samples found to differ from the kept ones at the
  // positions it checks (a few, spread over the kept part: a guard against misuse, not a proof)
  // start over. Not thread-safe: one caller at a time.
  absl::Status TimeMajor(const LogMel& log_mel, uint64_t key, absl::Span<const float> samples,
                         int64_t frames, std::vector<float>* out);

  // Frames kept for the next call (for tests and profiles).
  int64_t kept_frames() const { return kept_; }
  // Forgets the kept frames (keeping the memory for the next input).
  void Reset();
  // Forgets them and frees their memory (n_mels floats and one more a kept frame: 0.97 MB for a
  // 30 s input of 80 bins).
  void Release();

 private:
  // Whether the kept frames were computed with `log_mel`'s options from `samples`' first
  // samples, as far as the probes tell.
  bool Matches(const LogMel& log_mel, uint64_t key, absl::Span<const float> samples) const;
  void KeepProbes(absl::Span<const float> samples, int64_t covered);

  bool valid_ = false;
  uint64_t key_ = 0;
  LogMelOptions options_;
  int64_t kept_ = 0;               // frames in log_power_
  std::vector<float> log_power_;   // [kept_, n_mels]: log10(max(mel power, 1e-10))
  std::vector<float> prefix_max_;  // [kept_]: the largest of log_power_'s frames [0, f]
  // Samples at a few positions of those the kept frames read, with the positions.
  std::vector<int64_t> probe_at_;
  std::vector<float> probe_value_;
  std::vector<float> scratch_;  // [n_mels, new frames] as LogMel writes them
};

}  // namespace waav::frontend

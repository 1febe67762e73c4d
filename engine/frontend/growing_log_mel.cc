#include "engine/frontend/growing_log_mel.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav::frontend {
namespace {

constexpr int kProbes = 9;  // sample positions checked against the kept frames' input

bool SameOptions(const LogMelOptions& a, const LogMelOptions& b) {
  return a.sample_rate_hz == b.sample_rate_hz && a.n_fft == b.n_fft &&
         a.hop_length == b.hop_length && a.n_mels == b.n_mels &&
         a.padding_samples == b.padding_samples;
}

// Log-power of `count` frames starting at `first` as LogMel writes them ([n_mels, count] in
// `scratch`), the frames' maxima into `frame_max` (count values).
absl::Status LogPowerFrames(const LogMel& log_mel, absl::Span<const float> samples, int64_t first,
                            int64_t count, std::vector<float>& scratch,
                            std::vector<float>& frame_max) {
  const int n_mels = log_mel.options().n_mels;
  scratch.resize(static_cast<size_t>(n_mels) * static_cast<size_t>(count));
  frame_max.assign(static_cast<size_t>(count), -std::numeric_limits<float>::infinity());
  if (count == 0) return absl::OkStatus();
  RETURN_IF_ERROR(log_mel.InputMelPower(samples, first, count, absl::MakeSpan(scratch), count));
  LogMel::LogPower(absl::MakeSpan(scratch));
  for (int m = 0; m < n_mels; ++m) {
    const float* row = scratch.data() + static_cast<size_t>(m) * static_cast<size_t>(count);
    for (int64_t f = 0; f < count; ++f) {
      frame_max[static_cast<size_t>(f)] = std::max(frame_max[static_cast<size_t>(f)], row[f]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

void GrowingLogMel::Reset() {
  valid_ = false;
  kept_ = 0;
  log_power_.clear();
  prefix_max_.clear();
  probe_at_.clear();
  probe_value_.clear();
}

void GrowingLogMel::Release() {
  Reset();
  std::vector<float>().swap(log_power_);
  std::vector<float>().swap(prefix_max_);
  std::vector<float>().swap(scratch_);
}

bool GrowingLogMel::Matches(const LogMel& log_mel, uint64_t key,
                            absl::Span<const float> samples) const {
  if (!valid_ || key != key_ || !SameOptions(options_, log_mel.options())) return false;
  for (size_t i = 0; i < probe_at_.size(); ++i) {
    const int64_t at = probe_at_[i];
    if (at >= static_cast<int64_t>(samples.size())) break;  // a prefix: the rest is not read
    // Bit for bit (a NaN never matches, so it starts over, which Compute would give too).
    if (std::memcmp(&samples[static_cast<size_t>(at)], &probe_value_[i], sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

void GrowingLogMel::KeepProbes(absl::Span<const float> samples, int64_t covered) {
  probe_at_.clear();
  probe_value_.clear();
  covered = std::min(covered, static_cast<int64_t>(samples.size()));
  if (covered <= 0) return;
  for (int i = 0; i < kProbes; ++i) {
    const int64_t at = covered * i / (kProbes - 1) - (i == kProbes - 1 ? 1 : 0);
    if (!probe_at_.empty() && at <= probe_at_.back()) continue;
    probe_at_.push_back(at);
    probe_value_.push_back(samples[static_cast<size_t>(at)]);
  }
}

absl::Status GrowingLogMel::TimeMajor(const LogMel& log_mel, uint64_t key,
                                      absl::Span<const float> samples, int64_t frames,
                                      std::vector<float>* out) {
  const LogMelOptions& o = log_mel.options();
  const int64_t n = static_cast<int64_t>(samples.size());
  const int64_t total = log_mel.NumFrames(n);
  if (frames < 0 || frames > total) {
    return absl::InvalidArgumentError(absl::StrCat("log-mel window of ", frames, " frames asked of ",
                                                   n, " samples, which have ", total));
  }
  const int n_mels = o.n_mels;
  const int64_t stable = log_mel.StableFrames(n);
  const int64_t keep = Matches(log_mel, key, samples) ? std::min(kept_, stable) : 0;
  if (keep == 0) Reset();
  kept_ = keep;
  log_power_.resize(static_cast<size_t>(keep) * static_cast<size_t>(n_mels));
  prefix_max_.resize(static_cast<size_t>(keep));

  // The stable frames not kept yet, transposed onto the kept ones.
  std::vector<float> frame_max;
  RETURN_IF_ERROR(LogPowerFrames(log_mel, samples, keep, stable - keep, scratch_, frame_max));
  const int64_t added = stable - keep;
  log_power_.resize(static_cast<size_t>(stable) * static_cast<size_t>(n_mels));
  prefix_max_.resize(static_cast<size_t>(stable));
  for (int64_t f = 0; f < added; ++f) {
    float* dst = log_power_.data() + static_cast<size_t>(keep + f) * static_cast<size_t>(n_mels);
    for (int m = 0; m < n_mels; ++m) {
      dst[m] = scratch_[static_cast<size_t>(m) * static_cast<size_t>(added) +
                        static_cast<size_t>(f)];
    }
    const float before = keep + f == 0 ? -std::numeric_limits<float>::infinity()
                                       : prefix_max_[static_cast<size_t>(keep + f - 1)];
    prefix_max_[static_cast<size_t>(keep + f)] =
        std::max(before, frame_max[static_cast<size_t>(f)]);
  }
  kept_ = stable;
  valid_ = true;
  key_ = key;
  options_ = o;
  // The frames the stable ones read: up to the last one's end (its start reflection reads
  // samples below that).
  KeepProbes(samples, stable == 0 ? 0 : (stable - 1) * o.hop_length + o.n_fft / 2);

  // The frames that see the end (padding or its reflection): computed for this call only.
  const int64_t tail = total - stable;
  std::vector<float> tail_max;
  std::vector<float> tail_values;
  RETURN_IF_ERROR(LogPowerFrames(log_mel, samples, stable, tail, tail_values, tail_max));
  float maximum = stable == 0 ? -std::numeric_limits<float>::infinity()
                              : prefix_max_[static_cast<size_t>(stable - 1)];
  for (const float v : tail_max) maximum = std::max(maximum, v);

  out->resize(static_cast<size_t>(frames) * static_cast<size_t>(n_mels));
  const int64_t from_kept = std::min(frames, stable);
  const float* kept = log_power_.data();
  float* dst = out->data();
  for (int64_t i = 0; i < from_kept * n_mels; ++i) dst[i] = LogMel::NormalizeLog(kept[i], maximum);
  for (int64_t f = from_kept; f < frames; ++f) {
    for (int m = 0; m < n_mels; ++m) {
      dst[static_cast<size_t>(f) * static_cast<size_t>(n_mels) + static_cast<size_t>(m)] =
          LogMel::NormalizeLog(tail_values[static_cast<size_t>(m) * static_cast<size_t>(tail) +
                                           static_cast<size_t>(f - stable)],
                               maximum);
    }
  }
  return absl::OkStatus();
}

}  // namespace waav::frontend

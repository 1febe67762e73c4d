#include "engine/frontend/log_mel.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "engine/frontend/simd.h"

namespace waav::frontend {
namespace {

constexpr int kLanes = BatchedRealFft::kLanes;
static_assert(kLanes == simd::kLanes);
// Whisper's clamp floor for mel power, and its dynamic range in log10 units (80 dB).
constexpr float kMinMelPower = 1e-10f;

// Slaney's mel scale as faster-whisper writes it out: linear below 1 kHz (200/3 Hz per mel),
// logarithmic above (27 mels per factor 6.4). Every constant and operation order mirrors
// feature_extractor.py so that the double results agree to the last bit or so.
constexpr double kMinHz = 0.0;
constexpr double kHzPerMel = 200.0 / 3;
constexpr double kMinLogHz = 1000.0;
constexpr double kMinLogMel = (kMinLogHz - kMinHz) / kHzPerMel;

double LogStep() { return std::log(6.4) / 27.0; }

double HzToMel(double hz) {
  if (hz < kMinLogHz) return (hz - kMinHz) / kHzPerMel;
  return kMinLogMel + std::log(hz / kMinLogHz) / LogStep();
}

double MelToHz(double mel) {
  if (mel < kMinLogMel) return kMinHz + kHzPerMel * mel;
  return kMinLogHz * std::exp(LogStep() * (mel - kMinLogMel));
}

// faster-whisper's get_mel_filters: triangles between consecutive mel points, scaled to equal
// area. It hard-codes max_mel = 45.245640471924965, which is HzToMel(8000) to the last bit,
// so computing it from the Nyquist rate gives the same filters at 16 kHz and the right ones
// at any other rate.
std::vector<float> MelFilters(int sample_rate_hz, int n_fft, int n_mels) {
  const int bins = n_fft / 2 + 1;
  std::vector<double> fft_hz(bins);
  const double hz_per_bin = 1.0 / (n_fft * (1.0 / sample_rate_hz));  // numpy.fft.rfftfreq
  for (int k = 0; k < bins; ++k) fft_hz[k] = k * hz_per_bin;

  // numpy.linspace(0, max_mel, n_mels + 2): i·step, with the endpoint set exactly.
  const int points = n_mels + 2;
  const double max_mel = HzToMel(sample_rate_hz / 2.0);
  const double step = max_mel / (points - 1);
  std::vector<double> hz(points);
  for (int i = 0; i < points; ++i) {
    const double mel = i == points - 1 ? max_mel : i * step;
    hz[i] = MelToHz(mel);
  }

  std::vector<float> filters(static_cast<size_t>(n_mels) * bins);
  for (int m = 0; m < n_mels; ++m) {
    const double enorm = 2.0 / (hz[m + 2] - hz[m]);
    for (int k = 0; k < bins; ++k) {
      const double lower = -(hz[m] - fft_hz[k]) / (hz[m + 1] - hz[m]);
      const double upper = (hz[m + 2] - fft_hz[k]) / (hz[m + 2] - hz[m + 1]);
      filters[static_cast<size_t>(m) * bins + k] =
          static_cast<float>(std::max(0.0, std::min(lower, upper)) * enorm);
    }
  }
  return filters;
}

// numpy.hanning(n + 1)[:-1]: the periodic Hann window, with numpy's formula and order of
// operations, rounded once to float.
std::vector<float> PeriodicHann(int n) {
  const int m = n + 1;
  std::vector<float> window(n);
  for (int k = 0; k < n; ++k) {
    const double x = 1 - m + 2 * k;
    window[k] = static_cast<float>(0.5 + 0.5 * std::cos(std::numbers::pi * x / (m - 1)));
  }
  return window;
}

// Index into a signal of `n` samples with numpy's "reflect" padding (mirror without repeating
// the edge), for any distance outside: the reflection is periodic with period 2(n − 1).
int64_t Reflect(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

// log10 of positive, normal, finite floats, kLanes at a time. x = 2^e·m with m in [√½, √2);
// ln m = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤ 0.172, whose series 2(s + s³/3 + ... + s⁹/9) is
// exact to 1e-9; e·log10(2) is split into a part exact in float and a correction. Error against
// double log10: ~2.5 float ulps (log_mel_test measures it).
inline simd::V Log10Positive(simd::V x) {
  using simd::V;
  using simd::VI;
  constexpr int32_t kSqrtHalfBits = 0x3f3504f3;     // √½ as a float
  constexpr float kLog10TwoHigh = 0.301025390625f;  // 12 significant bits: e·high is exact
  constexpr float kLog10TwoLow = 4.605039066518657e-06f;
  constexpr float kLog10E = 0.4342944819032518f;
  const VI bits = std::bit_cast<VI>(x);
  const VI e = (bits - kSqrtHalfBits) >> 23;  // floor(log2(x) + 1/2)
  const VI m_bits = bits - e * (1 << 23);     // x / 2^e, in [√½, √2)
  const V m = std::bit_cast<V>(m_bits);
  const V s = (m - 1.0f) / (m + 1.0f);
  const V s2 = s * s;
  const V series = s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
  const V ln_m = 2.0f * s + 2.0f * s * series;
  const V ef = __builtin_convertvector(e, V);
  return ef * kLog10TwoHigh + (ef * kLog10TwoLow + ln_m * kLog10E);
}

}  // namespace

absl::Status LogMelOptions::Validate() const {
  const auto invalid = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("log-mel options: ", parts...));
  };
  if (sample_rate_hz <= 0) return invalid("sample_rate_hz must be > 0, got ", sample_rate_hz);
  if (n_fft < 2 || n_fft > (1 << 16) || !BatchedRealFft::SupportsSize(n_fft)) {
    return invalid("n_fft must be even, in [2, 65536], and n_fft/2 free of prime factors above ",
                   BatchedRealFft::kMaxRadix, "; got ", n_fft);
  }
  if (hop_length <= 0) return invalid("hop_length must be > 0, got ", hop_length);
  if (n_mels <= 0 || n_mels > 1024) return invalid("n_mels must be in [1, 1024], got ", n_mels);
  if (padding_samples < 0) return invalid("padding_samples must be >= 0, got ", padding_samples);
  return absl::OkStatus();
}

LogMel::LogMel() : LogMel(LogMelOptions{}) {}

absl::StatusOr<LogMel> LogMel::Create(const LogMelOptions& options) {
  if (absl::Status status = options.Validate(); !status.ok()) return status;
  return LogMel(options);
}

LogMel::LogMel(const LogMelOptions& options)
    : options_(options),
      fft_(options.n_fft),
      window_(PeriodicHann(options.n_fft)),
      filters_(MelFilters(options.sample_rate_hz, options.n_fft, options.n_mels)) {
  const int bins = num_bins();
  band_offset_.push_back(0);
  for (int m = 0; m < options_.n_mels; ++m) {
    const float* row = filters_.data() + static_cast<size_t>(m) * bins;
    int first = 0;
    while (first < bins && row[first] == 0.0f) ++first;
    int last = bins;
    while (last > first && row[last - 1] == 0.0f) --last;
    band_first_.push_back(first);
    band_weights_.insert(band_weights_.end(), row + first, row + last);
    band_offset_.push_back(static_cast<int>(band_weights_.size()));
  }
}

int64_t LogMel::NumFrames(int64_t n_samples) const {
  return (n_samples + options_.padding_samples) / options_.hop_length;
}

LogMel::Features LogMel::Compute(absl::Span<const float> samples) const {
  Features features;
  const int64_t n_total = static_cast<int64_t>(samples.size()) + options_.padding_samples;
  features.n_mels = options_.n_mels;
  // numpy refuses to reflect-pad an empty signal; there is nothing to compute either way.
  if (n_total == 0) return features;
  const int64_t n_frames = NumFrames(static_cast<int64_t>(samples.size()));
  features.n_frames = static_cast<int>(n_frames);
  features.data.resize(static_cast<size_t>(options_.n_mels) * n_frames);
  MelPowerImpl(samples.data(), static_cast<int64_t>(samples.size()), n_total, 0, n_frames,
               features.data.data(), n_frames);
  Normalize(absl::MakeSpan(features.data));
  return features;
}

absl::Status LogMel::InputMelPower(absl::Span<const float> samples, int64_t first_frame,
                                   int64_t count, absl::Span<float> out,
                                   int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(samples.size());
  return CheckedMelPower(samples.data(), n, n + options_.padding_samples, first_frame, count, out,
                         out_stride);
}

int64_t LogMel::StableFrames(int64_t n_samples) const {
  // Frame f covers [f·hop − n_fft/2, f·hop + n_fft/2); the start's reflection reads samples
  // 1 .. n_fft/2 only, which appending does not change.
  const int64_t half = options_.n_fft / 2;
  if (n_samples <= half) return 0;
  return std::min(NumFrames(n_samples), (n_samples - half) / options_.hop_length + 1);
}

absl::Status LogMel::MelPower(absl::Span<const float> signal, int64_t first_frame, int64_t count,
                              absl::Span<float> out, int64_t out_stride) const {
  const int64_t n = static_cast<int64_t>(signal.size());
  return CheckedMelPower(signal.data(), n, n, first_frame, count, out, out_stride);
}

absl::Status LogMel::CheckedMelPower(const float* x, int64_t n_real, int64_t n_total,
                                     int64_t first_frame, int64_t count, absl::Span<float> out,
                                     int64_t out_stride) const {
  const int64_t available = n_total == 0 ? 0 : n_total / options_.hop_length + 1;
  if (first_frame < 0 || count < 0 || first_frame + count > available) {
    return absl::InvalidArgumentError(absl::StrCat("mel power: frames [", first_frame, ", ",
                                                   first_frame + count, ") requested, but ",
                                                   n_real, " samples have frames [0, ",
                                                   available, ")"));
  }
  if (count == 0) return absl::OkStatus();
  if (out_stride < count ||
      static_cast<int64_t>(out.size()) < (options_.n_mels - 1) * out_stride + count) {
    return absl::InvalidArgumentError(
        absl::StrCat("mel power: output of ", out.size(), " floats with stride ", out_stride,
                     " cannot hold ", options_.n_mels, " x ", count, " values"));
  }
  MelPowerImpl(x, n_real, n_total, first_frame, count, out.data(), out_stride);
  return absl::OkStatus();
}

void LogMel::MelPowerImpl(const float* x, int64_t n_real, int64_t n_total, int64_t first_frame,
                          int64_t count, float* out, int64_t out_stride) const {
  const int n_fft = options_.n_fft;
  const int64_t hop = options_.hop_length;
  const int bins = num_bins();
  const float* window = window_.data();
  std::vector<float> frames(static_cast<size_t>(n_fft) * kLanes);
  std::vector<float> scratch(static_cast<size_t>(fft_.scratch_floats()));
  std::vector<float> power(static_cast<size_t>(bins) * kLanes);

  for (int64_t f0 = first_frame; f0 < first_frame + count; f0 += kLanes) {
    const int lanes = static_cast<int>(std::min<int64_t>(kLanes, first_frame + count - f0));
    // Gather kLanes windowed frames into lane-interleaved order, [t][lane].
    const int64_t start0 = f0 * hop - n_fft / 2;
    const int64_t end_last = start0 + (kLanes - 1) * hop + n_fft;
    if (lanes == kLanes && start0 >= 0 && end_last <= n_real) {
      // Every frame lies inside the stored samples: the common case, without index mapping.
      for (int t = 0; t < n_fft; ++t) {
        float* dst = frames.data() + static_cast<size_t>(t) * kLanes;
        for (int l = 0; l < kLanes; ++l) dst[l] = x[start0 + l * hop + t] * window[t];
      }
    } else {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t start = start0 + l * hop;
        for (int t = 0; t < n_fft; ++t) {
          float v = 0.0f;  // lanes past the last frame are computed and discarded
          if (l < lanes) {
            const int64_t i = Reflect(start + t, n_total);
            v = i < n_real ? x[i] : 0.0f;
          }
          frames[static_cast<size_t>(t) * kLanes + l] = v * window[t];
        }
      }
    }

    fft_.Power(frames.data(), scratch.data(), power.data());

    for (int m = 0; m < options_.n_mels; ++m) {
      simd::V acc{};
      const float* weights = band_weights_.data() + band_offset_[m];
      const int width = band_offset_[m + 1] - band_offset_[m];
      const float* p = power.data() + static_cast<size_t>(band_first_[m]) * kLanes;
      for (int i = 0; i < width; ++i) acc += weights[i] * simd::Load(p + i * kLanes);
      float* dst = out + m * out_stride + (f0 - first_frame);
      if (lanes == kLanes) {
        simd::Store(dst, acc);
      } else {
        for (int l = 0; l < lanes; ++l) dst[l] = acc[l];
      }
    }
  }
}

float LogMel::LogPower(absl::Span<float> mel) {
  using simd::V;
  float* const p = mel.data();
  const size_t n = mel.size();
  const size_t full = n - n % kLanes;
  const V min_power = simd::Broadcast(kMinMelPower);
  V max = simd::Broadcast(-std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < full; i += kLanes) {
    const V v = Log10Positive(simd::Max(simd::Load(p + i), min_power));
    simd::Store(p + i, v);
    max = simd::Max(max, v);
  }
  // (The same vector function for the tail: a value's logarithm does not depend on where it is.)
  for (size_t i = full; i < n; ++i) {
    const float v = Log10Positive(simd::Max(simd::Broadcast(p[i]), min_power))[0];
    p[i] = v;
    max[0] = std::max(max[0], v);
  }
  return simd::ReduceMax(max);
}

void LogMel::Normalize(absl::Span<float> mel) {
  using simd::V;
  if (mel.empty()) return;
  float* const p = mel.data();
  const size_t n = mel.size();
  const size_t full = n - n % kLanes;
  const float floor = LogPower(mel) - kDynamicRange;
  const V floor_v = simd::Broadcast(floor);
  for (size_t i = 0; i < full; i += kLanes) {
    simd::Store(p + i, (simd::Max(simd::Load(p + i), floor_v) + 4.0f) / 4.0f);
  }
  for (size_t i = full; i < n; ++i) p[i] = (std::max(p[i], floor) + 4.0f) / 4.0f;
}

}  // namespace waav::frontend

#include "engine/frontend/log_mel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace waav::frontend {
namespace {

std::mt19937 SeededRng(unsigned& seed) {
  seed = std::random_device{}();
  return std::mt19937(seed);
}

std::vector<float> Noise(std::mt19937& rng, size_t n, float sigma) {
  std::normal_distribution<float> noise(0.0f, sigma);
  std::vector<float> v(n);
  for (float& s : v) s = noise(rng);
  return v;
}

// The whole front end in double with a direct DFT: reflect padding, windowing, power, mel,
// log10 and normalisation written out independently of log_mel.cc, sharing only the window
// and filterbank values (checked on their own below and against faster-whisper in the parity
// test). Returns [n_mels, n_frames] and, in `mel_power`, the values before the log.
std::vector<double> NaiveLogMel(const LogMel& log_mel, const std::vector<float>& samples,
                                std::vector<double>* mel_power) {
  const LogMelOptions& o = log_mel.options();
  std::vector<double> x(samples.begin(), samples.end());
  x.resize(x.size() + o.padding_samples, 0.0);
  const int64_t n = static_cast<int64_t>(x.size());
  const int half = o.n_fft / 2;
  std::vector<double> padded;  // numpy.pad(x, half, mode="reflect"), for n > half
  for (int64_t i = -half; i < n + half; ++i) {
    padded.push_back(x[i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i)]);
  }
  const int64_t frames =
      (static_cast<int64_t>(padded.size()) - o.n_fft) / o.hop_length;  // last dropped
  const int bins = o.n_fft / 2 + 1;
  mel_power->assign(static_cast<size_t>(o.n_mels) * frames, 0.0);
  std::vector<double> power(bins);
  for (int64_t f = 0; f < frames; ++f) {
    for (int k = 0; k < bins; ++k) {
      double re = 0, im = 0;
      for (int t = 0; t < o.n_fft; ++t) {
        const double v = padded[f * o.hop_length + t] * log_mel.window()[t];
        const double angle = -2.0 * std::numbers::pi * static_cast<double>(k) * t / o.n_fft;
        re += v * std::cos(angle);
        im += v * std::sin(angle);
      }
      power[k] = re * re + im * im;
    }
    for (int m = 0; m < o.n_mels; ++m) {
      double sum = 0;
      for (int k = 0; k < bins; ++k) sum += log_mel.mel_filters()[m * bins + k] * power[k];
      (*mel_power)[m * frames + f] = sum;
    }
  }
  std::vector<double> out(mel_power->size());
  double max = -INFINITY;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = std::log10(std::max((*mel_power)[i], 1e-10));
    max = std::max(max, out[i]);
  }
  for (double& v : out) v = (std::max(v, max - 8.0) + 4.0) / 4.0;
  return out;
}

// Compares Compute(samples) with the naive double implementation, element by element, with a
// tolerance that follows how float rounding propagates. The FFT's rounding error is absolute,
// a fraction of the frame's energy, so a mel bin far below its frame's loudest bin (a narrow
// low bin that noise happened to leave nearly empty) has a larger relative error than a loud
// one. Hence, per frame f and bin m:
//   |P_ours − P_ref| ≤ kPowerTolerance · max_m' P_ref[m', f]                       (mel power)
//   |L_ours − L_ref| ≤ 1e-6 + that bound / (4 · ln 10 · max(P_ref, 1e-10))          (log-mel)
// the second being the first carried through (log10(P) + 4) / 4. Returns the largest errors
// seen: log-mel absolute, and mel power relative to the frame's loudest bin.
constexpr double kPowerTolerance = 2e-6;  // measured ≤ 4.8e-7: FFT rounding, then the mel sum

struct NaiveComparison {
  double log_mel_abs = 0;
  double power_vs_frame_peak = 0;
};

NaiveComparison CompareWithNaive(const LogMel& log_mel, const std::vector<float>& samples) {
  NaiveComparison result;
  std::vector<double> ref_power;
  const std::vector<double> expected = NaiveLogMel(log_mel, samples, &ref_power);
  const LogMel::Features features = log_mel.Compute(samples);
  EXPECT_EQ(features.n_frames, static_cast<int>(samples.size() / 160 + 1));
  EXPECT_EQ(features.data.size(), expected.size());
  if (features.data.size() != expected.size()) return result;
  const int64_t frames = features.n_frames;

  std::vector<float> padded = samples;
  padded.resize(padded.size() + 160, 0.0f);
  std::vector<float> power(ref_power.size());
  EXPECT_TRUE(log_mel.MelPower(padded, 0, frames, absl::MakeSpan(power), frames).ok());

  for (int64_t f = 0; f < frames; ++f) {
    double peak = 0;
    for (int m = 0; m < 80; ++m) peak = std::max(peak, ref_power[m * frames + f]);
    const double power_bound = kPowerTolerance * peak;
    for (int m = 0; m < 80; ++m) {
      const size_t i = m * frames + f;
      const double power_error = std::abs(power[i] - ref_power[i]);
      const double log_error = std::abs(features.data[i] - expected[i]);
      result.power_vs_frame_peak = std::max(result.power_vs_frame_peak, power_error / peak);
      result.log_mel_abs = std::max(result.log_mel_abs, log_error);
      EXPECT_LE(power_error, power_bound) << "mel " << m << " frame " << f;
      const double log_bound =
          1e-6 + power_bound / (4 * std::numbers::ln10 * std::max(ref_power[i], 1e-10));
      EXPECT_LE(log_error, log_bound) << "mel " << m << " frame " << f;
    }
  }
  return result;
}

// Measured over 200 seeds on 0.4 s of white noise: mel power error ≤ 4.8e-7 of the frame's
// loudest bin; log-mel max abs error 2e-7 .. 3.7e-6, the larger values in narrow low bins that
// the noise left nearly empty (see CompareWithNaive).
TEST(LogMelTest, MatchesNaiveDoubleImplementationOnNoise) {
  unsigned seed;
  std::mt19937 rng = SeededRng(seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LogMel log_mel;
  // About 0.4 s, with a length that is not a multiple of the hop.
  const std::vector<float> samples = Noise(rng, 6400 + rng() % 160, 0.1f);
  const NaiveComparison errors = CompareWithNaive(log_mel, samples);
  std::printf("vs naive double: log-mel max abs error %.3g, mel power error / frame peak %.3g\n",
              errors.log_mel_abs, errors.power_vs_frame_peak);
}

TEST(LogMelTest, WindowIsPeriodicHann) {
  const LogMel log_mel;
  const std::vector<float>& w = log_mel.window();
  ASSERT_EQ(w.size(), 400u);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_EQ(w[200], 1.0f);
  for (int k = 1; k < 400; ++k) {
    EXPECT_EQ(w[k], w[400 - k]) << k;  // periodic: symmetric about n/2, not (n-1)/2
    EXPECT_NEAR(w[k], 0.5 - 0.5 * std::cos(2 * std::numbers::pi * k / 400), 1e-7) << k;
  }
}

TEST(LogMelTest, FilterbankIsSlaneyNormalisedTriangles) {
  const LogMel log_mel;
  const int bins = log_mel.num_bins();
  ASSERT_EQ(bins, 201);
  const std::vector<float>& filters = log_mel.mel_filters();
  ASSERT_EQ(filters.size(), 80u * 201u);
  int previous_peak = -1;
  for (int m = 0; m < 80; ++m) {
    const float* row = filters.data() + m * bins;
    const int peak = static_cast<int>(std::max_element(row, row + bins) - row);
    EXPECT_GE(peak, previous_peak) << m;  // centres rise with m
    previous_peak = peak;
    double area = 0;
    for (int k = 0; k < bins; ++k) {
      EXPECT_GE(row[k], 0.0f);
      area += row[k] * 40.0;  // 40 Hz per bin
    }
    // Slaney normalisation: height 2/width, so unit area in Hz once a triangle spans enough
    // bins to be sampled well (the low filters are a few bins wide: ±8% at m = 35..40).
    if (m >= 42) {
      EXPECT_NEAR(area, 1.0, 0.02) << m;
    }
  }
}

TEST(LogMelTest, FrameCounts) {
  const LogMel log_mel;
  EXPECT_EQ(log_mel.NumFrames(480000), 3001);
  EXPECT_EQ(log_mel.NumFrames(176000), 1101);
  EXPECT_EQ(log_mel.NumFrames(159), 1);
  EXPECT_EQ(log_mel.NumFrames(160), 2);
  EXPECT_EQ(log_mel.NumFrames(0), 1);
  const std::vector<float> samples(16123, 0.01f);
  const LogMel::Features features = log_mel.Compute(samples);
  EXPECT_EQ(features.n_frames, 16123 / 160 + 1);
  EXPECT_EQ(features.data.size(), 80u * features.n_frames);
}

TEST(LogMelTest, SilenceIsTheFloor) {
  // All power clamps to 1e-10: log10 = -10, which is also the maximum, so (−10 + 4)/4 = −1.5.
  const LogMel log_mel;
  for (size_t n : {size_t{0}, size_t{1}, size_t{37}, size_t{16000}}) {
    const LogMel::Features features = log_mel.Compute(std::vector<float>(n, 0.0f));
    ASSERT_EQ(features.n_frames, static_cast<int>(n / 160 + 1));
    for (float v : features.data) ASSERT_NEAR(v, -1.5f, 1e-6f) << n;
  }
}

TEST(LogMelTest, SineLandsInItsMelBin) {
  const LogMel log_mel;
  std::vector<float> samples(16000);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i] = static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * 1000 * i / 16000));
  }
  const LogMel::Features features = log_mel.Compute(samples);
  // The filter with the largest weight at bin 25 (1 kHz) must be the loudest in every interior
  // frame.
  const std::vector<float>& filters = log_mel.mel_filters();
  int expected_bin = 0;
  for (int m = 1; m < 80; ++m) {
    if (filters[m * 201 + 25] > filters[expected_bin * 201 + 25]) expected_bin = m;
  }
  for (int f = 5; f < features.n_frames - 5; ++f) {
    int loudest = 0;
    for (int m = 1; m < 80; ++m) {
      if (features.data[m * features.n_frames + f] >
          features.data[loudest * features.n_frames + f]) {
        loudest = m;
      }
    }
    ASSERT_EQ(loudest, expected_bin) << "frame " << f;
  }
}

// Short inputs reflect more than once (numpy's reflect padding of a signal shorter than half a
// window); compare with the naive version, which reflects once, where that is valid, and check
// the result is finite and sane where it is not.
TEST(LogMelTest, ShortInputs) {
  unsigned seed;
  std::mt19937 rng = SeededRng(seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LogMel log_mel;
  for (size_t n : {size_t{1}, size_t{2}, size_t{41}, size_t{42}, size_t{100}, size_t{300}}) {
    SCOPED_TRACE(::testing::Message() << n << " samples");
    const std::vector<float> samples = Noise(rng, n, 0.2f);
    const LogMel::Features features = log_mel.Compute(samples);
    ASSERT_EQ(features.n_frames, static_cast<int>(n / 160 + 1));
    for (float v : features.data) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_LE(v, 10.0f);
    }
    if (n + 160 > 201) CompareWithNaive(log_mel, samples);
  }
}

TEST(LogMelTest, NormalizeMatchesDouble) {
  unsigned seed;
  std::mt19937 rng = SeededRng(seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::uniform_real_distribution<double> exponent(-14.0, 6.0);
  std::vector<float> mel(10007);  // not a multiple of the vector width
  for (float& v : mel) v = static_cast<float>(std::pow(10.0, exponent(rng)));
  mel[rng() % mel.size()] = 0.0f;
  std::vector<float> normalized = mel;
  LogMel::Normalize(absl::MakeSpan(normalized));
  double max = -INFINITY;
  for (float v : mel) max = std::max(max, std::log10(std::max<double>(v, 1e-10f)));
  for (size_t i = 0; i < mel.size(); ++i) {
    const double expected =
        (std::max(std::log10(std::max<double>(mel[i], 1e-10f)), max - 8.0) + 4.0) / 4.0;
    ASSERT_NEAR(normalized[i], expected, 1e-6) << "value " << mel[i];
  }
}

// The vectorised log10 inside Normalize, one value at a time: with a single value the maximum
// is the value itself, so the result is (log10(x) + 4) / 4. Measured worst error over the
// range Whisper uses (1e-10 .. 1e10): 2.9e-7 relative to max(1, |log10 x|), ~2.5 float ulps.
TEST(LogMelTest, Log10Accuracy) {
  double worst = 0;
  for (double e = -10.0; e <= 10.0; e += 0.0007) {
    const float x = static_cast<float>(std::pow(10.0, e));
    float v = x;
    LogMel::Normalize(absl::MakeSpan(&v, 1));
    const double log10 = 4.0 * v - 4.0;
    const double error = std::abs(log10 - std::log10(static_cast<double>(x)));
    worst = std::max(worst, error / std::max(1.0, std::abs(std::log10(static_cast<double>(x)))));
  }
  std::printf("log10 max error relative to max(1, |log10 x|): %.3g\n", worst);
  EXPECT_LE(worst, 5e-7);  // relative to max(1, |log10 x|): a few float ulps
}

TEST(LogMelTest, StreamingFramesEqualWholeSignalFrames) {
  unsigned seed;
  std::mt19937 rng = SeededRng(seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LogMel log_mel;
  const std::vector<float> signal = Noise(rng, 16000 + rng() % 1000, 0.1f);
  const int64_t frames = static_cast<int64_t>(signal.size()) / 160 + 1;
  std::vector<float> whole(80 * frames);
  ASSERT_TRUE(log_mel.MelPower(signal, 0, frames, absl::MakeSpan(whole), frames).ok());

  // Random runs of frames written into a wider buffer (stride > count) agree exactly.
  for (int64_t first = 0; first < frames;) {
    const int64_t count = std::min<int64_t>(frames - first, 1 + rng() % 20);
    const int64_t stride = count + 3;
    std::vector<float> part(80 * stride, -1.0f);
    ASSERT_TRUE(log_mel.MelPower(signal, first, count, absl::MakeSpan(part), stride).ok());
    for (int m = 0; m < 80; ++m) {
      for (int64_t f = 0; f < count; ++f) {
        ASSERT_EQ(part[m * stride + f], whole[m * frames + first + f]) << m << " " << first + f;
      }
    }
    first += count;
  }

  // A frame inside a prefix of the signal is final as soon as its samples have arrived.
  const size_t prefix = 8000 + rng() % 4000;
  const std::vector<float> head(signal.begin(), signal.begin() + prefix);
  const int64_t first_final = 2;                    // f·160 >= 200
  const int64_t last_final = (prefix - 200) / 160;  // f·160 + 200 <= prefix
  const int64_t count = last_final - first_final + 1;
  std::vector<float> early(80 * count);
  ASSERT_TRUE(log_mel.MelPower(head, first_final, count, absl::MakeSpan(early), count).ok());
  for (int m = 0; m < 80; ++m) {
    for (int64_t f = 0; f < count; ++f) {
      ASSERT_EQ(early[m * count + f], whole[m * frames + first_final + f]);
    }
  }
}

TEST(LogMelTest, ComputeIsMelPowerOfPaddedSignalThenNormalize) {
  unsigned seed;
  std::mt19937 rng = SeededRng(seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const LogMel log_mel;
  const std::vector<float> samples = Noise(rng, 5000 + rng() % 500, 0.3f);
  std::vector<float> padded = samples;
  padded.resize(padded.size() + 160, 0.0f);
  const LogMel::Features features = log_mel.Compute(samples);
  std::vector<float> manual(80 * features.n_frames);
  ASSERT_TRUE(
      log_mel.MelPower(padded, 0, features.n_frames, absl::MakeSpan(manual), features.n_frames)
          .ok());
  LogMel::Normalize(absl::MakeSpan(manual));
  EXPECT_EQ(manual, features.data);
}

TEST(LogMelTest, MelPowerRejectsBadRanges) {
  const LogMel log_mel;
  const std::vector<float> signal(1600, 0.1f);  // frames 0..10
  std::vector<float> out(80 * 11);
  EXPECT_TRUE(log_mel.MelPower(signal, 0, 11, absl::MakeSpan(out), 11).ok());
  EXPECT_EQ(log_mel.MelPower(signal, 0, 12, absl::MakeSpan(out), 12).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log_mel.MelPower(signal, -1, 2, absl::MakeSpan(out), 2).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log_mel.MelPower(signal, 0, 11, absl::MakeSpan(out).subspan(1), 11).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(log_mel.MelPower(signal, 0, 11, absl::MakeSpan(out), 10).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(log_mel.MelPower(signal, 5, 0, absl::Span<float>(), 0).ok());
}

TEST(LogMelTest, OptionsValidation) {
  EXPECT_TRUE(LogMelOptions{}.Validate().ok());
  const auto invalid = [](LogMelOptions o) {
    return LogMel::Create(o).status().code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(invalid({.sample_rate_hz = 0}));
  EXPECT_TRUE(invalid({.n_fft = 401}));
  EXPECT_TRUE(invalid({.n_fft = 0}));
  EXPECT_TRUE(invalid({.n_fft = 2 * 67}));
  EXPECT_TRUE(invalid({.hop_length = 0}));
  EXPECT_TRUE(invalid({.n_mels = 0}));
  EXPECT_TRUE(invalid({.n_mels = 5000}));
  EXPECT_TRUE(invalid({.padding_samples = -1}));

  // large-v3's 128 bins.
  absl::StatusOr<LogMel> large = LogMel::Create({.n_mels = 128});
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(large->mel_filters().size(), 128u * 201u);
  const LogMel::Features features = large->Compute(std::vector<float>(3200, 0.1f));
  EXPECT_EQ(features.n_mels, 128);
  EXPECT_EQ(features.n_frames, 21);
}

}  // namespace
}  // namespace waav::frontend

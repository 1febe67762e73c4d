// Times the log-mel front end on 30 s of audio (one Whisper window), and compares its STFT
// (batched mixed-radix FFT) with the alternative of a precomputed real-DFT matrix applied to all
// frames at once through cblas_sgemm. Prints milliseconds; docs/frontend.md records the results.
//
// usage: log_mel_benchmark [iterations]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numbers>
#include <random>
#include <vector>

#include "engine/frontend/growing_log_mel.h"
#include "engine/frontend/log_mel.h"
#include "engine/runtime/transpose.h"

namespace waav::frontend {
namespace {

double MedianMs(int iterations, const std::function<void()>& body) {
  body();  // warm-up: page in buffers and tables
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// STFT power and mel through a real-DFT matrix: frames [F, n_fft] × D [n_fft, 2·bins]
// (cosines, then sines) with one sgemm, then |X|² and the dense filterbank with a second one.
class SgemmMelPower {
 public:
  explicit SgemmMelPower(const LogMel& log_mel) : log_mel_(log_mel) {
    const int n = log_mel.options().n_fft;
    const int bins = log_mel.num_bins();
    dft_.resize(static_cast<size_t>(n) * 2 * bins);
    for (int t = 0; t < n; ++t) {
      for (int k = 0; k < bins; ++k) {
        const double angle = -2.0 * std::numbers::pi * (static_cast<int64_t>(k) * t % n) / n;
        dft_[static_cast<size_t>(t) * 2 * bins + k] = static_cast<float>(std::cos(angle));
        dft_[static_cast<size_t>(t) * 2 * bins + bins + k] = static_cast<float>(std::sin(angle));
      }
    }
  }

  // Mel power [n_mels, frames] of the signal plus its end padding (interior frames only need
  // no reflection; the edges are rare and cost the same either way, so they are left out).
  void Run(const std::vector<float>& x, std::vector<float>& out) {
    const LogMelOptions& o = log_mel_.options();
    const int n = o.n_fft;
    const int bins = log_mel_.num_bins();
    const int64_t frames = (static_cast<int64_t>(x.size()) - n) / o.hop_length + 1;
    frames_.resize(static_cast<size_t>(frames) * n);
    spectrum_.resize(static_cast<size_t>(frames) * 2 * bins);
    power_.resize(static_cast<size_t>(frames) * bins);
    out.resize(static_cast<size_t>(o.n_mels) * frames);
    const std::vector<float>& window = log_mel_.window();
    for (int64_t f = 0; f < frames; ++f) {
      for (int t = 0; t < n; ++t) frames_[f * n + t] = x[f * o.hop_length + t] * window[t];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(frames), 2 * bins, n,
                1.0f, frames_.data(), n, dft_.data(), 2 * bins, 0.0f, spectrum_.data(), 2 * bins);
    for (int64_t f = 0; f < frames; ++f) {
      const float* s = spectrum_.data() + f * 2 * bins;
      for (int k = 0; k < bins; ++k) power_[f * bins + k] = s[k] * s[k] + s[bins + k] * s[bins + k];
    }
    // mel [n_mels, F] = filters [n_mels, bins] × powerᵀ [bins, F]
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, o.n_mels, static_cast<int>(frames), bins,
                1.0f, log_mel_.mel_filters().data(), bins, power_.data(), bins, 0.0f, out.data(),
                static_cast<int>(frames));
  }

 private:
  const LogMel& log_mel_;
  std::vector<float> dft_;
  std::vector<float> frames_;
  std::vector<float> spectrum_;
  std::vector<float> power_;
};

int Main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 30;
  const LogMel log_mel;
  std::mt19937 rng(1234);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<float> samples(30 * 16000);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i] =
        static_cast<float>(0.3 * std::sin(2 * std::numbers::pi * 220 * i / 16000.0)) + noise(rng);
  }
  std::vector<float> padded = samples;
  padded.resize(padded.size() + 160, 0.0f);
  const int64_t frames = log_mel.NumFrames(static_cast<int64_t>(samples.size()));

  const double compute_ms = MedianMs(iterations, [&] {
    const LogMel::Features f = log_mel.Compute(samples);
    if (f.n_frames != frames) std::abort();
  });
  std::vector<float> mel(80 * frames);
  const double mel_power_ms = MedianMs(iterations, [&] {
    if (!log_mel.MelPower(padded, 0, frames, absl::MakeSpan(mel), frames).ok()) std::abort();
  });
  std::vector<float> scratch = mel;
  const double normalize_ms = MedianMs(iterations, [&] {
    scratch = mel;
    LogMel::Normalize(absl::MakeSpan(scratch));
  });
  SgemmMelPower sgemm(log_mel);
  std::vector<float> sgemm_out;
  const double sgemm_default_ms = MedianMs(iterations, [&] { sgemm.Run(padded, sgemm_out); });
  openblas_set_num_threads(1);
  const double sgemm_single_ms = MedianMs(iterations, [&] { sgemm.Run(padded, sgemm_out); });

  std::printf("30 s of audio, %lld frames, median of %d runs:\n", static_cast<long long>(frames),
              iterations);
  std::printf("  LogMel::Compute (FFT path, whole front end)    %8.3f ms\n", compute_ms);
  std::printf("    of which mel power (window, FFT, filters)    %8.3f ms\n", mel_power_ms);
  std::printf("    of which log10 + normalisation               %8.3f ms\n", normalize_ms);
  std::printf("  mel power through DFT-matrix sgemm, %d threads  %8.3f ms\n",
              openblas_get_num_procs(), sgemm_default_ms);
  std::printf("  mel power through DFT-matrix sgemm, 1 thread   %8.3f ms\n", sgemm_single_ms);

  // A stream's utterance as the scheduler prepares it: a window every 500 ms of audio (each
  // partial) up to the utterance's length, from scratch (Compute, then the transpose to
  // time-major) against GrowingLogMel, which keeps the frames from one partial to the next.
  std::printf("windows of a growing utterance, one every 500 ms of audio (all of them, median "
              "of %d runs):\n", iterations);
  for (const int seconds : {3, 10, 30}) {
    const int64_t step = 8000, total = int64_t{16000} * seconds;
    std::vector<float> window;
    const double scratch_ms = MedianMs(iterations, [&] {
      for (int64_t n = step; n <= total; n += step) {
        const LogMel::Features f =
            log_mel.Compute(absl::Span<const float>(samples.data(), static_cast<size_t>(n)));
        const int64_t keep = std::min<int64_t>(3000, f.n_frames - 1);
        window.resize(static_cast<size_t>(keep) * 80);
        TransposeTiled(f.data.data(), 80, keep, f.n_frames, window.data(), 80);
      }
    });
    const double growing_ms = MedianMs(iterations, [&] {
      GrowingLogMel growing;
      for (int64_t n = step; n <= total; n += step) {
        const int64_t keep = std::min<int64_t>(3000, log_mel.NumFrames(n) - 1);
        if (!growing
                 .TimeMajor(log_mel, 1, absl::Span<const float>(samples.data(), static_cast<size_t>(n)),
                            keep, &window)
                 .ok()) {
          std::abort();
        }
      }
    });
    std::printf("  %2d s utterance, %3lld windows: from scratch %8.3f ms, growing %8.3f ms (%.1fx)\n",
                seconds, static_cast<long long>(total / step), scratch_ms, growing_ms,
                scratch_ms / growing_ms);
  }
  return 0;
}

}  // namespace
}  // namespace waav::frontend

int main(int argc, char** argv) { return waav::frontend::Main(argc, argv); }

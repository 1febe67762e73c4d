// Power spectra of many real frames at once, for the log-mel front end.
//
// The transform runs on kLanes frames side by side: every arithmetic operation acts on one SIMD
// vector holding the same sample of kLanes different frames, so the FFT code itself is plain
// scalar-looking code with no shuffles, and it vectorises fully for any size. A real transform
// of even size n is done as a complex transform of size n/2 (even samples as the real part, odd
// samples as the imaginary part) followed by the usual split step. The complex transform is a
// Stockham auto-sort FFT with radix 4, 2, 3 and 5 butterflies and a generic one for any other
// prime factor, so Whisper's n = 400 (200 = 4·2·5·5) needs no padding to a power of two.
// Twiddle factors are computed in double and rounded once to float.
#pragma once

#include <cstdint>
#include <vector>

namespace waav::frontend {

class BatchedRealFft {
 public:
  // Frames transformed together; one AVX register of floats.
  static constexpr int kLanes = 8;

  // Largest prime factor of n/2 the generic butterfly accepts (it keeps radix-many vectors on
  // the stack). Every FFT size in practical use (400, 512, 480, 320, ...) is far below.
  static constexpr int kMaxRadix = 61;

  // `n` (the real transform size) must be even, at least 2, and n/2 must have no prime factor
  // above kMaxRadix; SupportsSize() tells, LogMelOptions::Validate checks.
  explicit BatchedRealFft(int n);
  static bool SupportsSize(int n);

  int size() const { return n_; }
  // Number of power-spectrum bins: n/2 + 1 (DC to Nyquist).
  int num_bins() const { return n_ / 2 + 1; }
  // Floats of scratch space that Power() needs.
  int64_t scratch_floats() const { return int64_t{4} * (n_ / 2) * kLanes; }

  // Power spectra |X_k|^2 of kLanes real frames.
  //   in:      n * kLanes floats; sample t of frame l at in[t * kLanes + l].
  //   scratch: scratch_floats() floats; contents are clobbered.
  //   out:     num_bins() * kLanes floats; |X_k|^2 of frame l at out[k * kLanes + l].
  // No alignment is required. Thread-safe with a scratch per thread: the plan is read-only.
  void Power(const float* in, float* scratch, float* out) const;

 private:
  // One pass of the Stockham FFT: `radix`-point butterflies over sub-transforms of length
  // `length`, with `stride` interleaved transforms (stride * length = n/2).
  struct Stage {
    int radix = 0;
    int length = 0;
    int stride = 0;
    // w^(q*r) for q in [0, length/radix), r in [1, radix): index q * (radix - 1) + r - 1.
    std::vector<float> twiddle_re;
    std::vector<float> twiddle_im;
    // exp(-2πi j/radix) for j in [0, radix): only for the generic butterfly (radix > 5).
    std::vector<float> root_re;
    std::vector<float> root_im;
  };

  int n_ = 0;
  std::vector<Stage> stages_;
  // exp(-2πi k/n) for k in [0, n/2]: the split step from the half-size complex transform.
  std::vector<float> split_re_;
  std::vector<float> split_im_;
};

}  // namespace waav::frontend

#include "engine/frontend/real_fft.h"

#include <cmath>
#include <numbers>

#include "engine/frontend/simd.h"

namespace waav::frontend {
namespace {

using simd::Load;
using simd::Store;
using simd::V;
constexpr int kLanes = BatchedRealFft::kLanes;
static_assert(kLanes == simd::kLanes);

struct Complex {
  V re;
  V im;
};
inline Complex operator+(Complex a, Complex b) { return {a.re + b.re, a.im + b.im}; }
inline Complex operator-(Complex a, Complex b) { return {a.re - b.re, a.im - b.im}; }
inline Complex Scale(Complex a, float s) { return {a.re * s, a.im * s}; }
// -i·a and +i·a.
inline Complex MulMinusI(Complex a) { return {a.im, -a.re}; }
inline Complex MulPlusI(Complex a) { return {-a.im, a.re}; }
inline Complex MulScalar(Complex a, float wr, float wi) {
  return {a.re * wr - a.im * wi, a.re * wi + a.im * wr};
}

// A strided view of complex vectors stored as separate re and im float arrays.
struct View {
  const float* re;
  const float* im;
  int64_t stride;  // floats between consecutive elements
  Complex operator[](int64_t e) const { return {Load(re + e * stride), Load(im + e * stride)}; }
};
struct MutableView {
  float* re;
  float* im;
  int64_t stride;
  void Put(int64_t e, Complex c) const {
    Store(re + e * stride, c.re);
    Store(im + e * stride, c.im);
  }
};

// y_r = sum_j x_j exp(-2πi jr/P), for P in {2, 3, 4, 5}; the constants are the exact sines and
// cosines of multiples of 2π/P.
template <int P>
inline void Butterfly(const Complex* x, Complex* y) {
  if constexpr (P == 2) {
    y[0] = x[0] + x[1];
    y[1] = x[0] - x[1];
  } else if constexpr (P == 3) {
    constexpr float kSin = 0.866025403784438646763723170752936183f;  // sin(2π/3)
    const Complex a = x[1] + x[2];
    const Complex b = x[1] - x[2];
    y[0] = x[0] + a;
    const Complex t = x[0] - Scale(a, 0.5f);
    const Complex u = Scale(b, kSin);
    y[1] = t + MulMinusI(u);
    y[2] = t + MulPlusI(u);
  } else if constexpr (P == 4) {
    const Complex t0 = x[0] + x[2];
    const Complex t1 = x[0] - x[2];
    const Complex t2 = x[1] + x[3];
    const Complex t3 = x[1] - x[3];
    y[0] = t0 + t2;
    y[2] = t0 - t2;
    y[1] = t1 + MulMinusI(t3);
    y[3] = t1 + MulPlusI(t3);
  } else if constexpr (P == 5) {
    constexpr float kC1 = 0.309016994374947424102293417182819059f;   // cos(2π/5)
    constexpr float kC2 = -0.809016994374947424102293417182819059f;  // cos(4π/5)
    constexpr float kS1 = 0.951056516295153572116439333379382143f;   // sin(2π/5)
    constexpr float kS2 = 0.587785252292473129168705954639072769f;   // sin(4π/5)
    const Complex a = x[1] + x[4];
    const Complex b = x[1] - x[4];
    const Complex c = x[2] + x[3];
    const Complex d = x[2] - x[3];
    y[0] = x[0] + a + c;
    const Complex t1 = x[0] + Scale(a, kC1) + Scale(c, kC2);
    const Complex t2 = x[0] + Scale(a, kC2) + Scale(c, kC1);
    const Complex u1 = Scale(b, kS1) + Scale(d, kS2);
    const Complex u2 = Scale(b, kS2) - Scale(d, kS1);
    y[1] = t1 + MulMinusI(u1);
    y[4] = t1 + MulPlusI(u1);
    y[2] = t2 + MulMinusI(u2);
    y[3] = t2 + MulPlusI(u2);
  }
}

// One Stockham pass (P = 0: generic radix, O(radix²) per butterfly). With m = length / radix:
//   y[k + s(radix·q + r)] = w^(q·r) · sum_j x[k + s(q + m·j)] · exp(-2πi jr/radix),
// w = exp(-2πi/length), for q in [0, m), k in [0, s). The output comes out in natural order
// after the last pass, with no bit reversal.
template <int P, typename Stage>
void RunStage(const Stage& stage, const View& x, const MutableView& y) {
  const int p = P == 0 ? stage.radix : P;
  const int m = stage.length / p;
  const int s = stage.stride;
  Complex in[BatchedRealFft::kMaxRadix];
  Complex out[BatchedRealFft::kMaxRadix];
  for (int q = 0; q < m; ++q) {
    const float* w_re = stage.twiddle_re.data() + static_cast<size_t>(q) * (p - 1);
    const float* w_im = stage.twiddle_im.data() + static_cast<size_t>(q) * (p - 1);
    for (int k = 0; k < s; ++k) {
      for (int j = 0; j < p; ++j) in[j] = x[k + static_cast<int64_t>(s) * (q + m * j)];
      if constexpr (P != 0) {
        Butterfly<P>(in, out);
      } else {
        for (int r = 0; r < p; ++r) {
          Complex sum = in[0];
          for (int j = 1; j < p; ++j) {
            const int e = (j * r) % p;
            sum = sum + MulScalar(in[j], stage.root_re[e], stage.root_im[e]);
          }
          out[r] = sum;
        }
      }
      const int64_t base = k + static_cast<int64_t>(s) * p * q;
      y.Put(base, out[0]);
      for (int r = 1; r < p; ++r) {
        y.Put(base + static_cast<int64_t>(s) * r,
              q == 0 ? out[r] : MulScalar(out[r], w_re[r - 1], w_im[r - 1]));
      }
    }
  }
}

// Radices in the order the passes use them: 4s first (fewest passes), then 2, 3, 5, others.
std::vector<int> Factorize(int n) {
  std::vector<int> factors;
  while (n % 4 == 0) {
    factors.push_back(4);
    n /= 4;
  }
  for (int p = 2; n > 1; ++p) {
    while (n % p == 0) {
      factors.push_back(p);
      n /= p;
    }
  }
  return factors;
}

}  // namespace

bool BatchedRealFft::SupportsSize(int n) {
  if (n < 2 || n % 2 != 0) return false;
  for (int f : Factorize(n / 2)) {
    if (f > kMaxRadix) return false;
  }
  return true;
}

BatchedRealFft::BatchedRealFft(int n) : n_(n) {
  const int half = n / 2;
  int length = half;
  int stride = 1;
  for (int radix : Factorize(half)) {
    Stage stage;
    stage.radix = radix;
    stage.length = length;
    stage.stride = stride;
    const int m = length / radix;
    for (int q = 0; q < m; ++q) {
      for (int r = 1; r < radix; ++r) {
        const double angle = -2.0 * std::numbers::pi * q * r / length;
        stage.twiddle_re.push_back(static_cast<float>(std::cos(angle)));
        stage.twiddle_im.push_back(static_cast<float>(std::sin(angle)));
      }
    }
    if (radix > 5) {
      for (int j = 0; j < radix; ++j) {
        const double angle = -2.0 * std::numbers::pi * j / radix;
        stage.root_re.push_back(static_cast<float>(std::cos(angle)));
        stage.root_im.push_back(static_cast<float>(std::sin(angle)));
      }
    }
    stages_.push_back(std::move(stage));
    length /= radix;
    stride *= radix;
  }
  for (int k = 0; k <= half; ++k) {
    const double angle = -2.0 * std::numbers::pi * k / n;
    split_re_.push_back(static_cast<float>(std::cos(angle)));
    split_im_.push_back(static_cast<float>(std::sin(angle)));
  }
}

void BatchedRealFft::Power(const float* in, float* scratch, float* out) const {
  const int half = n_ / 2;
  const int64_t plane = static_cast<int64_t>(half) * kLanes;
  // z[j] = x[2j] + i·x[2j+1], read in place from the interleaved input.
  View x{in, in + kLanes, 2 * kLanes};
  MutableView buffers[2] = {{scratch, scratch + plane, kLanes},
                            {scratch + 2 * plane, scratch + 3 * plane, kLanes}};
  int next = 0;
  for (const Stage& stage : stages_) {
    const MutableView& y = buffers[next];
    switch (stage.radix) {
      case 2:
        RunStage<2>(stage, x, y);
        break;
      case 3:
        RunStage<3>(stage, x, y);
        break;
      case 4:
        RunStage<4>(stage, x, y);
        break;
      case 5:
        RunStage<5>(stage, x, y);
        break;
      default:
        RunStage<0>(stage, x, y);
        break;
    }
    x = View{y.re, y.im, y.stride};
    next ^= 1;
  }

  // Split step: with Z the transform of z, the real transform is
  //   X_k = E_k + exp(-2πi k/n)·O_k,  E_k = (Z_k + conj Z_{h-k})/2,  O_k = -i(Z_k - conj Z_{h-k})/2
  // for k in [0, h] (indices mod h, h = n/2).
  for (int k = 0; k <= half; ++k) {
    const Complex zk = x[k % half];
    const Complex zc = x[(half - k) % half];
    const V e_re = (zk.re + zc.re) * 0.5f;
    const V e_im = (zk.im - zc.im) * 0.5f;
    const V o_re = (zk.im + zc.im) * 0.5f;
    const V o_im = (zc.re - zk.re) * 0.5f;
    const float w_re = split_re_[k];
    const float w_im = split_im_[k];
    const V x_re = e_re + o_re * w_re - o_im * w_im;
    const V x_im = e_im + o_re * w_im + o_im * w_re;
    Store(out + static_cast<int64_t>(k) * kLanes, x_re * x_re + x_im * x_im);
  }
}

}  // namespace waav::frontend

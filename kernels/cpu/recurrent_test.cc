// Tests of the CPU kernels added for Silero VAD (Activate, the ReLU/sigmoid epilogues of Linear
// and Conv1d, ComplexMagnitude, LstmCell) against naive double-precision references on fresh
// random inputs, plus in-place use, graph capture and argument validation.
//
// Tolerance: relative L2 error ‖out − ref‖ / ‖ref‖ <= 1e-5 (kKernelTolerance, with the fixture and
// comparisons in tests/support/kernel_test_util.h), as in cpu_backend_test.cc; sigmoid and
// tanh are also checked element by element on a dense sweep (relative error <= 1e-6).
// Outputs are poisoned with NaN before each call, so an element the kernel forgot fails.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/kernel_test_util.h"

namespace waav {
namespace {

using testing::Close;
using testing::CloseToScale;
using testing::GeluReference;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Relu(double x) { return x > 0 ? x : 0.0; }

std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

class RecurrentKernelTest : public testing::KernelTest {
 protected:
  void SetUp() override { backend_ = CreateCpuBackend({.num_threads = 2}); }
};

double Apply(Activation act, double x) {
  switch (act) {
    case Activation::kNone:
      return x;
    case Activation::kGelu:
      return GeluReference(x);
    case Activation::kRelu:
      return Relu(x);
    case Activation::kSigmoid:
      return Sigmoid(x);
  }
  return x;
}

std::string ActName(Activation act) {
  switch (act) {
    case Activation::kNone:
      return "none";
    case Activation::kGelu:
      return "gelu";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

constexpr Activation kAllActivations[] = {Activation::kNone, Activation::kGelu, Activation::kRelu,
                                          Activation::kSigmoid};

// ---- Activate -----------------------------------------------------------------------------------

TEST_F(RecurrentKernelTest, ActivateMatchesReference) {
  for (Activation act : kAllActivations) {
    for (int64_t n : {1, 7, 8, 384, 100003}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(absl::StrCat(ActName(act), " n=", n, in_place ? " in place" : ""));
        std::vector<float> x = Random(n, -12.0f, 12.0f);
        Tensor tx = F32({n}, x);
        Tensor ty = in_place ? tx : Poisoned({n});
        ASSERT_TRUE(backend_->Activate(tx, act, ty).ok());
        std::vector<double> ref(x.size());
        for (size_t i = 0; i < x.size(); ++i) ref[i] = Apply(act, x[i]);
        EXPECT_TRUE(Close(Read(ty), ref));
      }
    }
  }
}

// Element by element over a dense sweep: relative error <= 1e-6 wherever the result is a normal
// f32, and the special values.
TEST_F(RecurrentKernelTest, SigmoidIsAccurateEverywhere) {
  std::vector<float> x;
  for (float v = -100.0f; v <= 40.0f; v += 1.0f / 256) x.push_back(v);
  x.insert(x.end(), {kNaN, kInf, -kInf, 0.0f, -0.0f, 1e-30f});
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor ty = Poisoned({n});
  ASSERT_TRUE(backend_->Activate(F32({n}, x), Activation::kSigmoid, ty).ok());
  const std::vector<float> y = Read(ty);
  double worst = 0;
  for (int64_t i = 0; i + 6 < n; ++i) {
    const double want = Sigmoid(x[static_cast<size_t>(i)]);
    const double err = std::abs(y[static_cast<size_t>(i)] - want);
    if (want > std::numeric_limits<float>::min()) worst = std::max(worst, err / want);
    ASSERT_LE(err, 1e-6 * want + std::numeric_limits<float>::min())
        << "sigmoid(" << x[static_cast<size_t>(i)] << ") = " << y[static_cast<size_t>(i)];
  }
  std::cout << "worst relative error of sigmoid: " << worst << "\n";
  EXPECT_TRUE(std::isnan(y[static_cast<size_t>(n - 6)]));
  EXPECT_EQ(y[static_cast<size_t>(n - 5)], 1.0f);
  EXPECT_EQ(y[static_cast<size_t>(n - 4)], 0.0f);
  EXPECT_EQ(y[static_cast<size_t>(n - 3)], 0.5f);
  EXPECT_EQ(y[static_cast<size_t>(n - 2)], 0.5f);
  EXPECT_EQ(y[static_cast<size_t>(n - 1)], 0.5f);
}

TEST_F(RecurrentKernelTest, ReluKeepsNaNAndSpecials) {
  const std::vector<float> x = {kNaN, kInf, -kInf, -0.0f, 0.0f, -1e-30f, 1e-30f, 3.5f, -2.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor ty = Poisoned({n});
  ASSERT_TRUE(backend_->Activate(F32({n}, x), Activation::kRelu, ty).ok());
  const std::vector<float> y = Read(ty);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], kInf);
  for (size_t i : {2, 3, 4, 5, 8}) EXPECT_EQ(y[i], 0.0f) << i;
  EXPECT_EQ(y[6], 1e-30f);
  EXPECT_EQ(y[7], 3.5f);
}

// ---- Linear and Conv1d epilogues ---------------------------------------------------------------

TEST_F(RecurrentKernelTest, LinearEpiloguesMatchReference) {
  for (Activation act : {Activation::kRelu, Activation::kSigmoid}) {
    for (DType w_dtype : {DType::kF32, DType::kF16}) {
      for (int64_t m : {1, 5, 32, 33, 200}) {  // GEMV tiles up to 32 rows, sgemm beyond
        for (auto [k, n] : {std::pair<int64_t, int64_t>{128, 1}, {384, 7}, {256, 512}}) {
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(absl::StrCat(ActName(act), " w ", Name(w_dtype), " M=", m, " K=", k,
                                      " N=", n, with_bias ? " bias" : ""));
            std::vector<float> x = Random(m * k), w = Random(n * k, -0.2f, 0.2f), b = Random(n);
            Tensor tb = F32({n}, b), ty = Poisoned({m, n});
            ASSERT_TRUE(backend_
                            ->Linear(F32({m, k}, x), Weight({n, k}, w, w_dtype),
                                     with_bias ? &tb : nullptr, act, ty)
                            .ok());
            std::vector<double> ref(static_cast<size_t>(m * n)), scale(ref.size());
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double acc = with_bias ? b[static_cast<size_t>(j)] : 0.0;
                double terms = std::abs(acc);
                for (int64_t p = 0; p < k; ++p) {
                  const double term = static_cast<double>(x[static_cast<size_t>(i * k + p)]) *
                                      w[static_cast<size_t>(j * k + p)];
                  acc += term;
                  terms += std::abs(term);
                }
                ref[static_cast<size_t>(i * n + j)] = Apply(act, acc);
                scale[static_cast<size_t>(i * n + j)] = terms;
              }
            }
            EXPECT_TRUE(CloseToScale(Read(ty), ref, scale)) << "seed " << seed_;
          }
        }
      }
    }
  }
  // K = 0: y = act(bias).
  std::vector<float> b = {-1.0f, 0.5f, 2.0f};
  Tensor ty = Poisoned({2, 3}), tb = F32({3}, b);
  auto empty = backend_->Allocate({2, 0}, DType::kF32);
  auto w0 = backend_->Allocate({3, 0}, DType::kF32);
  ASSERT_TRUE(empty.ok() && w0.ok());
  ASSERT_TRUE(backend_->Linear(*empty, *w0, &tb, Activation::kSigmoid, ty).ok());
  std::vector<double> ref;
  for (int r = 0; r < 2; ++r)
    for (float v : b) ref.push_back(Sigmoid(v));
  EXPECT_TRUE(Close(Read(ty), ref));
}

TEST_F(RecurrentKernelTest, Conv1dEpiloguesMatchReference) {
  struct Case {
    int64_t batch, time, cin, cout, kernel;
    int stride, padding;
  };
  const Case cases[] = {
      {1, 640, 1, 258, 256, 128, 0},  // Silero's STFT as a convolution
      {3, 4, 129, 128, 3, 1, 1},      // Silero encoder layers
      {2, 4, 128, 64, 3, 2, 1},      {32, 2, 64, 64, 3, 2, 1},
      {5, 1, 64, 128, 3, 1, 1},      {2, 11, 5, 9, 4, 3, 2},
  };
  for (const Case& c : cases) {
    for (Activation act : {Activation::kRelu, Activation::kSigmoid}) {
      for (DType w_dtype : {DType::kF32, DType::kF16}) {
        SCOPED_TRACE(absl::StrCat("B=", c.batch, " T=", c.time, " Cin=", c.cin, " Cout=", c.cout,
                                  " K=", c.kernel, " stride=", c.stride, " pad=", c.padding, " ",
                                  ActName(act), " ", Name(w_dtype)));
        const int64_t t_out = (c.time + 2 * c.padding - c.kernel) / c.stride + 1;
        std::vector<float> x = Random(c.batch * c.time * c.cin);
        std::vector<float> w = Random(c.cout * c.cin * c.kernel, -0.3f, 0.3f);
        std::vector<float> b = Random(c.cout);
        Tensor ty = Poisoned({c.batch, t_out, c.cout});
        ASSERT_TRUE(backend_
                        ->Conv1d(F32({c.batch, c.time, c.cin}, x),
                                 Weight({c.cout, c.cin, c.kernel}, w, w_dtype), F32({c.cout}, b),
                                 c.stride, c.padding, act, ty)
                        .ok());
        std::vector<double> ref(static_cast<size_t>(c.batch * t_out * c.cout));
        for (int64_t bi = 0; bi < c.batch; ++bi) {
          for (int64_t t = 0; t < t_out; ++t) {
            for (int64_t o = 0; o < c.cout; ++o) {
              double acc = b[static_cast<size_t>(o)];
              for (int64_t i = 0; i < c.cin; ++i) {
                for (int64_t j = 0; j < c.kernel; ++j) {
                  const int64_t in_t = t * c.stride - c.padding + j;
                  if (in_t < 0 || in_t >= c.time) continue;
                  acc += static_cast<double>(
                             x[static_cast<size_t>((bi * c.time + in_t) * c.cin + i)]) *
                         w[static_cast<size_t>((o * c.cin + i) * c.kernel + j)];
                }
              }
              ref[static_cast<size_t>((bi * t_out + t) * c.cout + o)] = Apply(act, acc);
            }
          }
        }
        EXPECT_TRUE(Close(Read(ty), ref));
      }
    }
  }
}

// ---- ComplexMagnitude ---------------------------------------------------------------------------

TEST_F(RecurrentKernelTest, ComplexMagnitudeMatchesReference) {
  for (const Shape& shape : {Shape{1, 4, 258}, Shape{32, 4, 258}, Shape{3, 14}, Shape{2},
                             Shape{5, 2}, Shape{1000, 34}}) {
    SCOPED_TRACE(shape.ToString());
    const int64_t half = shape[-1] / 2;
    std::vector<float> x = Random(shape.numel(), -3.0f, 3.0f);
    std::vector<int64_t> out_dims = shape.dims();
    out_dims.back() = half;
    const Shape out_shape(out_dims);
    Tensor ty = Poisoned(out_shape);
    ASSERT_TRUE(backend_->ComplexMagnitude(F32(shape, x), ty).ok());
    std::vector<double> ref(static_cast<size_t>(out_shape.numel()));
    for (int64_t r = 0; r < out_shape.numel() / half; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        const double re = x[static_cast<size_t>(r * 2 * half + i)];
        const double im = x[static_cast<size_t>(r * 2 * half + half + i)];
        ref[static_cast<size_t>(r * half + i)] = std::sqrt(re * re + im * im);
      }
    }
    EXPECT_TRUE(Close(Read(ty), ref));
  }
  // Zero spectra (silence) give exact zeros, not NaN.
  Tensor ty = Poisoned({2, 3});
  ASSERT_TRUE(backend_->ComplexMagnitude(F32({2, 6}, std::vector<float>(12, 0.0f)), ty).ok());
  for (float v : Read(ty)) EXPECT_EQ(v, 0.0f);
}

// ---- LstmCell -----------------------------------------------------------------------------------

struct LstmReference {
  std::vector<double> h, c;
};

// PyTorch LSTMCell in double: gates = [x | h]·Wᵀ + bias, order i, f, g, o.
LstmReference ReferenceLstm(const std::vector<float>& x, const std::vector<float>& h,
                            const std::vector<float>& c, const std::vector<float>& w,
                            const std::vector<float>& bias, int64_t batch, int64_t input,
                            int64_t hidden) {
  LstmReference out{std::vector<double>(static_cast<size_t>(batch * hidden)),
                    std::vector<double>(static_cast<size_t>(batch * hidden))};
  const int64_t width = input + hidden;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> gates(static_cast<size_t>(4 * hidden));
    for (int64_t g = 0; g < 4 * hidden; ++g) {
      double acc = bias[static_cast<size_t>(g)];
      for (int64_t p = 0; p < width; ++p) {
        const double in = p < input ? x[static_cast<size_t>(b * input + p)]
                                    : h[static_cast<size_t>(b * hidden + p - input)];
        acc += in * w[static_cast<size_t>(g * width + p)];
      }
      gates[static_cast<size_t>(g)] = acc;
    }
    for (int64_t j = 0; j < hidden; ++j) {
      const double i = Sigmoid(gates[static_cast<size_t>(j)]);
      const double f = Sigmoid(gates[static_cast<size_t>(hidden + j)]);
      const double g = std::tanh(gates[static_cast<size_t>(2 * hidden + j)]);
      const double o = Sigmoid(gates[static_cast<size_t>(3 * hidden + j)]);
      const size_t k = static_cast<size_t>(b * hidden + j);
      out.c[k] = f * c[k] + i * g;
      out.h[k] = o * std::tanh(out.c[k]);
    }
  }
  return out;
}

TEST_F(RecurrentKernelTest, LstmCellMatchesReference) {
  struct Case {
    int64_t batch, input, hidden;
  };
  for (const Case& s : {Case{1, 128, 128}, Case{32, 128, 128}, Case{33, 128, 128}, Case{3, 5, 7},
                        Case{2, 1, 9}, Case{4, 64, 3}}) {
    for (DType w_dtype : {DType::kF32, DType::kF16}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(absl::StrCat("B=", s.batch, " I=", s.input, " H=", s.hidden, " ",
                                  Name(w_dtype), in_place ? " in place" : ""));
        const int64_t width = s.input + s.hidden;
        std::vector<float> w = Random(4 * s.hidden * width, -0.3f, 0.3f);
        std::vector<float> bias = Random(4 * s.hidden);
        std::vector<float> h = Random(s.batch * s.hidden), c = Random(s.batch * s.hidden, -2, 2);
        Tensor tw = Weight({4 * s.hidden, width}, w, w_dtype), tb = F32({4 * s.hidden}, bias);
        Tensor th = F32({s.batch, s.hidden}, h), tc = F32({s.batch, s.hidden}, c);
        // Several steps, feeding each step's state to the next, to check the state handling.
        for (int step = 0; step < 3; ++step) {
          SCOPED_TRACE(absl::StrCat("step ", step));
          std::vector<float> x = Random(s.batch * s.input, -2.0f, 2.0f);
          Tensor h_out = in_place ? th : Poisoned({s.batch, s.hidden});
          Tensor c_out = in_place ? tc : Poisoned({s.batch, s.hidden});
          ASSERT_TRUE(
              backend_->LstmCell(F32({s.batch, s.input}, x), th, tc, tw, tb, h_out, c_out).ok());
          const LstmReference ref = ReferenceLstm(x, h, c, w, bias, s.batch, s.input, s.hidden);
          const std::vector<float> got_h = Read(h_out), got_c = Read(c_out);
          EXPECT_TRUE(Close(got_h, ref.h)) << "h";
          EXPECT_TRUE(Close(got_c, ref.c)) << "c";
          // The next step starts from this step's f32 output, as the kernel's does.
          h = got_h;
          c = got_c;
          th = h_out;
          tc = c_out;
        }
      }
    }
  }
}

// tanh inside the cell, element by element on a dense sweep: with W = 0 except a 1 that routes
// x into the g gate, and biases that saturate the other gates (σ(30) and σ(−30) round to 1 and
// ~0 in f32), c_out = tanh(x) exactly as the kernel computes it, and h_out = tanh(c_out).
TEST_F(RecurrentKernelTest, LstmTanhIsAccurateEverywhere) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 1.0f / 1024) x.push_back(v);
  for (float v = 1e-6f; v < 0.5f; v *= 1.01f) {  // the small-|x| branch and its boundary
    x.push_back(v);
    x.push_back(-v);
  }
  // (±inf would make the other gates inf·0 = NaN, so the saturation is checked at ±1e30.)
  x.insert(x.end(), {0.25f, -0.25f, std::nextafter(0.25f, 0.0f), 0.0f, 1e30f, -1e30f, kNaN});
  const int64_t batch = static_cast<int64_t>(x.size());
  // weight [4, 2]: columns (x, h); only g takes x.
  const std::vector<float> w = {0, 0, 0, 0, 1, 0, 0, 0};
  const std::vector<float> bias = {30.0f, -30.0f, 0.0f, 30.0f};
  Tensor h_out = Poisoned({batch, 1}), c_out = Poisoned({batch, 1});
  Tensor zeros = F32({batch, 1}, std::vector<float>(static_cast<size_t>(batch), 0.0f));
  Tensor zeros_c = F32({batch, 1}, std::vector<float>(static_cast<size_t>(batch), 0.0f));
  ASSERT_TRUE(backend_
                  ->LstmCell(F32({batch, 1}, x), zeros, zeros_c, F32({4, 2}, w), F32({4}, bias),
                             h_out, c_out)
                  .ok());
  const std::vector<float> c = Read(c_out), h = Read(h_out);
  double worst = 0;
  for (int64_t i = 0; i + 3 < batch; ++i) {
    const double want = std::tanh(static_cast<double>(x[static_cast<size_t>(i)]));
    const double got = c[static_cast<size_t>(i)];
    const double err = want == 0 ? std::abs(got) : std::abs(got - want) / std::abs(want);
    worst = std::max(worst, err);
    ASSERT_LE(err, 1e-6) << "tanh(" << x[static_cast<size_t>(i)] << ") = " << got;
    const double want_h = std::tanh(got);
    ASSERT_LE(std::abs(h[static_cast<size_t>(i)] - want_h), 1e-6 * std::abs(want_h) + 1e-30);
  }
  std::cout << "worst relative error of tanh: " << worst << "\n";
  EXPECT_EQ(c[static_cast<size_t>(batch - 3)], 1.0f);
  EXPECT_EQ(c[static_cast<size_t>(batch - 2)], -1.0f);
  EXPECT_TRUE(std::isnan(c[static_cast<size_t>(batch - 1)]));
}

// A captured LSTM step (state updated in place) replayed N times equals N eager steps, and reads
// the input's current contents at each replay.
TEST_F(RecurrentKernelTest, CapturedLstmStepMatchesEager) {
  const int64_t batch = 4, input = 16, hidden = 8;
  std::vector<float> w = Random(4 * hidden * (input + hidden), -0.3f, 0.3f), b = Random(4 * hidden);
  Tensor tw = F32({4 * hidden, input + hidden}, w), tb = F32({4 * hidden}, b);
  const std::vector<float> zeros(static_cast<size_t>(batch * hidden), 0.0f);
  Tensor x_graph = F32({batch, input}, Random(batch * input));
  Tensor h_graph = F32({batch, hidden}, zeros), c_graph = F32({batch, hidden}, zeros);
  Tensor relu_graph = Poisoned({batch, hidden});
  Tensor h_eager = F32({batch, hidden}, zeros), c_eager = F32({batch, hidden}, zeros);
  Tensor relu_eager = Poisoned({batch, hidden});
  ASSERT_TRUE(backend_->BeginCapture().ok());
  ASSERT_TRUE(backend_->LstmCell(x_graph, h_graph, c_graph, tw, tb, h_graph, c_graph).ok());
  ASSERT_TRUE(backend_->Activate(h_graph, Activation::kRelu, relu_graph).ok());
  auto graph = backend_->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->num_nodes(), 2);
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    const std::vector<float> x = Random(batch * input, -2.0f, 2.0f);
    ASSERT_TRUE(backend_->CopyFromHost(x.data(), x.size() * sizeof(float), x_graph).ok());
    ASSERT_TRUE((*graph)->Replay().ok());
    ASSERT_TRUE(
        backend_->LstmCell(F32({batch, input}, x), h_eager, c_eager, tw, tb, h_eager, c_eager)
            .ok());
    ASSERT_TRUE(backend_->Activate(h_eager, Activation::kRelu, relu_eager).ok());
    EXPECT_EQ(Read(h_graph), Read(h_eager));
    EXPECT_EQ(Read(c_graph), Read(c_eager));
    EXPECT_EQ(Read(relu_graph), Read(relu_eager));
  }
}

// ---- Validation ---------------------------------------------------------------------------------

TEST_F(RecurrentKernelTest, KernelsRejectBadArguments) {
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Activation unknown = static_cast<Activation>(9);
  Tensor x = F32({3, 8}, Random(24)), w = F32({5, 8}, Random(40)), y = Poisoned({3, 5});
  // Activation values outside the enum.
  absl::Status s = backend_->Linear(x, w, nullptr, unknown, y);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("activation 9"), std::string::npos) << s;
  Tensor cx = F32({1, 10, 4}, Random(40)), cw = F32({6, 4, 3}, Random(72)),
         cb = F32({6}, Random(6));
  EXPECT_EQ(backend_->Conv1d(cx, cw, cb, 1, 1, unknown, Poisoned({1, 10, 6})).code(), kInvalid);
  EXPECT_EQ(backend_->Activate(x, unknown, Poisoned({3, 8})).code(), kInvalid);
  // Activate: shape, dtype, partial overlap.
  EXPECT_EQ(backend_->Activate(x, Activation::kRelu, Poisoned({24})).code(), kInvalid);
  auto ids = backend_->Allocate({3, 8}, DType::kI32);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(backend_->Activate(*ids, Activation::kRelu, *ids).code(), kInvalid);
  auto sliced = x.Slice(1, 3), shifted = x.Slice(0, 2);
  ASSERT_TRUE(sliced.ok() && shifted.ok());
  EXPECT_EQ(backend_->Activate(*sliced, Activation::kSigmoid, *shifted).code(), kInvalid);
  // ComplexMagnitude: odd last dim, wrong output shape, in place.
  s = backend_->ComplexMagnitude(F32({2, 7}, Random(14)), Poisoned({2, 3}));
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("even"), std::string::npos) << s;
  EXPECT_EQ(backend_->ComplexMagnitude(x, Poisoned({3, 8})).code(), kInvalid);
  EXPECT_EQ(backend_->ComplexMagnitude(x, Poisoned({3, 4, 1})).code(), kInvalid);
  Tensor spectrum = F32({2, 8}, Random(16));
  auto row = spectrum.Slice(0, 1);
  ASSERT_TRUE(row.ok());
  auto inside = row->Reshape({2, 4});  // the output would overwrite x
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(backend_->ComplexMagnitude(spectrum, *inside).code(), kInvalid);
  // LstmCell.
  const int64_t b = 2, in = 3, hid = 4;
  Tensor lx = F32({b, in}, Random(b * in)), lh = F32({b, hid}, Random(b * hid)),
         lc = F32({b, hid}, Random(b * hid)), lw = F32({4 * hid, in + hid}, Random(16 * 7)),
         lb = F32({4 * hid}, Random(16));
  Tensor ho = Poisoned({b, hid}), co = Poisoned({b, hid});
  s = backend_->LstmCell(lx, lh, lc, F32({4 * hid, in}, Random(16 * 3)), lb, ho, co);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_NE(s.message().find("weight_ih and weight_hh"), std::string::npos) << s;
  EXPECT_EQ(backend_->LstmCell(lx, lh, lc, lw, F32({hid}, Random(hid)), ho, co).code(), kInvalid);
  EXPECT_EQ(
      backend_->LstmCell(lx, lh, F32({b, hid + 1}, Random(b * (hid + 1))), lw, lb, ho, co).code(),
      kInvalid);
  EXPECT_EQ(
      backend_->LstmCell(lx, F32({b + 1, hid}, Random((b + 1) * hid)), lc, lw, lb, ho, co).code(),
      kInvalid);
  EXPECT_EQ(backend_->LstmCell(lx, lh, lc, lw, lb, Poisoned({b, hid + 1}), co).code(), kInvalid);
  EXPECT_EQ(backend_->LstmCell(lx, lh, lc, lw, lb, lc, co).code(), kInvalid);  // h_out is c
  EXPECT_EQ(backend_->LstmCell(lx, lh, lc, lw, lb, ho, ho).code(), kInvalid);  // h_out is c_out
  EXPECT_EQ(backend_->LstmCell(lx, lh, lc, lw, lb, ho, lh).code(), kInvalid);  // c_out is h
  EXPECT_EQ(backend_->LstmCell(lx, lh, lc, lw, lb, lx, co).code(), kInvalid);  // h_out is x
  EXPECT_EQ(backend_->LstmCell(*ids, lh, lc, lw, lb, ho, co).code(), kInvalid);
  EXPECT_EQ(backend_->LstmCell(F32({b, in, 1}, Random(b * in)), lh, lc, lw, lb, ho, co).code(),
            kInvalid);
  // Nothing was written by the failing calls; the same tensors then work.
  for (float v : Read(ho)) EXPECT_TRUE(std::isnan(v));
  for (float v : Read(co)) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(backend_->LstmCell(lx, lh, lc, lw, lb, ho, co).ok());
  for (float v : Read(co)) EXPECT_FALSE(std::isnan(v));
}

}  // namespace
}  // namespace waav

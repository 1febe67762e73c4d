#include "tests/support/random_whisper.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/dtype.h"

namespace waav::testing {
namespace {

class Writer {
 public:
  explicit Writer(uint32_t seed) : rng_(seed) {}

  void U8(uint8_t v) { bytes_.push_back(v); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void String(const std::string& s) {
    U16(static_cast<uint16_t>(s.size() + 1));
    Raw(s.data(), s.size());
    U8(0);
  }
  void Raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), c, c + n);
  }

  // An f16 variable of `shape` with values uniform in [center − spread, center + spread].
  void Tensor(const std::string& name, const std::vector<uint32_t>& shape, float center,
              float spread) {
    String(name);
    U8(static_cast<uint8_t>(shape.size()));
    size_t numel = 1;
    for (uint32_t d : shape) {
      U32(d);
      numel *= d;
    }
    U8(4);  // f16
    U32(static_cast<uint32_t>(numel * 2));
    std::uniform_real_distribution<float> dist(center - spread, center + spread);
    const size_t at = bytes_.size();
    bytes_.resize(at + numel * 2);
    for (size_t i = 0; i < numel; ++i) {
      const uint16_t h = FloatToHalf(dist(rng_));
      std::memcpy(bytes_.data() + at + 2 * i, &h, 2);
    }
    ++variables_;
  }
  void ScalarI32(const std::string& name, int32_t value) {
    String(name);
    U8(0);  // rank 0
    U8(3);  // i32
    U32(4);
    Raw(&value, 4);
    ++variables_;
  }

  std::vector<uint8_t>& bytes() { return bytes_; }
  uint32_t variables() const { return variables_; }

 private:
  std::mt19937 rng_;
  std::vector<uint8_t> bytes_;
  uint32_t variables_ = 0;
};

}  // namespace

bool WriteRandomWhisperModel(const std::string& dir, uint32_t seed, const RandomWhisperDims& dims) {
  const uint32_t d = static_cast<uint32_t>(dims.d_model), ff = 4 * d;
  Writer w(seed);
  auto norm = [&](const std::string& p) {
    w.Tensor(p + "/gamma", {d}, 1.0f, 0.1f);
    w.Tensor(p + "/beta", {d}, 0.0f, 0.1f);
  };
  auto linear = [&](const std::string& p, uint32_t out, uint32_t in) {
    w.Tensor(p + "/weight", {out, in}, 0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
    w.Tensor(p + "/bias", {out}, 0.0f, 0.05f);
  };
  auto self_attention = [&](const std::string& p) {
    norm(p + "/layer_norm");
    linear(p + "/linear_0", 3 * d, d);
    linear(p + "/linear_1", d, d);
  };
  auto ffn = [&](const std::string& p) {
    norm(p + "/layer_norm");
    linear(p + "/linear_0", ff, d);
    linear(p + "/linear_1", d, ff);
  };

  w.Tensor("encoder/conv1/weight", {d, static_cast<uint32_t>(dims.n_mels), 3}, 0.0f,
           1.0f / std::sqrt(3.0f * static_cast<float>(dims.n_mels)));
  w.Tensor("encoder/conv1/bias", {d}, 0.0f, 0.05f);
  w.Tensor("encoder/conv2/weight", {d, d, 3}, 0.0f, 1.0f / std::sqrt(3.0f * static_cast<float>(d)));
  w.Tensor("encoder/conv2/bias", {d}, 0.0f, 0.05f);
  w.Tensor("encoder/position_encodings/encodings", {static_cast<uint32_t>(dims.n_audio_ctx), d},
           0.0f, 0.5f);
  norm("encoder/layer_norm");
  for (int i = 0; i < dims.n_layers; ++i) {
    const std::string p = "encoder/layer_" + std::to_string(i);
    self_attention(p + "/self_attention");
    ffn(p + "/ffn");
  }
  w.Tensor("decoder/embeddings/weight", {static_cast<uint32_t>(dims.n_vocab), d}, 0.0f, 0.5f);
  w.Tensor("decoder/position_encodings/encodings", {static_cast<uint32_t>(dims.n_text_ctx), d},
           0.0f, 0.2f);
  norm("decoder/layer_norm");
  for (int i = 0; i < dims.n_layers; ++i) {
    const std::string p = "decoder/layer_" + std::to_string(i);
    self_attention(p + "/self_attention");
    norm(p + "/attention/layer_norm");
    linear(p + "/attention/linear_0", d, d);
    linear(p + "/attention/linear_1", 2 * d, d);
    linear(p + "/attention/linear_2", d, d);
    ffn(p + "/ffn");
  }
  w.ScalarI32("encoder/num_heads", dims.n_heads);
  w.ScalarI32("decoder/num_heads", dims.n_heads);

  Writer header(0);
  header.U32(6);
  header.String("WhisperSpec");
  header.U32(1);
  header.U32(w.variables());
  std::filesystem::create_directories(dir);
  std::ofstream out(std::filesystem::path(dir) / "model.bin", std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.bytes().data()),
            static_cast<std::streamsize>(header.bytes().size()));
  out.write(reinterpret_cast<const char*>(w.bytes().data()),
            static_cast<std::streamsize>(w.bytes().size()));
  const uint32_t aliases = 0;
  out.write(reinterpret_cast<const char*>(&aliases), 4);
  return static_cast<bool>(out);
}

std::string TempModelDir(const std::string& what, uint32_t seed) {
  return (std::filesystem::temp_directory_path() / ("waav_" + what + "_" + std::to_string(seed)))
      .string();
}

double RelativeL2Error(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = double{got[i]} - want[i];
    num += e * e;
    den += double{want[i]} * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace waav::testing

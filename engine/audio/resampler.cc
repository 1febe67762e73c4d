#include "engine/audio/resampler.h"

#include <soxr.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/status.h"

namespace waav::audio {
namespace {

absl::Status CheckRates(int from_hz, int to_hz) {
  if (from_hz <= 0 || to_hz <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resample from ", from_hz, " Hz to ", to_hz, " Hz: rates must be > 0"));
  }
  return absl::OkStatus();
}

soxr_quality_spec_t Quality() { return soxr_quality_spec(SOXR_HQ, 0); }

// One thread: resampling one request is short, and the server runs many requests in parallel.
soxr_runtime_spec_t Runtime() { return soxr_runtime_spec(1); }

// Output capacity for `in_samples` more input, with slack for soxr's rounding and held-back tail.
size_t OutputCapacity(size_t in_samples, int from_hz, int to_hz) {
  return static_cast<size_t>(static_cast<double>(in_samples) * to_hz / from_hz) + 1024;
}

absl::Status SoxrError(soxr_error_t error, absl::string_view what) {
  return absl::InternalError(absl::StrCat("soxr ", what, " failed: ", error));
}

}  // namespace

absl::StatusOr<std::vector<float>> Resample(absl::Span<const float> in, int from_hz, int to_hz) {
  RETURN_IF_ERROR(CheckRates(from_hz, to_hz));
  if (from_hz == to_hz || in.empty()) return std::vector<float>(in.begin(), in.end());
  std::vector<float> out(OutputCapacity(in.size(), from_hz, to_hz));
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = Quality();
  const soxr_runtime_spec_t runtime = Runtime();
  size_t in_done = 0;
  size_t out_done = 0;
  const soxr_error_t error =
      soxr_oneshot(from_hz, to_hz, /*num_channels=*/1, in.data(), in.size(), &in_done, out.data(),
                   out.size(), &out_done, &io, &quality, &runtime);
  if (error != nullptr) return SoxrError(error, "resampling");
  out.resize(out_done);
  return out;
}

absl::StatusOr<StreamingResampler> StreamingResampler::Create(int from_hz, int to_hz) {
  RETURN_IF_ERROR(CheckRates(from_hz, to_hz));
  if (from_hz == to_hz) return StreamingResampler(from_hz, to_hz, nullptr);
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = Quality();
  const soxr_runtime_spec_t runtime = Runtime();
  soxr_error_t error = nullptr;
  soxr_t handle = soxr_create(from_hz, to_hz, /*num_channels=*/1, &error, &io, &quality, &runtime);
  if (error != nullptr || handle == nullptr) {
    soxr_delete(handle);
    return SoxrError(error != nullptr ? error : "no handle", "create");
  }
  return StreamingResampler(from_hz, to_hz, handle);
}

StreamingResampler::StreamingResampler(StreamingResampler&& other) noexcept
    : from_hz_(other.from_hz_), to_hz_(other.to_hz_), soxr_(std::exchange(other.soxr_, nullptr)) {}

StreamingResampler& StreamingResampler::operator=(StreamingResampler&& other) noexcept {
  if (this != &other) {
    soxr_delete(soxr_);
    from_hz_ = other.from_hz_;
    to_hz_ = other.to_hz_;
    soxr_ = std::exchange(other.soxr_, nullptr);
  }
  return *this;
}

StreamingResampler::~StreamingResampler() { soxr_delete(soxr_); }

absl::StatusOr<std::vector<float>> StreamingResampler::Process(absl::Span<const float> in) {
  if (soxr_ == nullptr) return std::vector<float>(in.begin(), in.end());
  std::vector<float> out;
  size_t consumed = 0;
  // soxr may stop early when the output buffer fills; go on until it has taken all the input
  // and left room to spare.
  while (true) {
    const size_t capacity = OutputCapacity(in.size() - consumed, from_hz_, to_hz_);
    const size_t old_size = out.size();
    out.resize(old_size + capacity);
    size_t in_done = 0;
    size_t out_done = 0;
    const soxr_error_t error = soxr_process(soxr_, in.data() + consumed, in.size() - consumed,
                                            &in_done, out.data() + old_size, capacity, &out_done);
    if (error != nullptr) return SoxrError(error, "processing");
    out.resize(old_size + out_done);
    consumed += in_done;
    if (consumed == in.size() && out_done < capacity) break;
  }
  return out;
}

absl::StatusOr<std::vector<float>> StreamingResampler::Flush() {
  if (soxr_ == nullptr) return std::vector<float>();
  std::vector<float> out;
  constexpr size_t kChunk = 4096;
  while (true) {
    const size_t old_size = out.size();
    out.resize(old_size + kChunk);
    size_t in_done = 0;
    size_t out_done = 0;
    // A null input tells soxr the signal has ended, so it drains its filter.
    const soxr_error_t error =
        soxr_process(soxr_, nullptr, 0, &in_done, out.data() + old_size, kChunk, &out_done);
    if (error != nullptr) return SoxrError(error, "flushing");
    out.resize(old_size + out_done);
    if (out_done == 0) break;
  }
  const soxr_error_t error = soxr_clear(soxr_);
  if (error != nullptr) return SoxrError(error, "reset");
  return out;
}

absl::StatusOr<Audio> LoadAudio16k(const std::string& path) {
  ASSIGN_OR_RETURN(Audio audio, ReadWavFile(path));
  if (audio.sample_rate_hz == kWhisperSampleRateHz) return audio;
  ASSIGN_OR_RETURN(audio.samples,
                   Resample(audio.samples, audio.sample_rate_hz, kWhisperSampleRateHz));
  audio.sample_rate_hz = kWhisperSampleRateHz;
  return audio;
}

}  // namespace waav::audio

// Test helpers for StreamDecoder: feeding a stream in random pieces, comparing signals, and
// mutating encoded bytes for robustness tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/audio/stream_decoder.h"
#include "engine/runtime/status.h"

namespace waav::audio::codec_test {

using Bytes = std::vector<uint8_t>;

// A fresh seed per run; tests print it with SCOPED_TRACE so that a failure can be replayed.
inline uint32_t FreshSeed() { return std::random_device{}(); }

// Size of the next piece: empty, tiny (1..3 bytes: splits samples and headers) or up to
// `max_piece` bytes.
inline size_t RandomPieceSize(std::mt19937& rng, size_t max_piece) {
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  if (kind == 0) return 0;
  if (kind <= 3) return std::uniform_int_distribution<size_t>(1, 3)(rng);
  return std::uniform_int_distribution<size_t>(1, max_piece)(rng);
}

// Feeds `bytes` to `decoder` in random pieces, appending the output to `out`; then Finish().
inline absl::Status FeedInRandomPieces(StreamDecoder& decoder, absl::Span<const uint8_t> bytes,
                                       std::mt19937& rng, std::vector<float>* out,
                                       size_t max_piece = 5000, bool finish = true) {
  while (!bytes.empty()) {
    const size_t n = std::min(RandomPieceSize(rng, max_piece), bytes.size());
    RETURN_IF_ERROR(decoder.Feed(bytes.subspan(0, n), out));
    bytes.remove_prefix(n);
  }
  if (finish) RETURN_IF_ERROR(decoder.Finish(out));
  return absl::OkStatus();
}

// Creates a decoder and decodes all of `bytes` in random pieces.
inline absl::StatusOr<std::vector<float>> DecodeAll(const AudioFormatSpec& format,
                                                    const StreamDecoderOptions& options,
                                                    absl::Span<const uint8_t> bytes,
                                                    std::mt19937& rng, size_t max_piece = 5000) {
  ASSIGN_OR_RETURN(std::unique_ptr<StreamDecoder> decoder, StreamDecoder::Create(format, options));
  std::vector<float> out;
  RETURN_IF_ERROR(FeedInRandomPieces(*decoder, bytes, rng, &out, max_piece));
  return out;
}

inline StreamDecoderOptions NativeRate() {
  StreamDecoderOptions options;
  options.output_sample_rate_hz = 0;
  return options;
}

// Signal-to-noise ratio of `actual` against `reference` in dB, over their common length.
inline double SnrDb(absl::Span<const float> reference, absl::Span<const float> actual) {
  const size_t n = std::min(reference.size(), actual.size());
  double signal = 0, noise = 0;
  for (size_t i = 0; i < n; ++i) {
    signal += double{reference[i]} * reference[i];
    const double d = double{actual[i]} - reference[i];
    noise += d * d;
  }
  return 10 * std::log10(signal / std::max(noise, 1e-30));
}

inline double MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  }
  return worst;
}

// A random corruption of a valid stream: flipped bytes, a truncation, inserted junk, a
// duplicated or deleted range. Meant to be decoded without crashing, not to fail in one way.
inline Bytes Mutate(const Bytes& good, std::mt19937& rng) {
  Bytes b = good;
  const int edits = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int e = 0; e < edits && !b.empty(); ++e) {
    std::uniform_int_distribution<size_t> pos(0, b.size() - 1);
    switch (std::uniform_int_distribution<int>(0, 4)(rng)) {
      case 0:  // flip bits of a few bytes
        for (int i = 0; i < 3; ++i) {
          b[pos(rng)] ^= static_cast<uint8_t>(std::uniform_int_distribution<int>(1, 255)(rng));
        }
        break;
      case 1:  // truncate
        b.resize(pos(rng));
        break;
      case 2: {  // insert junk
        const size_t at = pos(rng);
        Bytes junk(std::uniform_int_distribution<size_t>(1, 64)(rng));
        for (uint8_t& x : junk) x = static_cast<uint8_t>(rng());
        b.insert(b.begin() + static_cast<ptrdiff_t>(at), junk.begin(), junk.end());
        break;
      }
      case 3: {  // duplicate a range
        const size_t at = pos(rng);
        const size_t len = std::min<size_t>(b.size() - at, 1 + rng() % 2000);
        Bytes copy(b.begin() + static_cast<ptrdiff_t>(at),
                   b.begin() + static_cast<ptrdiff_t>(at + len));
        b.insert(b.begin() + static_cast<ptrdiff_t>(pos(rng)), copy.begin(), copy.end());
        break;
      }
      default: {  // delete a range
        const size_t at = pos(rng);
        const size_t len = std::min<size_t>(b.size() - at, 1 + rng() % 2000);
        b.erase(b.begin() + static_cast<ptrdiff_t>(at),
                b.begin() + static_cast<ptrdiff_t>(at + len));
        break;
      }
    }
  }
  return b;
}

}  // namespace waav::audio::codec_test

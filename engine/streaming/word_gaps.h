// Word gaps: the short drops in level between words inside speech.
//
// An interim result decoded on a fixed cadence cuts the audio wherever the clock says, often
// inside a word: Whisper then leaves the word out (or guesses it), and the word waits for the
// next interim, up to the whole interval later. Between most words of connected speech the level
// drops for a few tens of milliseconds (a stop's closure, the breath between phrases); a decode
// started right after such a drop holds the word that just ended. The detector looks at the
// level of 8 ms pieces of each VAD frame: a frame starts a gap when one of its pieces is
// `drop_db` below the loudest piece of the last 0.6 s, and the level has risen back to within
// `kRearmDb` of that peak since the previous gap (so a long quiet stretch is one gap, not many).
// The VAD's own silence (a pause) is the endpointer's business; this only sees the shorter dips
// the VAD calls speech. Cost: a sum of squares per sample and a max over 75 levels per frame.
#pragma once

#include <array>
#include <cstddef>

#include "absl/types/span.h"

namespace waav::streaming {

class WordGapDetector {
 public:
  static constexpr int kPieceSamples = 128;  // 8 ms at 16 kHz
  static constexpr int kPeakPieces = 75;     // the peak is over the last 0.6 s
  static constexpr float kRearmDb = 6.0f;    // a new gap needs the level back within this of it
  static constexpr float kFloorDb = -70.0f;  // a piece's level never counts below this (dBFS)

  // `drop_db` > 0: how far below the recent peak a piece must fall to start a gap.
  explicit WordGapDetector(float drop_db) : drop_db_(drop_db) { levels_.fill(kFloorDb); }

  // Feeds one frame of samples (any length; a trailing part shorter than a piece is ignored).
  // Returns true when the frame starts a gap.
  bool Push(absl::Span<const float> frame);

 private:
  float drop_db_;
  std::array<float, kPeakPieces> levels_{};  // the latest pieces' levels, a ring
  size_t next_ = 0;
  bool armed_ = false;
};

}  // namespace waav::streaming

#include "engine/streaming/word_gaps.h"

#include <algorithm>
#include <cmath>

namespace waav::streaming {

bool WordGapDetector::Push(absl::Span<const float> frame) {
  bool gap = false;
  for (size_t start = 0; start + kPieceSamples <= frame.size(); start += kPieceSamples) {
    double energy = 0;
    for (size_t i = start; i < start + kPieceSamples; ++i) {
      energy += static_cast<double>(frame[i]) * frame[i];
    }
    const float level =
        std::max(kFloorDb, static_cast<float>(10.0 * std::log10(energy / kPieceSamples + 1e-12)));
    levels_[next_] = level;
    next_ = (next_ + 1) % levels_.size();
    const float peak = *std::max_element(levels_.begin(), levels_.end());
    if (level >= peak - kRearmDb) {
      armed_ = true;
    } else if (armed_ && level <= peak - drop_db_) {
      armed_ = false;
      gap = true;
    }
  }
  return gap;
}

}  // namespace waav::streaming

// Backend::HeadScores' work item, apart from backend.h so that the GPU kernels' sources (which
// do not see Abseil) take the same records.
#pragma once

#include <cstdint>

namespace waav {

// One block of Backend::HeadScores: the `queries` first queries of batch row `row` against its
// `keys` first keys, in head `head`, written row-major ([queries, keys]) from element `offset`
// of out.
struct HeadScoresItem {
  int64_t row = 0, head = 0, queries = 0, keys = 0, offset = 0;
};

}  // namespace waav

// Percentiles and summaries of latency samples, as waav-load reports them.
#pragma once

#include <cstddef>
#include <vector>

namespace waav::load {

// The p-th percentile (0 <= p <= 100) of `sorted` (ascending, not empty), interpolating linearly
// between the two nearest ranks: rank = p / 100 * (n - 1). This is numpy's default ("linear",
// Hyndman & Fan type 7): p0 is the minimum, p100 the maximum, p50 of an even count the mean of
// the middle two.
double Percentile(const std::vector<double>& sorted, double p);

struct Summary {
  size_t count = 0;  // 0: no samples; the other fields are then 0 and mean nothing
  double min = 0;
  double max = 0;
  double mean = 0;
  double p50 = 0;
  double p95 = 0;
  double p99 = 0;
};

// Summary of `samples` (any order; taken by value and sorted).
Summary Summarize(std::vector<double> samples);

}  // namespace waav::load

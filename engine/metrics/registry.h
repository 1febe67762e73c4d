// A small Prometheus-style metrics registry: counters, gauges and histograms grouped in labelled
// families, serialised in the text exposition format 0.0.4. There is no HTTP here: the engine
// owns the registry and the server's admin endpoint only calls Registry::Serialize().
//
// Threading and cost: registering a family and creating a child series lock a mutex and
// allocate; updating a child (Counter::Inc, Gauge::Set, Histogram::Observe) is lock-free and
// allocation-free. So create each child once, keep the pointer, and update it on the hot path.
// Families and children live exactly as long as the Registry that made them; their addresses
// never change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace waav::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge" or "histogram", as written on a # TYPE line.
absl::string_view MetricTypeName(MetricType type);

// What a family is: registering the same spec twice returns the first family.
struct MetricSpec {
  std::string name;                      // [a-zA-Z_:][a-zA-Z0-9_:]*, units in the name
  std::string help;                      // free text, escaped on output
  std::vector<std::string> label_names;  // [a-zA-Z_][a-zA-Z0-9_]*, unique, no "__" prefix
};

// One label of a child series, e.g. {"stage", "stt"}.
struct Label {
  absl::string_view name;
  absl::string_view value;
};

// Histograms take at most this many finite bucket bounds (+Inf is implicit).
inline constexpr size_t kMaxBucketBounds = 64;

// A monotonically increasing value. Integer increments take one atomic add; fractional ones
// (Add) a compare-and-swap loop on a separate double, so Inc stays cheap under contention.
class alignas(64) Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc() { whole_.fetch_add(1, std::memory_order_relaxed); }
  void IncBy(uint64_t n) { whole_.fetch_add(n, std::memory_order_relaxed); }
  // Adds `v` when it is finite and >= 0; anything else (negative, NaN, inf) is ignored,
  // because a counter that goes down or becomes NaN breaks rate() for the rest of its life.
  void Add(double v);
  double Value() const;

 private:
  std::atomic<uint64_t> whole_{0};
  std::atomic<uint64_t> fraction_bits_{0};  // a double, bit-cast
};

// A value that goes up and down. Set is a store; Add/Inc/Dec are compare-and-swap loops.
// NaN and infinities are stored and exported as they are ("NaN", "+Inf").
class alignas(64) Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v);
  void Add(double v);
  void Inc() { Add(1.0); }
  void Dec() { Add(-1.0); }
  double Value() const;

 private:
  std::atomic<uint64_t> bits_{0};  // a double, bit-cast; 0 bits == +0.0
};

// Counts observations into fixed buckets chosen when its family is registered.
//
// Bucket i counts values v with bounds[i-1] < v <= bounds[i] (a value exactly on a bound goes
// in that bound's bucket, matching Prometheus' inclusive `le`); the last, implicit bucket is
// +Inf. Non-finite values, documented because latency code can produce them by accident:
//   NaN  is dropped (not counted, not summed): one NaN would make _sum NaN forever.
//   +Inf is counted in the +Inf bucket and makes _sum +Inf, as the Go client does.
//   -Inf is counted in the first bucket and makes _sum -Inf (or NaN together with +Inf).
class alignas(64) Histogram {
 public:
  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };

  // `bounds` must outlive the histogram (its family owns them), finite, strictly increasing.
  explicit Histogram(absl::Span<const double> bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);
  // Reads the counters one by one (allocates; for scrapes and tests). Concurrent observations
  // may land between reads, but cumulative counts are always non-decreasing and the +Inf
  // bucket always equals `count`; `sum` may be a few observations ahead or behind.
  Snapshot Read() const;
  absl::Span<const double> bounds() const { return bounds_; }

 private:
  absl::Span<const double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<uint64_t> sum_bits_{0};                // a double, bit-cast
};

// The part of a family that does not depend on the child type.
class FamilyBase {
 public:
  FamilyBase(MetricType type, MetricSpec spec);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  MetricType type() const { return type_; }
  const MetricSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }

  // Appends # HELP, # TYPE and one line per sample; nothing when the family has no child yet.
  virtual void AppendTo(std::string* out) const = 0;

 protected:
  // Orders `labels` as spec().label_names; fails unless they are exactly those names.
  absl::StatusOr<std::vector<std::string>> ValuesFromLabels(absl::Span<const Label> labels) const;
  absl::StatusOr<std::vector<std::string>> ValuesFromPositional(
      absl::Span<const absl::string_view> values) const;
  // `stage="stt",kind="a\"b"`: the escaped label block shared by all lines of a child.
  std::string LabelText(const std::vector<std::string>& values) const;
  void AppendHeader(std::string* out) const;

 private:
  MetricType type_;
  MetricSpec spec_;
};

// A named metric with a fixed set of label names and one child series per label-value tuple.
template <typename T>
class Family final : public FamilyBase {
 public:
  // `bucket_bounds` is for histograms only (validated by the registry).
  Family(MetricType type, MetricSpec spec, std::vector<double> bucket_bounds);

  // The child with these labels, created on first use. Give every label name of the family
  // exactly once, in any order: family->WithLabels({{"stage", "stt"}}).
  absl::StatusOr<T*> WithLabels(absl::Span<const Label> labels);
  // Label values in the order of spec().label_names: family->WithLabelValues({"stt"}).
  absl::StatusOr<T*> WithLabelValues(absl::Span<const absl::string_view> values);

  const std::vector<double>& bucket_bounds() const { return bucket_bounds_; }
  void AppendTo(std::string* out) const override;

 private:
  struct Child {
    std::string label_text;
    std::unique_ptr<T> metric;
  };
  T* GetOrCreate(std::vector<std::string> values);
  void AppendChild(const Child& child, std::string* out) const;

  const std::vector<double> bucket_bounds_;
  mutable absl::Mutex mu_;
  // Ordered by label values, so the exposition is sorted and stable.
  std::map<std::vector<std::string>, Child> children_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registration fails with InvalidArgument for a bad name, label name or bucket list, and with
  // AlreadyExists when the name is taken by a different definition (type, help, labels or
  // buckets) or when the series it writes (name, or name_bucket/_sum/_count for histograms)
  // collide with another family's. The same definition again returns the existing family.
  // A family without labels gets its single child at once, so it is exported as 0.
  absl::StatusOr<CounterFamily*> AddCounter(const MetricSpec& spec);
  absl::StatusOr<GaugeFamily*> AddGauge(const MetricSpec& spec);
  // `bucket_bounds`: 1..kMaxBucketBounds finite, strictly increasing upper bounds; a trailing
  // +Inf is accepted and dropped (it is always there).
  absl::StatusOr<HistogramFamily*> AddHistogram(const MetricSpec& spec,
                                                std::vector<double> bucket_bounds);

  // Text exposition format 0.0.4: families sorted by name, children by label values.
  std::string Serialize() const;

 private:
  template <typename T>
  absl::StatusOr<Family<T>*> Add(MetricType type, const MetricSpec& spec,
                                 std::vector<double> bucket_bounds);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  // Every sample name a family writes, to catch a counter "x_count" beside a histogram "x".
  std::set<std::string> sample_names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace waav::metrics

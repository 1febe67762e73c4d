#include "engine/metrics/registry.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/metrics/exposition.h"

namespace waav::metrics {
namespace {

// Adds to a double stored as bits. Relaxed is enough: each counter is independent and a scrape
// only needs every update to appear eventually.
void AtomicAddDouble(std::atomic<uint64_t>& bits, double v) {
  uint64_t old_bits = bits.load(std::memory_order_relaxed);
  while (!bits.compare_exchange_weak(old_bits,
                                     std::bit_cast<uint64_t>(std::bit_cast<double>(old_bits) + v),
                                     std::memory_order_relaxed)) {
  }
}

double LoadDouble(const std::atomic<uint64_t>& bits) {
  return std::bit_cast<double>(bits.load(std::memory_order_relaxed));
}

std::string DescribeLabels(const std::vector<std::string>& names) {
  return absl::StrCat("{", absl::StrJoin(names, ","), "}");
}

std::string DescribeBounds(const std::vector<double>& bounds) {
  return absl::StrCat(
      "[", absl::StrJoin(bounds, ",", [](std::string* out, double b) { AppendDouble(b, out); }),
      "]");
}

absl::Status ValidateSpec(MetricType type, const MetricSpec& spec) {
  if (!IsValidMetricName(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", spec.name, "' is not valid: want [a-zA-Z_:][a-zA-Z0-9_:]*"));
  }
  std::set<std::string> seen;
  for (const std::string& label : spec.label_names) {
    if (!IsValidLabelName(label)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric '", spec.name, "': label name '", label,
                       "' is not valid: want [a-zA-Z_][a-zA-Z0-9_]* not starting with \"__\""));
    }
    if (type == MetricType::kHistogram && label == "le") {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", spec.name, "': label name 'le' is reserved for bucket bounds"));
    }
    if (!seen.insert(label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric '", spec.name, "': label name '", label, "' appears twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status NormalizeBounds(const std::string& name, std::vector<double>& bounds) {
  if (!bounds.empty() && std::isinf(bounds.back()) && bounds.back() > 0) bounds.pop_back();
  if (bounds.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram '", name, "': needs at least one finite bucket bound"));
  }
  if (bounds.size() > kMaxBucketBounds) {
    return absl::InvalidArgumentError(absl::StrCat("histogram '", name, "': ", bounds.size(),
                                                   " bucket bounds, at most ", kMaxBucketBounds));
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return absl::InvalidArgumentError(absl::StrCat("histogram '", name, "': bucket bound ", i,
                                                     " is ", FormatDouble(bounds[i]),
                                                     "; bounds must be finite"));
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", name, "': bucket bounds must strictly increase, but bound ", i, " (",
          FormatDouble(bounds[i]), ") follows ", FormatDouble(bounds[i - 1])));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> SampleNames(MetricType type, const std::string& name) {
  if (type != MetricType::kHistogram) return {name};
  return {name, name + "_bucket", name + "_sum", name + "_count"};
}

}  // namespace

absl::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// ---- Counter, Gauge, Histogram ----------------------------------------------------------------

void Counter::Add(double v) {
  if (!(v >= 0) || !std::isfinite(v)) return;
  AtomicAddDouble(fraction_bits_, v);
}

double Counter::Value() const {
  return static_cast<double>(whole_.load(std::memory_order_relaxed)) + LoadDouble(fraction_bits_);
}

void Gauge::Set(double v) { bits_.store(std::bit_cast<uint64_t>(v), std::memory_order_relaxed); }
void Gauge::Add(double v) { AtomicAddDouble(bits_, v); }
double Gauge::Value() const { return LoadDouble(bits_); }

Histogram::Histogram(absl::Span<const double> bounds)
    : bounds_(bounds), counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds.size() + 1)) {}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // First bound >= v: `le` is inclusive. +Inf lands past the end, in the +Inf bucket.
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAddDouble(sum_bits_, v);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative_counts.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = LoadDouble(sum_bits_);
  return snapshot;
}

// ---- Families ---------------------------------------------------------------------------------

FamilyBase::FamilyBase(MetricType type, MetricSpec spec) : type_(type), spec_(std::move(spec)) {}

absl::StatusOr<std::vector<std::string>> FamilyBase::ValuesFromLabels(
    absl::Span<const Label> labels) const {
  const std::vector<std::string>& names = spec_.label_names;
  std::vector<std::string> values(names.size());
  std::vector<bool> given(names.size(), false);
  for (const Label& label : labels) {
    const auto it = std::find(names.begin(), names.end(), label.name);
    if (it == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("metric '", spec_.name, "' has no label '",
                                                     label.name, "'; its labels are ",
                                                     DescribeLabels(names)));
    }
    const size_t index = static_cast<size_t>(it - names.begin());
    if (given[index]) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric '", spec_.name, "': label '", label.name, "' given twice"));
    }
    given[index] = true;
    values[index] = std::string(label.value);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (!given[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("metric '", spec_.name, "': label '", names[i], "' is missing"));
    }
  }
  return values;
}

absl::StatusOr<std::vector<std::string>> FamilyBase::ValuesFromPositional(
    absl::Span<const absl::string_view> values) const {
  if (values.size() != spec_.label_names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric '", spec_.name, "' takes ", spec_.label_names.size(), " label values ",
                     DescribeLabels(spec_.label_names), ", got ", values.size()));
  }
  std::vector<std::string> out;
  out.reserve(values.size());
  for (const absl::string_view v : values) out.emplace_back(v);
  return out;
}

std::string FamilyBase::LabelText(const std::vector<std::string>& values) const {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text.push_back(',');
    text.append(spec_.label_names[i]);
    text.append("=\"");
    AppendEscapedLabelValue(values[i], &text);
    text.push_back('"');
  }
  return text;
}

void FamilyBase::AppendHeader(std::string* out) const {
  absl::StrAppend(out, "# HELP ", spec_.name, " ");
  AppendEscapedHelp(spec_.help, out);
  absl::StrAppend(out, "\n# TYPE ", spec_.name, " ", MetricTypeName(type_), "\n");
}

template <typename T>
Family<T>::Family(MetricType type, MetricSpec spec, std::vector<double> bucket_bounds)
    : FamilyBase(type, std::move(spec)), bucket_bounds_(std::move(bucket_bounds)) {}

template <typename T>
absl::StatusOr<T*> Family<T>::WithLabels(absl::Span<const Label> labels) {
  auto values = ValuesFromLabels(labels);
  if (!values.ok()) return values.status();
  return GetOrCreate(*std::move(values));
}

template <typename T>
absl::StatusOr<T*> Family<T>::WithLabelValues(absl::Span<const absl::string_view> values) {
  auto ordered = ValuesFromPositional(values);
  if (!ordered.ok()) return ordered.status();
  return GetOrCreate(*std::move(ordered));
}

template <typename T>
T* Family<T>::GetOrCreate(std::vector<std::string> values) {
  absl::MutexLock lock(&mu_);
  auto it = children_.find(values);
  if (it == children_.end()) {
    Child child;
    child.label_text = LabelText(values);
    if constexpr (std::is_same_v<T, Histogram>) {
      child.metric = std::make_unique<Histogram>(bucket_bounds_);
    } else {
      child.metric = std::make_unique<T>();
    }
    it = children_.emplace(std::move(values), std::move(child)).first;
  }
  return it->second.metric.get();
}

template <typename T>
void Family<T>::AppendTo(std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (children_.empty()) return;
  AppendHeader(out);
  for (const auto& [values, child] : children_) AppendChild(child, out);
}

template <typename T>
void Family<T>::AppendChild(const Child& child, std::string* out) const {
  const std::string& labels = child.label_text;
  if constexpr (std::is_same_v<T, Histogram>) {
    const Histogram::Snapshot snapshot = child.metric->Read();
    const std::string& n = name();
    const std::string sep = labels.empty() ? "" : ",";
    for (size_t i = 0; i <= bucket_bounds_.size(); ++i) {
      absl::StrAppend(out, n, "_bucket{", labels, sep, "le=\"");
      if (i < bucket_bounds_.size()) {
        AppendDouble(bucket_bounds_[i], out);
      } else {
        out->append("+Inf");
      }
      absl::StrAppend(out, "\"} ", snapshot.cumulative_counts[i], "\n");
    }
    const std::string braced = labels.empty() ? "" : absl::StrCat("{", labels, "}");
    absl::StrAppend(out, n, "_sum", braced, " ");
    AppendDouble(snapshot.sum, out);
    absl::StrAppend(out, "\n", n, "_count", braced, " ", snapshot.count, "\n");
  } else {
    out->append(name());
    if (!labels.empty()) absl::StrAppend(out, "{", labels, "}");
    out->push_back(' ');
    AppendDouble(child.metric->Value(), out);
    out->push_back('\n');
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- Registry ---------------------------------------------------------------------------------

template <typename T>
absl::StatusOr<Family<T>*> Registry::Add(MetricType type, const MetricSpec& spec,
                                         std::vector<double> bucket_bounds) {
  if (absl::Status s = ValidateSpec(type, spec); !s.ok()) return s;
  if (type == MetricType::kHistogram) {
    if (absl::Status s = NormalizeBounds(spec.name, bucket_bounds); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  if (auto it = families_.find(spec.name); it != families_.end()) {
    FamilyBase* existing = it->second.get();
    const MetricSpec& old = existing->spec();
    // Only a family of the same type may be cast to Family<T>.
    const bool same_type = existing->type() == type;
    const bool same_bounds = !same_type || type != MetricType::kHistogram ||
                             static_cast<Family<T>*>(existing)->bucket_bounds() == bucket_bounds;
    if (same_type && old.help == spec.help && old.label_names == spec.label_names && same_bounds) {
      return static_cast<Family<T>*>(existing);
    }
    std::string was = absl::StrCat(MetricTypeName(existing->type()), " with labels ",
                                   DescribeLabels(old.label_names));
    std::string now =
        absl::StrCat(MetricTypeName(type), " with labels ", DescribeLabels(spec.label_names));
    if (same_type && type == MetricType::kHistogram) {
      absl::StrAppend(&was, " and buckets ",
                      DescribeBounds(static_cast<Family<T>*>(existing)->bucket_bounds()));
      absl::StrAppend(&now, " and buckets ", DescribeBounds(bucket_bounds));
    }
    if (old.help != spec.help) {
      absl::StrAppend(&was, " and help '", old.help, "'");
      absl::StrAppend(&now, " and help '", spec.help, "'");
    }
    return absl::AlreadyExistsError(absl::StrCat("metric '", spec.name,
                                                 "' is already registered as a ", was,
                                                 "; cannot register it again as a ", now));
  }
  const std::vector<std::string> samples = SampleNames(type, spec.name);
  for (const std::string& sample : samples) {
    if (sample_names_.count(sample) > 0) {
      return absl::AlreadyExistsError(absl::StrCat("metric '", spec.name, "' would write series '",
                                                   sample,
                                                   "', which another registered metric writes"));
    }
  }
  auto family = std::make_unique<Family<T>>(type, spec, std::move(bucket_bounds));
  Family<T>* raw = family.get();
  if (spec.label_names.empty()) (void)raw->WithLabelValues({});
  families_.emplace(spec.name, std::move(family));
  sample_names_.insert(samples.begin(), samples.end());
  return raw;
}

absl::StatusOr<CounterFamily*> Registry::AddCounter(const MetricSpec& spec) {
  return Add<Counter>(MetricType::kCounter, spec, {});
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(const MetricSpec& spec) {
  return Add<Gauge>(MetricType::kGauge, spec, {});
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(const MetricSpec& spec,
                                                        std::vector<double> bucket_bounds) {
  return Add<Histogram>(MetricType::kHistogram, spec, std::move(bucket_bounds));
}

std::string Registry::Serialize() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) family->AppendTo(&out);
  return out;
}

}  // namespace waav::metrics

#include "engine/metrics/latency_budgets.h"

#include <array>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/metrics/exposition.h"

namespace waav::metrics {
namespace {

// Longer override strings are not a configuration mistake but garbage.
constexpr size_t kMaxOverridesChars = 4096;

// Rounding slack for "stages + margin <= end_to_end" (the defaults add up exactly).
constexpr double kSumToleranceMs = 1e-9;

struct Field {
  absl::string_view name;
  double LatencyBudgets::*member;
};

constexpr std::array<Field, 13> kFields = {{
    {"capture", &LatencyBudgets::capture_ms},
    {"preprocessing", &LatencyBudgets::preprocessing_ms},
    {"stt", &LatencyBudgets::stt_ms},
    {"processing", &LatencyBudgets::processing_ms},
    {"tts", &LatencyBudgets::tts_ms},
    {"output", &LatencyBudgets::output_ms},
    {"margin", &LatencyBudgets::margin_ms},
    {"end_to_end", &LatencyBudgets::end_to_end_ms},
    {"ingest_wait", &LatencyBudgets::ingest_wait_ms},
    {"frontend", &LatencyBudgets::frontend_ms},
    {"encoder", &LatencyBudgets::encoder_ms},
    {"decoder_step", &LatencyBudgets::decoder_step_ms},
    {"queue", &LatencyBudgets::queue_ms},
}};

std::string KnownNames() {
  std::string names;
  for (const Field& f : kFields) absl::StrAppend(&names, names.empty() ? "" : ", ", f.name);
  return names;
}

}  // namespace

absl::Status LatencyBudgets::Validate() const {
  for (const Field& f : kFields) {
    const double ms = this->*f.member;
    if (!std::isfinite(ms) || ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat("latency budget '", f.name, "' is ",
                                                     FormatDouble(ms),
                                                     " ms; budgets must be finite and >= 0"));
    }
  }
  double stages_ms = 0;
  for (size_t i = 0; i < kPipelineStageCount; ++i) {
    const double ms = BudgetMs(kAllStages[i]);
    if (ms <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("latency budget '", StageName(kAllStages[i]),
                                                     "' is 0 ms; every stage of the plan needs "
                                                     "a positive budget"));
    }
    stages_ms += ms;
  }
  if (end_to_end_ms <= 0) {
    return absl::InvalidArgumentError("latency budget 'end_to_end' is 0 ms; it must be positive");
  }
  if (stages_ms + margin_ms > end_to_end_ms + kSumToleranceMs) {
    return absl::InvalidArgumentError(
        absl::StrCat("latency budgets do not fit: the stages add up to ", FormatDouble(stages_ms),
                     " ms and the margin is ", FormatDouble(margin_ms),
                     " ms, together more than end_to_end (", FormatDouble(end_to_end_ms), " ms)"));
  }
  for (size_t i = kPipelineStageCount; i < kStageCount; ++i) {
    const double ms = BudgetMs(kAllStages[i]);
    if (ms > end_to_end_ms) {
      return absl::InvalidArgumentError(
          absl::StrCat("latency budget '", StageName(kAllStages[i]), "' (", FormatDouble(ms),
                       " ms) exceeds end_to_end (", FormatDouble(end_to_end_ms), " ms)"));
    }
  }
  return absl::OkStatus();
}

double LatencyBudgets::BudgetMs(Stage stage) const {
  for (const Field& f : kFields) {
    if (f.name == StageName(stage)) return this->*f.member;
  }
  return 0;
}

absl::Status LatencyBudgets::SetBudgetMs(absl::string_view name, double ms) {
  for (const Field& f : kFields) {
    if (f.name != name) continue;
    if (!std::isfinite(ms) || ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "latency budget '", name, "': ", FormatDouble(ms), " ms is not a finite number >= 0"));
    }
    this->*f.member = ms;
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrCat("unknown latency budget '", name, "'; known: ", KnownNames()));
}

absl::Status LatencyBudgets::ApplyOverrides(absl::string_view overrides) {
  if (overrides.size() > kMaxOverridesChars) {
    return absl::InvalidArgumentError(absl::StrCat("latency budget overrides are ",
                                                   overrides.size(), " characters long, at most ",
                                                   kMaxOverridesChars));
  }
  if (absl::StripAsciiWhitespace(overrides).empty()) return absl::OkStatus();
  LatencyBudgets updated = *this;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(overrides, ',')) {
    item = absl::StripAsciiWhitespace(item);
    const size_t equals = item.find('=');
    if (item.empty() || equals == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("latency budget override '", item, "' in '",
                                                     overrides, "': want name=milliseconds"));
    }
    const absl::string_view name = absl::StripAsciiWhitespace(item.substr(0, equals));
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(equals + 1));
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("latency budget override '", item, "' in '",
                                                     overrides, "' has no name before '='"));
    }
    double ms = 0;
    if (value.empty() || !absl::SimpleAtod(value, &ms)) {
      return absl::InvalidArgumentError(absl::StrCat("latency budget override '", item, "': '",
                                                     value, "' is not a number of milliseconds"));
    }
    if (!seen.insert(std::string(name)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("latency budget '", name, "' is overridden twice in '", overrides, "'"));
    }
    if (absl::Status s = updated.SetBudgetMs(name, ms); !s.ok()) return s;
  }
  *this = updated;
  return absl::OkStatus();
}

std::string LatencyBudgets::ToString() const {
  std::string out;
  for (const Field& f : kFields) {
    const double ms = this->*f.member;
    if (ms == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : ",", f.name, "=", FormatDouble(ms));
  }
  return out;
}

}  // namespace waav::metrics

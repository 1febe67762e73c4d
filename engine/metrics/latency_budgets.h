// Per-stage latency budgets: design.md's latency plan, configurable. StageMetrics exports them
// as waav_stage_budget_seconds and counts observations over them; the alerting rules compare
// each stage's p99 with its budget.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/metrics/stage.h"

namespace waav::metrics {

struct LatencyBudgets {
  // The plan's stages, in milliseconds. Their sum plus the margin must fit end_to_end_ms.
  double capture_ms = 10;       // Default: 10 ms
  double preprocessing_ms = 5;  // Default: 5 ms
  double stt_ms = 50;           // Default: 50 ms
  double processing_ms = 10;    // Default: 10 ms
  double tts_ms = 100;          // Default: 100 ms
  double output_ms = 5;         // Default: 5 ms
  double margin_ms = 20;        // Default: 20 ms; slack the plan leaves unassigned, not measured
  double end_to_end_ms = 200;   // Default: 200 ms

  // Inner steps (see Stage). 0 means no budget: no budget gauge, no overrun counting.
  double ingest_wait_ms = 0;   // Default: 0 (none)
  double frontend_ms = 0;      // Default: 0 (none)
  double encoder_ms = 0;       // Default: 0 (none)
  double decoder_step_ms = 0;  // Default: 0 (none)
  double queue_ms = 0;         // Default: 0 (none)

  // OK when every budget is finite and >= 0, the six plan stages and end_to_end are > 0, no
  // inner step exceeds end_to_end, and the stages plus the margin fit within end_to_end.
  // A failure names the field and the numbers; the daemon must not start with it.
  [[nodiscard]] absl::Status Validate() const;

  // Budget of `stage` in ms (0: none).
  double BudgetMs(Stage stage) const;

  // Sets one budget by its configuration name: a stage name (StageName), "margin" or
  // "end_to_end". NotFound for another name, InvalidArgument for a negative or non-finite value.
  [[nodiscard]] absl::Status SetBudgetMs(absl::string_view name, double ms);

  // Applies overrides written "name=ms[,name=ms...]", e.g. "stt=60, end_to_end=210" (the
  // daemon's --latency-budgets flag); an empty or blank string changes nothing. All or
  // nothing: on error nothing changes and the error names the offending item. Call Validate()
  // afterwards: one override may need another.
  [[nodiscard]] absl::Status ApplyOverrides(absl::string_view overrides);

  // "capture=10,preprocessing=5,...": every non-zero budget, in the ApplyOverrides syntax.
  std::string ToString() const;
};

}  // namespace waav::metrics

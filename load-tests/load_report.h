// waav-load's output: text tables for people, JSON for scripts (docs/client.md shows both).
#pragma once

#include <string>

#include "load-tests/load_runner.h"
#include "nlohmann/json.hpp"

namespace waav::load {

// A few lines: server, files, pacing, chunking, repetitions, and how latency is referenced.
std::string DescribeRun(const LoadOptions& options,
                        const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio);

// Which reference the steps used: word ends, utterance ends (saying why), or a mix.
std::string DescribeReference(const LoadOptions& options, const RampReport& ramp);

// The header and one row per step of the main table.
std::string StepTableHeader();
std::string StepTableRow(const StepReport& step);

// The server-reported per-stage latencies of one step (ms, p50/p95/p99/max, count).
std::string StageTable(const StepReport& step);

// With reference words: the `rows` reference words of one step with the largest first-partial p95
// (ties: the earlier word), one line each: file, word, its reference end, streams measured, how
// many first appeared in the final, first-partial p50 / p95 / max and final p50 (ms). Empty
// without reference words.
std::string LateWordTable(const StepReport& step, size_t rows);

// The verdict in words: the largest N that keeps up and why the next one did not.
std::string DescribeVerdict(const RampReport& ramp);

// Everything as JSON: {"tool", "options", "files", "latency_reference", "steps": [...],
// "largest_concurrency_keeping_up"}. Summaries are objects {count, min, max, mean, p50, p95,
// p99} (null when count is 0).
nlohmann::json ReportJson(const LoadOptions& options,
                          const std::vector<std::shared_ptr<const cli::ClientAudio>>& audio,
                          const RampReport& ramp);
nlohmann::json SummaryJson(const Summary& summary);
nlohmann::json StepJson(const StepReport& step);

}  // namespace waav::load

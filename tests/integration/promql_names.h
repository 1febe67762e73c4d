// Small PromQL and Grafana helpers for the live Prometheus test: the metric names an expression
// selects, and Grafana's template variables replaced by concrete values. Deliberately simple
// (the dashboard's expressions are plain PromQL); tests/deploy/check_dashboard.py reads the
// same expressions the same way.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace waav::testing {

// Metric names an expression selects: identifiers that are not functions (followed by '('),
// aggregations, keywords, label names (inside {...} or by/without/on/ignoring (...)), durations
// or strings. `sum by (le) (rate(x_bucket{a="b"}[5m])) / y` gives {"x_bucket", "y"}.
std::vector<std::string> MetricNamesIn(const std::string& expr);

// Replaces $name, ${name} and ${name:format} with `values[name]` (Grafana's built-ins
// $__rate_interval, $__interval and $__range included, when given). Names with no value are
// appended to *unknown and left as they are.
std::string SubstituteGrafanaVariables(const std::string& expr,
                                       const std::map<std::string, std::string>& values,
                                       std::vector<std::string>* unknown);

}  // namespace waav::testing

// Pieces of the Prometheus text exposition format 0.0.4 that the registry needs: name
// validation, escaping, and number formatting identical to the Go client's (so that `le`
// labels read "0.005" and "+Inf", and every value parses back to the same double).
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace waav::metrics {

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(absl::string_view name);

// [a-zA-Z_][a-zA-Z0-9_]*, and not starting with "__" (reserved for Prometheus itself).
bool IsValidLabelName(absl::string_view name);

// Label values escape backslash, double quote and line feed.
void AppendEscapedLabelValue(absl::string_view value, std::string* out);

// HELP text escapes backslash and line feed (quotes stay as they are).
void AppendEscapedHelp(absl::string_view help, std::string* out);

// Formats like Go's strconv.FormatFloat(v, 'g', -1, 64) with "+Inf", "-Inf" and "NaN" for
// the special values: the shortest digits that parse back to `v`, in fixed notation when the
// decimal exponent is in [-4, 6) and as "1.5e-05" / "1e+06" otherwise. -0 prints as "0".
void AppendDouble(double v, std::string* out);
std::string FormatDouble(double v);

}  // namespace waav::metrics

#include "engine/metrics/exposition.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace waav::metrics {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || c == ':' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty()) return false;
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

void AppendEscapedLabelValue(absl::string_view value, std::string* out) {
  for (const char c : value) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '"':
        out->append("\\\"");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

void AppendEscapedHelp(absl::string_view help, std::string* out) {
  for (const char c : help) {
    switch (c) {
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      default:
        out->push_back(c);
    }
  }
}

void AppendDouble(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
    return;
  }
  if (v == 0) {  // Also -0: the Go client writes "0" for both.
    out->push_back('0');
    return;
  }
  // std::to_chars in scientific form gives the shortest round-trip digits ("d.ddde+XX");
  // the layout decision below is Go's ('g' with precision -1 decides with precision 6).
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const char* p = buf;
  const bool negative = *p == '-';
  if (negative) ++p;
  char digits[32];
  int num_digits = 0;
  for (; p < result.ptr && *p != 'e'; ++p) {
    if (IsAsciiDigit(*p)) digits[num_digits++] = *p;
  }
  // Then 'e', a sign and the exponent digits (to_chars does not NUL-terminate: parse in range).
  const bool negative_exponent = p + 1 < result.ptr && p[1] == '-';
  int exponent = 0;
  std::from_chars(p + 2, result.ptr, exponent);
  if (negative_exponent) exponent = -exponent;
  if (negative) out->push_back('-');
  if (exponent < -4 || exponent >= 6) {
    out->push_back(digits[0]);
    if (num_digits > 1) {
      out->push_back('.');
      out->append(digits + 1, num_digits - 1);
    }
    out->push_back('e');
    out->push_back(exponent < 0 ? '-' : '+');
    const int magnitude = std::abs(exponent);
    if (magnitude < 10) out->push_back('0');
    out->append(std::to_string(magnitude));
    return;
  }
  // Fixed notation: the decimal point sits after digit number `point` (may be <= 0).
  const int point = exponent + 1;
  if (point <= 0) {
    out->append("0.");
    out->append(-point, '0');
    out->append(digits, num_digits);
    return;
  }
  for (int i = 0; i < point; ++i) out->push_back(i < num_digits ? digits[i] : '0');
  if (num_digits > point) {
    out->push_back('.');
    out->append(digits + point, num_digits - point);
  }
}

std::string FormatDouble(double v) {
  std::string out;
  AppendDouble(v, &out);
  return out;
}

}  // namespace waav::metrics

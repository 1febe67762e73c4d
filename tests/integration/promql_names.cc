#include "tests/integration/promql_names.h"

#include <regex>
#include <set>

namespace waav::testing {
namespace {

const std::set<std::string>& Reserved() {
  static const std::set<std::string> words = {
      // aggregations
      "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
      "topk", "quantile",
      // keywords and binary operators written as words
      "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
      "offset", "atan2", "inf", "nan", "Inf", "NaN"};
  return words;
}

}  // namespace

std::vector<std::string> MetricNamesIn(const std::string& expr) {
  // Label lists of grouping clauses, then selectors' matchers and range/subquery durations.
  static const std::regex grouping(
      R"(\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\))");
  static const std::regex braces(R"(\{[^}]*\})");
  static const std::regex brackets(R"(\[[^\]]*\])");
  std::string text = std::regex_replace(expr, grouping, "$1");
  text = std::regex_replace(text, brackets, "");
  text = std::regex_replace(text, braces, "");

  static const std::regex token(
      R"TOK(("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)|(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?|\.\d+)|([a-zA-Z_:][a-zA-Z0-9_:]*)|(\S))TOK");
  struct Token {
    bool ident;
    std::string text;
  };
  std::vector<Token> tokens;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), token);
       it != std::sregex_iterator(); ++it) {
    tokens.push_back({(*it)[3].matched, it->str()});
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!tokens[i].ident || Reserved().count(tokens[i].text) > 0) continue;
    if (i + 1 < tokens.size() && tokens[i + 1].text == "(") continue;  // a function call
    names.push_back(tokens[i].text);
  }
  return names;
}

std::string SubstituteGrafanaVariables(const std::string& expr,
                                       const std::map<std::string, std::string>& values,
                                       std::vector<std::string>* unknown) {
  static const std::regex variable(R"(\$\{(\w+)(?::\w+)?\}|\$(\w+))");
  std::string out;
  auto last = expr.cbegin();
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), variable);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out.append(last, m[0].first);
    const std::string name = m[1].matched ? m[1].str() : m[2].str();
    const auto value = values.find(name);
    if (value != values.end()) {
      out += value->second;
    } else {
      unknown->push_back(name);
      out += m[0].str();
    }
    last = m[0].second;
  }
  out.append(last, expr.cend());
  return out;
}

}  // namespace waav::testing

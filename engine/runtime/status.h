// Error handling conventions: errors are values (absl::Status / absl::StatusOr) up to the gRPC
// boundary. These macros keep call sites short without hiding control flow.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define WAAV_CONCAT_INNER_(a, b) a##b
#define WAAV_CONCAT_(a, b) WAAV_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::absl::Status waav_status_ = (expr);             \
    if (!waav_status_.ok()) return waav_status_;      \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` unwraps a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(WAAV_CONCAT_(waav_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

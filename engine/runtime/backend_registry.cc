#include "engine/runtime/backend_registry.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace waav {
namespace {

struct Entry {
  std::string name;
  int priority;
  BackendFactory factory;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used from static init
  return *registry;
}

}  // namespace

bool RegisterBackend(std::string name, int priority, BackendFactory factory) {
  Registry& registry = GetRegistry();
  std::lock_guard lock(registry.mu);
  registry.entries.push_back({std::move(name), priority, std::move(factory)});
  std::stable_sort(registry.entries.begin(), registry.entries.end(),
                   [](const Entry& a, const Entry& b) { return a.priority > b.priority; });
  return true;
}

std::vector<std::string> RegisteredBackends() {
  Registry& registry = GetRegistry();
  std::lock_guard lock(registry.mu);
  std::vector<std::string> names;
  for (const Entry& e : registry.entries) names.push_back(e.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(std::string_view name,
                                                       const BackendOptions& options) {
  std::vector<Entry> entries;
  {
    Registry& registry = GetRegistry();
    std::lock_guard lock(registry.mu);
    entries = registry.entries;
  }
  if (name == "auto") {
    std::vector<std::string> failures;
    for (const Entry& e : entries) {
      auto backend = e.factory(options);
      if (backend.ok()) return backend;
      failures.push_back(absl::StrCat(e.name, ": ", backend.status().message()));
    }
    return absl::UnavailableError(
        absl::StrCat("no backend could start (", absl::StrJoin(failures, "; "), ")"));
  }
  for (const Entry& e : entries) {
    if (e.name == name) return e.factory(options);
  }
  std::vector<std::string> names;
  for (const Entry& e : entries) names.push_back(e.name);
  return absl::NotFoundError(absl::StrCat("unknown backend '", std::string(name), "'; this build has: auto, ",
                                          absl::StrJoin(names, ", ")));
}

}  // namespace waav

#include "kernels/cpu/openblas_setup.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace waav::cpu {

void EnsureOpenBlasCoreType(char** argv) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (!avx512 || std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* opt_out = std::getenv("WAAV_OPENBLAS_REEXEC");
  if (opt_out != nullptr && std::strcmp(opt_out, "0") == 0) return;
  if (setenv("OPENBLAS_CORETYPE", "SkylakeX", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with the default kernels
}

}  // namespace waav::cpu

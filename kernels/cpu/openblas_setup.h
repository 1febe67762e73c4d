// OpenBLAS picks its GEMM kernels once, when the library loads, from its table of known CPUs.
// Debian's OpenBLAS 0.3.21 does not know recent AMD cores and falls back to its AVX2 "Haswell"
// kernels on CPUs that have AVX-512, which halves GEMM throughput there (measured on this
// project's AMD EPYC machines: one Whisper encoder layer 45 ms vs 27 ms). The only supported
// switch is the OPENBLAS_CORETYPE environment variable, read at load time.
#pragma once

namespace waav::cpu {

// Call first thing in main(). When the CPU has the AVX-512 subsets OpenBLAS's SkylakeX kernels
// need (F, BW, DQ, VL), OpenBLAS is not already told a core type, and WAAV_OPENBLAS_REEXEC is
// not "0", re-executes the program once with OPENBLAS_CORETYPE=SkylakeX. Returns normally (no
// change) in every other case, including when the re-exec fails.
void EnsureOpenBlasCoreType(char** argv);

}  // namespace waav::cpu

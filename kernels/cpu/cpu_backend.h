// The CPU backend: the reference implementation of waav::Backend.
//
// Execution is synchronous on the calling thread plus a private thread pool
// (BackendOptions::num_threads participants, 0 = all hardware threads); OpenBLAS runs
// single-threaded inside the pool's chunks, so the two never compete for cores. Kernels are
// AVX2/FMA/F16C (x86-64-v3); the registered factory returns Unavailable on a CPU without them.
//
// Graph capture records each kernel call (and Copy) as a closure holding its tensors by value;
// Replay() runs them in order, reading the tensors' current contents. Values inside i32 tensors
// (token ids, positions, lengths) are checked when a kernel runs, so an out-of-range value makes
// the eager call or Replay() return InvalidArgument; nothing is written by the failing kernel.
// Graphs and tensors stay valid after the backend is destroyed (they share its pool and
// workers), but a backend and its graphs must be driven from one thread at a time.
//
// Semantics this backend fixes where backend.h leaves room (other backends must match):
//  * Attention: a query that sees no key (kv_lengths[b] = 0, or with `causal` a query whose
//    position kv_lengths[b] − Tq + i is negative) outputs zeros.
//  * LayerNorm, Add, Gelu, LogSoftmax may write in place (y the same tensor as an input);
//    partially overlapping inputs and outputs, and outputs of the other kernels overlapping
//    their inputs, are InvalidArgument.
//  * While capturing, Allocate, CopyFromHost, CopyToHost and Synchronize return
//    FailedPrecondition; Copy is recorded.
#pragma once

#include <memory>

#include "engine/runtime/backend.h"
#include "engine/runtime/backend_registry.h"

namespace waav {

// Creates the backend without checking the CPU's features; CreateBackend("cpu") (the registered
// factory) checks them first and is what callers on unknown hardware should use.
std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options);

}  // namespace waav

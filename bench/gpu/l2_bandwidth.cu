// How fast one multiprocessor pulls L2-resident data into itself, by the three ways the cluster
// decoder step can load: 16-byte loads into registers (ld.global.nc, U per thread in flight),
// 16-byte cp.async into shared memory (G groups in flight) and Hopper's bulk copies (TMA,
// cp.async.bulk: one thread keeps S copies of C bytes in flight). The cluster step's batch-1
// time is bounded by how fast each of a row's 16 blocks reads its ~1.6 MB per step
// (docs/gpu.md), so this tells which loading scheme can go faster.
//
// Method: a 32 MB f16 buffer (inside an H100's 50 MB L2) is read once to warm the L2; then each
// of N blocks (512 threads, one per multiprocessor) reads its own 256 KB region 8 times (2 MB);
// per block clock64() from its start to its end gives bytes per cycle; the median over blocks
// and over 5 repetitions is printed, with the whole launch's GB/s (cudaEvent). N = 1, 16, all.
//
//   l2_bandwidth_bench            (one table on stdout)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/gpu/cuda_check.h"

namespace {

constexpr int kThreads = 512;
constexpr size_t kBufferBytes = size_t{32} << 20;
constexpr size_t kRegionBytes = size_t{256} << 10;
constexpr int kPasses = 8;
constexpr int kRepetitions = 5;

enum class Mode { kRegisters, kCopyAsync, kBulk };

__device__ __forceinline__ unsigned Smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint4 LoadNc(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// U loads per thread in flight, folded into one word so that none is dead.
template <int U>
__global__ void __launch_bounds__(kThreads, 1)
    RegistersKernel(const uint4* buffer, long long* cycles, unsigned* sink) {
  const uint4* region = buffer + (blockIdx.x % (kBufferBytes / kRegionBytes)) * kRegionBytes / 16;
  constexpr int kPieces = static_cast<int>(kRegionBytes / 16);
  __syncthreads();
  const long long start = clock64();
  unsigned fold = 0;
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int i = threadIdx.x; i < kPieces; i += kThreads * U) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = LoadNc(region + i + u * kThreads);
#pragma unroll
      for (int u = 0; u < U; ++u) fold ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
  if (fold == 0x12345678u) sink[0] = fold;
}

// G groups of one 16-byte cp.async per thread in flight, into a ring of G slots.
template <int G>
__global__ void __launch_bounds__(kThreads, 1)
    CopyAsyncKernel(const uint4* buffer, long long* cycles, unsigned* sink) {
  extern __shared__ uint4 ring[];
  const uint4* region = buffer + (blockIdx.x % (kBufferBytes / kRegionBytes)) * kRegionBytes / 16;
  constexpr int kSteps = static_cast<int>(kRegionBytes / 16 / kThreads);
  __syncthreads();
  const long long start = clock64();
  for (int pass = 0; pass < kPasses; ++pass) {
    for (int s = 0; s < kSteps; ++s) {
      const unsigned dst = Smem(ring + (s % G) * kThreads + threadIdx.x);
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst),
                   "l"(region + s * kThreads + threadIdx.x)
                   : "memory");
      asm volatile("cp.async.commit_group;" ::: "memory");
      asm volatile("cp.async.wait_group %0;" ::"n"(G - 1) : "memory");
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
  if (ring[threadIdx.x].x == 0x12345678u) sink[0] = 1;
}

// One thread keeps `slots` bulk copies of `chunk` bytes in flight (one mbarrier per slot).
__global__ void __launch_bounds__(kThreads, 1)
    BulkKernel(const uint4* buffer, long long* cycles, unsigned* sink, int chunk, int slots) {
  extern __shared__ uint4 ring[];
  __shared__ unsigned long long bars[32];
  const char* region = reinterpret_cast<const char*>(buffer) +
                       (blockIdx.x % (kBufferBytes / kRegionBytes)) * kRegionBytes;
  const int per_pass = static_cast<int>(kRegionBytes) / chunk, total = per_pass * kPasses;
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Smem(&bars[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const long long start = clock64();
  if (threadIdx.x == 0) {
    auto issue = [&](int i) {
      const int s = i % slots;
      const unsigned bar = Smem(&bars[s]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(chunk)
                   : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];" ::"r"(Smem(reinterpret_cast<char*>(ring) + static_cast<size_t>(s) * chunk)),
          "l"(region + static_cast<size_t>(i % per_pass) * chunk), "r"(chunk), "r"(bar)
          : "memory");
    };
    for (int i = 0; i < (slots < total ? slots : total); ++i) issue(i);
    for (int i = 0; i < total; ++i) {
      const unsigned parity = static_cast<unsigned>((i / slots) & 1);
      asm volatile(
          "{\n .reg .pred done;\n wait:\n"
          " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
          " @!done bra wait;\n}" ::"r"(Smem(&bars[i % slots])),
          "r"(parity)
          : "memory");
      if (i + slots < total) issue(i + slots);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
  if (ring[threadIdx.x].x == 0x12345678u) sink[0] = 1;
}

struct Case {
  const char* name;
  Mode mode;
  int param;      // U, G or chunk bytes
  int slots = 0;  // bulk only
};

bool Launch(const Case& c, int blocks, const uint4* buffer, long long* cycles, unsigned* sink) {
  switch (c.mode) {
    case Mode::kRegisters:
      if (c.param == 2) RegistersKernel<2><<<blocks, kThreads>>>(buffer, cycles, sink);
      if (c.param == 4) RegistersKernel<4><<<blocks, kThreads>>>(buffer, cycles, sink);
      if (c.param == 8) RegistersKernel<8><<<blocks, kThreads>>>(buffer, cycles, sink);
      break;
    case Mode::kCopyAsync: {
      const size_t smem = size_t{16} * kThreads * c.param;
      if (c.param == 4) {
        WAAV_BENCH_CHECK(cudaFuncSetAttribute(CopyAsyncKernel<4>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
        CopyAsyncKernel<4><<<blocks, kThreads, smem>>>(buffer, cycles, sink);
      }
      if (c.param == 8) {
        WAAV_BENCH_CHECK(cudaFuncSetAttribute(CopyAsyncKernel<8>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
        CopyAsyncKernel<8><<<blocks, kThreads, smem>>>(buffer, cycles, sink);
      }
      if (c.param == 16) {
        WAAV_BENCH_CHECK(cudaFuncSetAttribute(CopyAsyncKernel<16>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem)));
        CopyAsyncKernel<16><<<blocks, kThreads, smem>>>(buffer, cycles, sink);
      }
      break;
    }
    case Mode::kBulk: {
      const size_t smem = static_cast<size_t>(c.param) * c.slots;
      WAAV_BENCH_CHECK(cudaFuncSetAttribute(BulkKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
      BulkKernel<<<blocks, kThreads, smem>>>(buffer, cycles, sink, c.param, c.slots);
      break;
    }
  }
  WAAV_BENCH_CHECK(cudaGetLastError());
  return true;
}

bool Run() {
  int device = 0, sms = 0, clock_khz = 0;
  WAAV_BENCH_CHECK(cudaGetDevice(&device));
  WAAV_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  WAAV_BENCH_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  cudaDeviceProp prop{};
  WAAV_BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("# %s, %d multiprocessors, L2 %d MB, max clock %d MHz\n", prop.name, sms,
              prop.l2CacheSize >> 20, clock_khz / 1000);
  std::printf(
      "# each block reads its own 256 KB region %d times; median of %d runs; "
      "B/cycle per block: median over blocks (clock64)\n",
      kPasses, kRepetitions);
  uint4* buffer = nullptr;
  long long* cycles = nullptr;
  unsigned* sink = nullptr;
  WAAV_BENCH_CHECK(cudaMalloc(&buffer, kBufferBytes));
  WAAV_BENCH_CHECK(cudaMemset(buffer, 1, kBufferBytes));
  WAAV_BENCH_CHECK(cudaMalloc(&cycles, sizeof(long long) * 1024));
  WAAV_BENCH_CHECK(cudaMalloc(&sink, 4));
  cudaEvent_t begin, end;
  WAAV_BENCH_CHECK(cudaEventCreate(&begin));
  WAAV_BENCH_CHECK(cudaEventCreate(&end));
  const Case cases[] = {
      {"registers, 2 loads/thread in flight", Mode::kRegisters, 2},
      {"registers, 4 loads/thread in flight", Mode::kRegisters, 4},
      {"registers, 8 loads/thread in flight", Mode::kRegisters, 8},
      {"cp.async 16 B, 4 groups in flight", Mode::kCopyAsync, 4},
      {"cp.async 16 B, 8 groups in flight", Mode::kCopyAsync, 8},
      {"cp.async 16 B, 16 groups in flight", Mode::kCopyAsync, 16},
      {"bulk copy 4 KB x 16 in flight", Mode::kBulk, 4 << 10, 16},
      {"bulk copy 8 KB x 8 in flight", Mode::kBulk, 8 << 10, 8},
      {"bulk copy 8 KB x 16 in flight", Mode::kBulk, 8 << 10, 16},
      {"bulk copy 16 KB x 4 in flight", Mode::kBulk, 16 << 10, 4},
      {"bulk copy 16 KB x 8 in flight", Mode::kBulk, 16 << 10, 8},
      {"bulk copy 32 KB x 4 in flight", Mode::kBulk, 32 << 10, 4},
      {"bulk copy 64 KB x 2 in flight", Mode::kBulk, 64 << 10, 2},
  };
  const int grids[] = {1, 16, sms};
  std::printf("%-40s %6s %12s %12s\n", "loads", "blocks", "B/cycle/blk", "GB/s total");
  for (const Case& c : cases) {
    for (const int blocks : grids) {
      // Warm the L2 with the regions this grid reads.
      if (!Launch(c, blocks, buffer, cycles, sink)) return false;
      WAAV_BENCH_CHECK(cudaDeviceSynchronize());
      std::vector<double> per_block, totals;
      for (int r = 0; r < kRepetitions; ++r) {
        WAAV_BENCH_CHECK(cudaEventRecord(begin));
        if (!Launch(c, blocks, buffer, cycles, sink)) return false;
        WAAV_BENCH_CHECK(cudaEventRecord(end));
        WAAV_BENCH_CHECK(cudaEventSynchronize(end));
        float ms = 0;
        WAAV_BENCH_CHECK(cudaEventElapsedTime(&ms, begin, end));
        std::vector<long long> host(static_cast<size_t>(blocks));
        WAAV_BENCH_CHECK(
            cudaMemcpy(host.data(), cycles, sizeof(long long) * blocks, cudaMemcpyDeviceToHost));
        std::sort(host.begin(), host.end());
        const double bytes = static_cast<double>(kRegionBytes) * kPasses;
        per_block.push_back(bytes / static_cast<double>(host[host.size() / 2]));
        totals.push_back(bytes * blocks / (ms * 1e-3) / 1e9);
      }
      std::sort(per_block.begin(), per_block.end());
      std::sort(totals.begin(), totals.end());
      std::printf("%-40s %6d %12.1f %12.0f\n", c.name, blocks, per_block[kRepetitions / 2],
                  totals[kRepetitions / 2]);
    }
  }
  return true;
}

}  // namespace

int main() { return Run() ? 0 : 1; }

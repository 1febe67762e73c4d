// What one all-to-all exchange between the 16 blocks of a thread-block cluster costs, by message
// size and by the way the cluster decoder step could send (kernels/cuda/cluster_decoder.cu):
// every block sends M bytes to every block (itself included) through distributed shared memory,
// counted on the receiver's mbarrier, and the next round's sends wait for the whole of this
// round's arrivals, as in the step. Three ways to send:
//   st.async 16 B   every thread stores 16-byte pieces (st.async.v4, complete_tx on the receiver)
//   st.async 4 B    every thread stores 4-byte pieces (the step's GEMV columns)
//   bulk copy       16 threads each issue one shared-to-shared bulk copy of M bytes (TMA)
// Method: R = 64 rounds back to back, two receive buffers alternating (16 slots of M bytes);
// each block's clock64() from its first send to its last arrival, / R = cycles per round;
// median over the blocks of one cluster and over 5 launches. One cluster, then 8 at once (the
// step's 8-row case). Cycles per round at the smallest M is the exchange's round-trip floor.
//
//   dsmem_exchange_bench            (one table on stdout)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/gpu/cuda_check.h"

namespace {

constexpr int kBlocks = 16;  // per cluster
constexpr int kThreads = 512;
constexpr int kRounds = 64;
constexpr int kRepetitions = 5;
constexpr int kMaxBytes = 4096;  // per destination

enum class Mode { kStore16, kStore4, kBulk };

__device__ __forceinline__ unsigned Smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ unsigned MapRank(unsigned local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ void ExpectBytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void Wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Dynamic shared memory: the message to send (kMaxBytes), then two buffers of 16 slots.
__global__ void __launch_bounds__(kThreads, 1)
    ExchangeKernel(Mode mode, int bytes, long long* cycles) {
  extern __shared__ uint4 smem[];
  __shared__ unsigned long long bars[2];
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  char* message = reinterpret_cast<char*>(smem);
  char* buffers = message + kMaxBytes;
  for (int i = threadIdx.x; i < kMaxBytes / 4; i += kThreads) {
    reinterpret_cast<unsigned*>(message)[i] = rank * 1000003u + static_cast<unsigned>(i);
  }
  const unsigned incoming = static_cast<unsigned>(kBlocks * bytes);
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(Smem(&bars[b])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    ExpectBytes(Smem(&bars[0]), incoming);
    ExpectBytes(Smem(&bars[1]), incoming);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the message, for bulk copies
  __syncthreads();
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
  const long long start = clock64();
  for (int k = 0; k < kRounds; ++k) {
    const int b = k & 1;
    const unsigned slot = Smem(buffers + (static_cast<size_t>(b) * kBlocks + rank) * bytes);
    const unsigned bar = Smem(&bars[b]);
    if (mode == Mode::kStore16) {
      const int pieces = bytes / 16;
      for (int i = threadIdx.x; i < kBlocks * pieces; i += kThreads) {
        const unsigned target = static_cast<unsigned>(i / pieces), piece = i % pieces;
        const uint4 v = reinterpret_cast<const uint4*>(message)[piece];
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.u32 [%0], {%1, %2, %3, "
            "%4}, [%5];" ::"r"(MapRank(slot + 16 * piece, target)),
            "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(MapRank(bar, target))
            : "memory");
      }
    } else if (mode == Mode::kStore4) {
      const int pieces = bytes / 4;
      for (int i = threadIdx.x; i < kBlocks * pieces; i += kThreads) {
        const unsigned target = static_cast<unsigned>(i / pieces), piece = i % pieces;
        const unsigned v = reinterpret_cast<const unsigned*>(message)[piece];
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];" ::"r"(
                MapRank(slot + 4 * piece, target)),
            "r"(v), "r"(MapRank(bar, target))
            : "memory");
      }
    } else if (threadIdx.x < kBlocks) {
      const unsigned target = threadIdx.x;
      asm volatile(
          "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], "
          "%2, [%3];" ::"r"(MapRank(slot, target)),
          "r"(Smem(message)), "r"(bytes), "r"(MapRank(bar, target))
          : "memory");
    }
    Wait(bar, static_cast<unsigned>((k >> 1) & 1));
    __syncthreads();
    if (threadIdx.x == 0 && k + 2 < kRounds) ExpectBytes(bar, incoming);
  }
  const long long end = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = end - start;
  // Every block has received everything (no store is still on its way to a block that exits).
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}

bool Launch(Mode mode, int bytes, int clusters, long long* cycles) {
  const size_t smem = kMaxBytes + size_t{2} * kBlocks * bytes;
  WAAV_BENCH_CHECK(
      cudaFuncSetAttribute(ExchangeKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  WAAV_BENCH_CHECK(cudaFuncSetAttribute(ExchangeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(clusters * kBlocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kBlocks;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  WAAV_BENCH_CHECK(cudaLaunchKernelEx(&config, ExchangeKernel, mode, bytes, cycles));
  return true;
}

bool Run() {
  int device = 0, clock_khz = 0;
  WAAV_BENCH_CHECK(cudaGetDevice(&device));
  WAAV_BENCH_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  cudaDeviceProp prop{};
  WAAV_BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("# %s, %d multiprocessors, max clock %d MHz\n", prop.name, prop.multiProcessorCount,
              clock_khz / 1000);
  std::printf(
      "# clusters of %d blocks x %d threads; every block sends M bytes to each of the %d per "
      "round; %d rounds; median over blocks and %d launches\n",
      kBlocks, kThreads, kBlocks, kRounds, kRepetitions);
  long long* cycles = nullptr;
  WAAV_BENCH_CHECK(cudaMalloc(&cycles, sizeof(long long) * 8 * kBlocks));
  const std::pair<const char*, Mode> modes[] = {{"st.async 16 B", Mode::kStore16},
                                                {"st.async 4 B", Mode::kStore4},
                                                {"bulk copy", Mode::kBulk}};
  const int sizes[] = {16, 96, 384, 1552, 4096};
  std::printf("%-16s %8s %9s %16s %20s\n", "send", "M bytes", "clusters", "cycles/round",
              "bytes/cycle/block");
  for (const auto& [name, mode] : modes) {
    for (const int bytes : sizes) {
      for (const int clusters : {1, 8}) {
        if (!Launch(mode, bytes, clusters, cycles)) return false;  // warm-up
        WAAV_BENCH_CHECK(cudaDeviceSynchronize());
        std::vector<double> per_round;
        for (int r = 0; r < kRepetitions; ++r) {
          if (!Launch(mode, bytes, clusters, cycles)) return false;
          WAAV_BENCH_CHECK(cudaDeviceSynchronize());
          std::vector<long long> host(static_cast<size_t>(clusters * kBlocks));
          WAAV_BENCH_CHECK(cudaMemcpy(host.data(), cycles, host.size() * sizeof(long long),
                                      cudaMemcpyDeviceToHost));
          for (const long long c : host) per_round.push_back(static_cast<double>(c) / kRounds);
        }
        std::sort(per_round.begin(), per_round.end());
        const double median = per_round[per_round.size() / 2];
        std::printf("%-16s %8d %9d %16.0f %20.1f\n", name, bytes, clusters, median,
                    kBlocks * bytes / median);
      }
    }
  }
  WAAV_BENCH_CHECK(cudaFree(cycles));
  return true;
}

}  // namespace

int main() { return Run() ? 0 : 1; }

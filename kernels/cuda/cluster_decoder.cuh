// The cluster decoder step: the persistent step's work (persistent_decoder.cuh, the same
// parameters and outputs) without grid-wide barriers. Two launches per step:
//
//  * Layers: one thread-block cluster of kClusterDecoderBlocks blocks per batch row (one per
//    multiprocessor). Every block of a cluster keeps the row's residual stream, its LayerNorm'ed
//    copy and the step's activations in its own shared memory; each GEMV's output columns are
//    split over the cluster's blocks, and each block stores its results into every block's
//    shared memory (st.async into distributed shared memory, counted on the receiver's
//    mbarrier: no cluster barrier between phases). Attention splits the keys over the blocks,
//    all six heads per block, and merges the blocks' partials the same way. Eight exchanges
//    per layer, no atomics (the sums have a fixed order), and the rows' clusters never wait for
//    each other. Each block copies its share of each layer's cross K/V (f16) into shared memory
//    ahead of its cross-attention (tensor copies into swizzled head regions for the
//    tensor-core cross-attention; cluster_cross_stage.cuh).
//  * Logits: the final LayerNorm and the tied-embedding GEMV over every multiprocessor, with
//    argmax (suppression), log-sum-exp and the optional raw logits as in the persistent step
//    (the reduction only when one of its outputs is asked for), or the greedy choice with a
//    mask per row and its feed into the next step's inputs (p.choice_out: ArgmaxLogSumExp and
//    FeedChoices without their launches).
//    It is launched with programmatic dependent launch: its blocks start on the
//    multiprocessors the layers leave idle and copy their share of the 40 MB embedding into
//    shared memory and registers before they wait for the layers' output, with an L2
//    evict-first policy (p.l2_hints) so that the layers' weights stay in L2, paced over the
//    layers' time (p.logits_pace_ns) where they run beside them. The staged columns run on
//    tensor cores (p.logits_mma): at one to four rows with the embedding as the mma's A operand
//    (p.logits_mma_wide, 16 columns per mma.sync), at more rows with the inputs as A.
//
// CUDA only (sm_90 clusters); under HIP the launcher reports cudaErrorNotSupported.
#pragma once

#include "kernels/cuda/launch.h"
#include "kernels/cuda/persistent_decoder.cuh"

namespace waav::cuda {

// Blocks per cluster of the layers' launch (16: Hopper's largest, a non-portable size).
inline constexpr int kClusterDecoderBlocks = 16;

// Whether the cluster step runs p's shapes on the current device: f16 cross K/V, the block's
// share of them fits in shared memory, a cluster of kClusterDecoderBlocks blocks can be
// resident, and the device runs this binary's sm_90 code (Sm90CodeRuns: the kernels trap in the
// sm_80 code). Host function (queries the device once per shape).
bool ClusterDecoderAvailable(const PersistentDecoderParams& p);

// Whether the cluster step also makes the greedy choice in its logits launch for p's shapes on a
// device of `sm_count` multiprocessors (p.choice_out; every logits block's columns must fit its
// per-row copy of the masks).
bool ClusterDecoderChooses(const PersistentDecoderParams& p, int sm_count);

// One decoder step as the two launches above on ctx.stream (capturable). Reports and outputs as
// LaunchPersistentDecoder. cudaErrorNotSupported when !ClusterDecoderAvailable(p).
// p.profile_mode == kProfileNoLogits leaves out the logits launch (timing).
cudaError_t LaunchClusterDecoder(const LaunchContext& ctx, const PersistentDecoderParams& p);

}  // namespace waav::cuda

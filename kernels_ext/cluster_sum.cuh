// Split-K without a workspace (sm_90): the CTAs of one thread-block cluster hold partial sums of the same outputs
// in their shared memory, and rank 0 adds the others' through distributed shared memory. Against an fp32 workspace
// this drops the workspace's zeroing, the atomics and the finalize launch, each a few microseconds at decode
// sizes, and the partial sums are added in a fixed order, so repeated calls agree bit for bit. No torch headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace sparseprune {
namespace tw {

// Largest cluster a launch may ask for without opting in to non-portable cluster sizes.
constexpr int kMaxClusterSplits = 8;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
__device__ __forceinline__ uint32_t cluster_ctas() {
  uint32_t ctas;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(ctas));
  return ctas;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// Four floats at the shared-memory byte address `local` of this CTA, read from the CTA of cluster rank `rank`. Not
// volatile: the loads of several ranks may then be in flight together (each one waited for before the next took
// rank 0 about 200 cycles per rank and chunk).
__device__ __forceinline__ float4 ld_peer_f4(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  float4 v;
  asm("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote));
  return v;
}
#endif

// Every thread of every CTA of the cluster calls this with its CTA's partial sums in sums[0 .. floats) (shared
// memory, 16-byte aligned, floats a multiple of 4), threads tid = 0 .. threads-1 of a CTA. Returns true in the CTA of
// rank 0, whose `sums` then hold the cluster's totals (visible to all its threads). The peers' shared memory must
// outlive rank 0's reads: every CTA calls leave_cluster() before it exits, and may do other work in between.
__device__ __forceinline__ bool sum_over_cluster(float* sums, int floats, int tid, int threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cluster_arrive();  // this CTA's partial sums are written ...
  cluster_wait();    // ... and so are every other CTA's
  const bool owner = cluster_rank() == 0;
  if (owner) {
    const uint32_t ctas = cluster_ctas();
    for (int i = 4 * tid; i < floats; i += 4 * threads) {
      const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(sums + i));
      float4 peer[kMaxClusterSplits];
#pragma unroll
      for (uint32_t rank = 1; rank < kMaxClusterSplits; ++rank) {
        if (rank < ctas) peer[rank] = ld_peer_f4(local, rank);
      }
      float4 total = *reinterpret_cast<const float4*>(sums + i);
#pragma unroll
      for (uint32_t rank = 1; rank < kMaxClusterSplits; ++rank) {
        if (rank < ctas) total.x += peer[rank].x, total.y += peer[rank].y, total.z += peer[rank].z, total.w += peer[rank].w;
      }
      *reinterpret_cast<float4*>(sums + i) = total;
    }
    __syncthreads();
  }
  cluster_arrive();  // rank 0 is done reading the peers
  return owner;
#else
  __trap();  // the host clusters only kernels that run sm_90 code
  return false;
#endif
}

// The second half of sum_over_cluster's last barrier: waits until rank 0 no longer reads this CTA's shared memory.
__device__ __forceinline__ void leave_cluster() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cluster_wait();
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), in clusters of `cluster` CTAs when that is more than one. Returns
// an error message or nullptr.
template <typename... Params, typename... Args>
const char* launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             dim3 cluster, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster.x;
  attribute.val.clusterDim.y = cluster.y;
  attribute.val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = cluster.x * cluster.y * cluster.z > 1 ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace tw
}  // namespace sparseprune

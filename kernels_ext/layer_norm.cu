// Residual add + LayerNorm on a feature-major (H, T) activation in one pass over memory. Torch, and torch.compile,
// reduce over dim 0 of that layout in two passes (statistics, then the normalization re-reading x and the residual);
// on an H200 that took BERT-base's 24 norms at 16 x 256 tokens 448 us (bench/results/e2e_h200_bert.md), about three
// times what reading and writing the bytes once costs.
//
// A CTA owns a run of tokens (columns) and all H features. Lane (pair p, group g) of warp w holds tokens 2p, 2p + 1
// of the run at features h = (8 g + w) + i * 8 * kGroups: consecutive lanes read consecutive 4-byte pairs of a
// feature row, and each thread keeps its H / (8 * kGroups) sums in registers between the passes. That count is a
// template parameter, so every load of a thread is issued before the first is used: with a runtime count (loads
// under `i < rows` guards) each waited for the one before, and a norm at 4096 tokens took 42 us instead of a few.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layer_norm.h"

namespace sparseprune {
namespace norm {
namespace {

constexpr int kWarps = 8;

template <typename T> struct Pair;
template <> struct Pair<__half> {
  using type = __half2;
  static __device__ float2 to_float2(type v) { return __half22float2(v); }
  static __device__ type from_float2(float2 v) { return __float22half2_rn(v); }
  static __device__ type add(type a, type b) { return __hadd2(a, b); }
  static __device__ float to_float(__half v) { return __half2float(v); }
};
template <> struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ float2 to_float2(type v) { return __bfloat1622float2(v); }
  static __device__ type from_float2(float2 v) { return __float22bfloat162_rn(v); }
  static __device__ type add(type a, type b) { return __hadd2(a, b); }
  static __device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
};

// Tokens t and t + 1 of feature row `row`, read unconditionally (past T, from the last token: its values are never
// stored), so that nothing orders a thread's loads: one 4-byte load when T is even (every pair aligned and whole).
template <typename T, bool kEvenT>
__device__ __forceinline__ typename Pair<T>::type load_pair(const T* row, int64_t t, int64_t T_) {
  using P = typename Pair<T>::type;
  if constexpr (kEvenT) {
    return *reinterpret_cast<const P*>(row + (t < T_ ? t : T_ - 2));
  } else {
    P out;
    out.x = row[t < T_ ? t : T_ - 1];
    out.y = row[t + 1 < T_ ? t + 1 : T_ - 1];
    return out;
  }
}

template <typename T, bool kEvenT>
__device__ __forceinline__ void store_pair(T* row, int64_t t, int64_t T_, typename Pair<T>::type v) {
  if constexpr (kEvenT) {
    if (t < T_) *reinterpret_cast<typename Pair<T>::type*>(row + t) = v;
  } else {
    if (t < T_) row[t] = v.x;
    if (t + 1 < T_) row[t + 1] = v.y;
  }
}

// Sum over the CTA's threads that hold the same token pair: across the warp's feature groups by shuffles, then
// across warps through shared memory.
template <int kPairs>
__device__ __forceinline__ float2 pair_sum(float2 v, float2 (*partial)[kPairs], int warp, int lane) {
#pragma unroll
  for (int offset = kPairs; offset < 32; offset <<= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
  }
  __syncthreads();  // the previous reduction's readers are done with `partial`
  if (lane < kPairs) partial[warp][lane] = v;
  __syncthreads();
  float2 total = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    total.x += partial[w][lane % kPairs].x;
    total.y += partial[w][lane % kPairs].y;
  }
  return total;
}

// kPairs token pairs per CTA; kRows features per thread: H = kRows * 8 * kGroups; kEvenT: T is even.
template <typename T, int kPairs, int kRows, bool kEvenT>
__global__ void __launch_bounds__(kWarps * 32) add_layer_norm_kernel(Problem p) {
  using P = Pair<T>;
  using T2 = typename P::type;
  constexpr int kGroups = 32 / kPairs, kRowStep = kWarps * kGroups;
  __shared__ float2 partial[kWarps][kPairs];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_row = (lane / kPairs) * kWarps + warp;
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * kPairs + lane % kPairs) * 2;
  const T* x = static_cast<const T*>(p.x);
  const T* res = static_cast<const T*>(p.residual);

  T2 xs[kRows], rs[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int64_t offset = static_cast<int64_t>(first_row + i * kRowStep) * p.T;
    xs[i] = load_pair<T, kEvenT>(x + offset, t, p.T);
    rs[i] = load_pair<T, kEvenT>(res + offset, t, p.T);
  }
  T2 sums[kRows];
  float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    sums[i] = P::add(xs[i], rs[i]);
    const float2 f = P::to_float2(sums[i]);
    acc.x += f.x;
    acc.y += f.y;
  }
  const float inv_h = 1.0f / static_cast<float>(p.H);
  float2 mean = pair_sum<kPairs>(acc, partial, warp, lane);
  mean.x *= inv_h;
  mean.y *= inv_h;
  acc = make_float2(0.0f, 0.0f);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float2 f = P::to_float2(sums[i]);
    acc.x += (f.x - mean.x) * (f.x - mean.x);
    acc.y += (f.y - mean.y) * (f.y - mean.y);
  }
  const float2 var = pair_sum<kPairs>(acc, partial, warp, lane);
  const float rstd_x = rsqrtf(var.x * inv_h + p.eps), rstd_y = rsqrtf(var.y * inv_h + p.eps);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = first_row + i * kRowStep;
    const float g = P::to_float(weight[row]), b = P::to_float(bias[row]);
    const float2 f = P::to_float2(sums[i]);
    const float2 y = make_float2((f.x - mean.x) * rstd_x * g + b, (f.y - mean.y) * rstd_y * g + b);
    store_pair<T, kEvenT>(out + static_cast<int64_t>(row) * p.T, t, p.T, P::from_float2(y));
  }
}

// Instantiates the kernel for H = kSteps * kHStep, for every kSteps up to kMaxH / kHStep, and runs the one for p.H.
template <typename T, int kPairs, int kSteps = 1>
void launch_with(const Problem& p) {
  if constexpr (kSteps <= kMaxH / kHStep) {
    if (p.H != kSteps * kHStep) return launch_with<T, kPairs, kSteps + 1>(p);
    constexpr int kGroups = 32 / kPairs;
    constexpr int kRows = kSteps * static_cast<int>(kHStep) / (kWarps * kGroups);
    const int64_t tokens_per_cta = 2 * kPairs;
    const dim3 grid(static_cast<unsigned>((p.T + tokens_per_cta - 1) / tokens_per_cta));
    if (p.T % 2 == 0) {
      add_layer_norm_kernel<T, kPairs, kRows, true><<<grid, kWarps * 32, 0, p.stream>>>(p);
    } else {
      add_layer_norm_kernel<T, kPairs, kRows, false><<<grid, kWarps * 32, 0, p.stream>>>(p);
    }
  }
}

// Runs of 32 tokens fill the GPU from about 4000 tokens (128 CTAs on 132 SMs); fewer tokens take runs of 8, so
// that one sequence of 128-256 tokens still spreads over 16-32 SMs.
constexpr int64_t kWideRunMinTokens = 2048;

template <typename T>
void launch_typed(const Problem& p) {
  if (p.T >= kWideRunMinTokens) {
    launch_with<T, 16>(p);
  } else {
    launch_with<T, 4>(p);
  }
}

}  // namespace

const char* launch_add_layer_norm(const Problem& p) {
  if (!supports(p.H)) return "H must be a positive multiple of 64 up to 1024";
  if (p.T == 0) return nullptr;
  if (p.dtype == DType::kHalf) {
    launch_typed<__half>(p);
  } else {
    launch_typed<__nv_bfloat16>(p);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace norm
}  // namespace sparseprune

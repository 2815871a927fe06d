// 2:4 sparse GEMM on Hopper sparse tensor cores, built from CUTLASS 3.x collectives (sm90 wgmma.sp, TMA,
// warp-specialized cooperative persistent kernel), plus CUTLASS's 2:4 compressor for the weight.
//
// One kernel per dtype keeps the build short: the bias is always wired in (a null pointer reads as zero) and the
// activation is chosen per call in the epilogue, instead of one template instantiation per (bias, activation).
#include "sp24_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/transform/device/transform_universal_adapter.hpp"
#include "cutlass/transform/kernel/sparse_gemm_compressor.hpp"
#include "cutlass/util/packed_stride.hpp"

namespace sparseprune {
namespace sp24 {
namespace {

// The fused activation as a per-call argument (code: 0 none, 1 relu, 2 erf-GELU, as tw::Activation). The
// epilogue instantiates it for scalars (to find Arguments) and for fragments (to compute).
template <class T>
struct SelectedActivation {
  static constexpr bool kIsHeavy = true;
  struct Arguments {
    int code = 0;
  };

  CUTLASS_HOST_DEVICE T operator()(T const& v, Arguments const& args) const {
    if (args.code == static_cast<int>(Activation::kRelu)) return cutlass::epilogue::thread::ReLu<T>{}(v);
    if (args.code == static_cast<int>(Activation::kGelu)) return cutlass::epilogue::thread::GELU<T>{}(v);
    return v;
  }
};

template <class T, int N>
struct SelectedActivation<cutlass::Array<T, N>> {
  static constexpr bool kIsHeavy = true;
  using Arguments = typename SelectedActivation<T>::Arguments;

  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& v, Arguments const& args) const {
    cutlass::Array<T, N> out;
    SelectedActivation<T> op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = op(v[i], args);
    return out;
  }
};

using ProblemShape = cute::Shape<int, int, int, int>;  // (GEMM M = N out, GEMM N = rows of x, K, batch)

// CTA tile (N out x rows of x x logical K) and cluster. K = 128 is the sparse wgmma's natural step (64 stored
// values per row); the 1 x 2 cluster multicasts each weight tile to two CTAs that share it.
template <class Element>
struct Sp24Kernel {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;

  using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<SelectedActivation, Element, float, Element>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor, kAlign,
      Element, cutlass::layout::ColumnMajor, kAlign, cutlass::epilogue::TmaWarpSpecializedCooperative,
      Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, Element, cutlass::layout::RowMajor, kAlign, Element,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  using SparseConfig = typename Mainloop::SparseConfig;
  using StrideW = cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>;
  using Compressor = cutlass::transform::device::TransformUniversalAdapter<
      cutlass::transform::kernel::StructuredSparseCompressor<ProblemShape, Element, cutlass::layout::RowMajor,
                                                             SparseConfig, cutlass::arch::Sm90>>;
  using CompressorUtility = cutlass::transform::kernel::StructuredSparseCompressorUtility<
      ProblemShape, Element, cutlass::layout::RowMajor, SparseConfig>;
};

ProblemShape gemm_shape(int64_t N, int64_t M, int64_t K) {
  return {static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), 1};
}

template <class Element>
typename Sp24Kernel<Element>::Gemm::Arguments gemm_arguments(const Problem& p) {
  using Cfg = Sp24Kernel<Element>;
  using Gemm = typename Cfg::Gemm;
  const int n = static_cast<int>(p.N), m = static_cast<int>(p.M), k = static_cast<int>(p.K);
  const ProblemShape shape{n, m, k, 1};
  // x is the K-major operand B (GEMM N = rows of x); y is the column-major D, so its columns are rows of y.
  using StrideX = typename Gemm::GemmKernel::StrideB;
  using StrideY = typename Gemm::GemmKernel::StrideD;
  const auto stride_x = cutlass::make_cute_packed_stride(StrideX{}, cute::make_shape(m, k, 1));
  const auto stride_y = cutlass::make_cute_packed_stride(StrideY{}, cute::make_shape(n, m, 1));
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      shape,
      {static_cast<const Element*>(p.values), Cfg::SparseConfig::fill_layoutA(shape), static_cast<const Element*>(p.x),
       stride_x, static_cast<const typename Cfg::Mainloop::ElementE*>(p.meta), Cfg::SparseConfig::fill_layoutE(shape)},
      {{}, nullptr, stride_y, static_cast<Element*>(p.y), stride_y},
  };
  args.epilogue.thread.bias_ptr = static_cast<const Element*>(p.bias);
  args.epilogue.thread.activation.code = static_cast<int>(p.activation);
  args.hw_info.device_id = p.device;
  args.hw_info.sm_count = p.num_sms;
  // Walk output tiles in swizzled groups of 8 so concurrent CTAs share operand panels in L2: with the default
  // (no swizzle) a wave of CTAs streams the whole weight from DRAM again for every pair of x panels.
  args.scheduler.max_swizzle_size = 8;
  return args;
}

template <class Element>
const char* run_gemm(const Problem& p) {
  using Gemm = typename Sp24Kernel<Element>::Gemm;
  const auto args = gemm_arguments<Element>(p);
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) return "the 2:4 GEMM cannot run this problem (CUTLASS can_implement)";
  status = gemm.initialize(args, p.workspace, p.stream);
  if (status != cutlass::Status::kSuccess) return cutlass::cutlassGetStatusString(status);
  status = gemm.run(p.stream);
  if (status != cutlass::Status::kSuccess) return cutlass::cutlassGetStatusString(status);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <class Element>
const char* run_compress(const void* w, int64_t N, int64_t K, void* values, void* meta, int num_sms,
                         cudaStream_t stream) {
  using Cfg = Sp24Kernel<Element>;
  using Compressor = typename Cfg::Compressor;
  const ProblemShape shape = gemm_shape(N, 1, K);
  const auto stride_w = cutlass::make_cute_packed_stride(typename Cfg::StrideW{},
                                                         cute::make_shape(static_cast<int>(N), static_cast<int>(K), 1));
  cutlass::KernelHardwareInfo hw_info;
  hw_info.sm_count = num_sms;
  typename Compressor::Arguments args{shape, {w, stride_w, values, meta}, {hw_info}};
  Compressor compressor;
  cutlass::Status status = compressor.can_implement(args);
  if (status != cutlass::Status::kSuccess) return "the 2:4 compressor needs K a multiple of 4";
  // The compressor's workspace only mirrors its shared-memory size for older callers; it reads none.
  status = compressor.initialize(args, nullptr, stream);
  if (status != cutlass::Status::kSuccess) return cutlass::cutlassGetStatusString(status);
  status = compressor.run(stream);
  if (status != cutlass::Status::kSuccess) return cutlass::cutlassGetStatusString(status);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

CompressedSizes compressed_sizes(int64_t N, int64_t K) {
  // The layout depends only on the element width, so the fp16 configuration answers for bf16 as well.
  using Utility = typename Sp24Kernel<cutlass::half_t>::CompressorUtility;
  const ProblemShape shape = gemm_shape(N, 1, K);
  const Utility utility(shape, cutlass::make_cute_packed_stride(typename Sp24Kernel<cutlass::half_t>::StrideW{},
                                                                cute::make_shape(static_cast<int>(N),
                                                                                 static_cast<int>(K), 1)));
  return {utility.get_tensorA_k_physical(), static_cast<int64_t>(utility.get_tensor_E_bytes())};
}

bool available() {
  static const bool ok = [] {  // per process: one GPU architecture assumed, as for the TW wgmma kernels
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, cutlass::device_kernel<Sp24Kernel<cutlass::half_t>::Kernel>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90;
  }();
  return ok;
}

const char* launch_compress(const void* w, int64_t N, int64_t K, DType dtype, void* values, void* meta, int num_sms,
                            cudaStream_t stream) {
  if (!available()) return "the 2:4 kernels need sm_90a machine code and a Hopper (sm_90) device";
  return dtype == DType::kHalf ? run_compress<cutlass::half_t>(w, N, K, values, meta, num_sms, stream)
                               : run_compress<cutlass::bfloat16_t>(w, N, K, values, meta, num_sms, stream);
}

int64_t workspace_bytes(const Problem& p) {
  return static_cast<int64_t>(p.dtype == DType::kHalf
                                  ? Sp24Kernel<cutlass::half_t>::Gemm::get_workspace_size(
                                        gemm_arguments<cutlass::half_t>(p))
                                  : Sp24Kernel<cutlass::bfloat16_t>::Gemm::get_workspace_size(
                                        gemm_arguments<cutlass::bfloat16_t>(p)));
}

const char* launch_sp24_matmul(const Problem& p) {
  if (!available()) return "the 2:4 kernels need sm_90a machine code and a Hopper (sm_90) device";
  return p.dtype == DType::kHalf ? run_gemm<cutlass::half_t>(p) : run_gemm<cutlass::bfloat16_t>(p);
}

}  // namespace sp24
}  // namespace sparseprune

// The CUTLASS 3.x sm90 2:4 GEMM as a template over its CTA tile and whether it adds a source, shared by the
// one-kernel-per-file sources (sp24_gemm_<tile>[_source].cu) so each instantiation compiles in its own translation
// unit, in parallel.
//
// One kernel per (dtype, tile, source): the bias is always wired in (a null pointer reads as zero) and the activation
// is chosen per call in the epilogue, instead of one template instantiation per (bias, activation). The source
// kernels add a partial y from another pass (a weight split into two 2:4 matrices) in the epilogue; they are separate
// instantiations because an epilogue that can read C gives up the delayed TMA store and shared memory for C stages,
// which the plain kernels keep.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "sp24_gemm.h"

namespace sparseprune {
namespace sp24 {

// The fused activation as a per-call argument (code: 0 none, 1 relu, 2 erf-GELU, as tw::Activation). The
// epilogue instantiates it for scalars (to find Arguments) and for fragments (to compute). The fragment version
// branches once per fragment, on a value uniform over the launch: branching per element let the compiler turn the
// choice into selects that evaluate GELU's erf for every output, whatever the code.
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
    if (args.code == static_cast<int>(Activation::kRelu)) {
      return cutlass::epilogue::thread::ReLu<cutlass::Array<T, N>>{}(v);
    }
    if (args.code == static_cast<int>(Activation::kGelu)) {
      return cutlass::epilogue::thread::GELU<cutlass::Array<T, N>>{}(v);
    }
    return v;
  }
};

using ProblemShape = cute::Shape<int, int, int, int>;  // (GEMM M = N out, GEMM N = rows of x, K, batch)

// CTA tiles (N out x rows of x x logical K), all with a 2 x 1 cluster: the two CTAs of a cluster hold different
// weight rows and share one panel of x, which TMA multicasts. All keep K = 128 (64 stored values per row), so the
// compressed weight and its metadata are laid out the same for every tile and one compression serves them all.
// Cooperative tiles split each tile's rows between both consumer warpgroups; ping-pong tiles give each warpgroup a
// tile of its own in turn, so one warpgroup's epilogue runs under the other's MMAs, which pays when K is short.
struct WideTile {  // most layers: 128 output features by 256 rows of x
  using Cta = cute::Shape<cute::_128, cute::_256, cute::_128>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct TallTile {  // layers with thousands of output features: 256 features by 128 rows of x
  using Cta = cute::Shape<cute::_256, cute::_128, cute::_128>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct PingpongTile {  // short K: 128 features by 128 rows of x per warpgroup
  using Cta = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
};
// A few rows of x (decode): 128 features by 64 rows. The tall tile multiplies 128 rows of x whatever M is, so at 16
// rows seven eighths of its sparse MMAs work on padding, and a 4096 x 11008 weight makes only 43 of its tiles, each a
// 43rd of the weight for one SM to stream; this tile does half that arithmetic per output feature, makes 86 tiles
// there, and keeps six stages of the weight in flight.
struct NarrowTile {
  using Cta = cute::Shape<cute::_128, cute::_64, cute::_128>;
  using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

template <class Element, class Tile, bool kAddsSource>
struct Sp24Kernel {
  using TileShape = typename Tile::Cta;
  using ElementSource = std::conditional_t<kAddsSource, Element, void>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;

  using Fusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<SelectedActivation, Element, float, Element>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementSource, cutlass::layout::ColumnMajor, kAlign,
      Element, cutlass::layout::ColumnMajor, kAlign, typename Tile::EpilogueSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassSparseTensorOp, Element, cutlass::layout::RowMajor, kAlign, Element,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename Tile::Schedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using SparseConfig = typename Mainloop::SparseConfig;
};

template <class Element, class Tile, bool kAddsSource>
typename Sp24Kernel<Element, Tile, kAddsSource>::Gemm::Arguments gemm_arguments(const Problem& p) {
  using Cfg = Sp24Kernel<Element, Tile, kAddsSource>;
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
      {{}, static_cast<const typename Cfg::ElementSource*>(p.source), stride_y, static_cast<Element*>(p.y), stride_y},
  };
  // D = act(acc + beta * source + bias): the source has y's shape and layout.
  args.epilogue.thread.beta = kAddsSource ? 1.0f : 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const Element*>(p.bias);
  args.epilogue.thread.activation.code = static_cast<int>(p.activation);
  args.hw_info.device_id = p.device;
  args.hw_info.sm_count = p.num_sms;
  // Walk output tiles in swizzled pairs so concurrent CTAs share operand panels in L2: with no swizzle a wave of
  // CTAs streamed the whole weight from DRAM again for every pair of x panels (ncu: 84% of DRAM bandwidth at 8192^3).
  args.scheduler.max_swizzle_size = 2;
  return args;
}

template <class Element, class Tile, bool kAddsSource>
int64_t gemm_workspace_bytes(const Problem& p) {
  return static_cast<int64_t>(Sp24Kernel<Element, Tile, kAddsSource>::Gemm::get_workspace_size(
      gemm_arguments<Element, Tile, kAddsSource>(p)));
}

template <class Element, class Tile, bool kAddsSource>
const char* run_gemm(const Problem& p) {
  using Gemm = typename Sp24Kernel<Element, Tile, kAddsSource>::Gemm;
  const auto args = gemm_arguments<Element, Tile, kAddsSource>(p);
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

// Each kernel's source file defines its entry points: the GEMM and its scratch size, for either dtype, and the
// architecture of its machine code.
#define SPARSEPRUNE_SP24_KERNEL_ENTRIES(NAME)      \
  const char* run_##NAME(const Problem& p);        \
  int64_t NAME##_workspace_bytes(const Problem& p); \
  int NAME##_binary_version();
SPARSEPRUNE_SP24_KERNEL_ENTRIES(wide)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(tall)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(pingpong)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(narrow)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(wide_source)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(tall_source)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(pingpong_source)
SPARSEPRUNE_SP24_KERNEL_ENTRIES(narrow_source)
#undef SPARSEPRUNE_SP24_KERNEL_ENTRIES

// The architecture (e.g. 90) of the fp16 kernel's machine code that the current device would run, or -1 when none.
template <class Tile, bool kAddsSource>
int binary_version() {
  using Kernel = typename Sp24Kernel<cutlass::half_t, Tile, kAddsSource>::Kernel;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, cutlass::device_kernel<Kernel>) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return attr.binaryVersion;
}

#define SPARSEPRUNE_SP24_KERNEL(NAME, TILE, ADDS_SOURCE)                                                 \
  const char* run_##NAME(const Problem& p) {                                                            \
    return p.dtype == DType::kHalf ? run_gemm<cutlass::half_t, TILE, ADDS_SOURCE>(p)                    \
                                   : run_gemm<cutlass::bfloat16_t, TILE, ADDS_SOURCE>(p);               \
  }                                                                                                     \
  int64_t NAME##_workspace_bytes(const Problem& p) {                                                    \
    return p.dtype == DType::kHalf ? gemm_workspace_bytes<cutlass::half_t, TILE, ADDS_SOURCE>(p)        \
                                   : gemm_workspace_bytes<cutlass::bfloat16_t, TILE, ADDS_SOURCE>(p);   \
  }                                                                                                     \
  int NAME##_binary_version() { return binary_version<TILE, ADDS_SOURCE>(); }

}  // namespace sp24
}  // namespace sparseprune

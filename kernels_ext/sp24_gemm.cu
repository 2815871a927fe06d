// 2:4 sparse GEMM on Hopper sparse tensor cores: the CTA tile choice, CUTLASS's 2:4 compressor for the weight and
// the size queries. The GEMM kernels themselves live one per file (sp24_gemm_<tile>.cu, and sp24_gemm_<tile>_source.cu
// for the kernels that add a source).
#include "sp24_gemm.h"

#include <algorithm>
#include <iterator>

#include "cutlass/transform/device/transform_universal_adapter.hpp"
#include "cutlass/transform/kernel/sparse_gemm_compressor.hpp"
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
namespace {

// Every tile keeps K = 128, so the wide tile's sparse layout describes the compressed weight for all of them.
template <class Element>
struct Compression {
  using SparseConfig = typename Sp24Kernel<Element, WideTile, false>::SparseConfig;
  using StrideW = cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>;
  using Compressor = cutlass::transform::device::TransformUniversalAdapter<
      cutlass::transform::kernel::StructuredSparseCompressor<ProblemShape, Element, cutlass::layout::RowMajor,
                                                             SparseConfig, cutlass::arch::Sm90>>;
  using Utility = cutlass::transform::kernel::StructuredSparseCompressorUtility<ProblemShape, Element,
                                                                                cutlass::layout::RowMajor, SparseConfig>;
};

template <class Tile, bool kAddsSource>
constexpr bool kSharesLayout = std::is_same_v<typename Sp24Kernel<cutlass::half_t, WideTile, false>::SparseConfig,
                                              typename Sp24Kernel<cutlass::half_t, Tile, kAddsSource>::SparseConfig>;
template <class... Tiles>
constexpr bool kAllShareLayout = ((kSharesLayout<Tiles, false> && kSharesLayout<Tiles, true>) && ...);
static_assert(kAllShareLayout<WideTile, TallTile, PingpongTile, NarrowTile>,
              "every kernel must read the one compressed layout");

ProblemShape weight_shape(int64_t N, int64_t K) {
  return {static_cast<int>(N), 1, static_cast<int>(K), 1};
}

template <class Element>
auto weight_stride(int64_t N, int64_t K) {
  return cutlass::make_cute_packed_stride(typename Compression<Element>::StrideW{},
                                          cute::make_shape(static_cast<int>(N), static_cast<int>(K), 1));
}

template <class Element>
const char* run_compress(const void* w, int64_t N, int64_t K, void* values, void* meta, int num_sms,
                         cudaStream_t stream) {
  using Compressor = typename Compression<Element>::Compressor;
  cutlass::KernelHardwareInfo hw_info;
  hw_info.sm_count = num_sms;
  typename Compressor::Arguments args{
      weight_shape(N, K), {w, weight_stride<Element>(N, K), values, meta}, {hw_info}};
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

// One kernel's entry points, defined in its own source file.
struct KernelEntries {
  const char* (*run)(const Problem&);
  int64_t (*workspace_bytes)(const Problem&);
  int (*binary_version)();
};

#define SPARSEPRUNE_SP24_ENTRIES(NAME) {run_##NAME, NAME##_workspace_bytes, NAME##_binary_version}
// Indexed by [adds a source][Tile], so the forced tiles and auto's choice all dispatch through the one table; kAuto
// is resolved to a tile before any lookup.
constexpr KernelEntries kKernelEntries[2][static_cast<int>(kLastTile) + 1] = {
    {{},
     SPARSEPRUNE_SP24_ENTRIES(wide),
     SPARSEPRUNE_SP24_ENTRIES(tall),
     SPARSEPRUNE_SP24_ENTRIES(pingpong),
     SPARSEPRUNE_SP24_ENTRIES(narrow)},
    {{},
     SPARSEPRUNE_SP24_ENTRIES(wide_source),
     SPARSEPRUNE_SP24_ENTRIES(tall_source),
     SPARSEPRUNE_SP24_ENTRIES(pingpong_source),
     SPARSEPRUNE_SP24_ENTRIES(narrow_source)},
};
#undef SPARSEPRUNE_SP24_ENTRIES

// The table is sized by the Tile enum, so a tile without its row entries would compile as null pointers.
constexpr bool every_tile_has_entries() {
  for (const auto& row : kKernelEntries) {
    for (size_t tile = 1; tile < std::size(row); ++tile) {
      if (row[tile].run == nullptr || row[tile].workspace_bytes == nullptr || row[tile].binary_version == nullptr) {
        return false;
      }
    }
  }
  return true;
}
static_assert(every_tile_has_entries(), "one set of entry points per Tile, with and without a source");

const KernelEntries& entries(const Problem& p) {
  return kKernelEntries[p.source != nullptr][static_cast<int>(resolve_tile(p))];
}

}  // namespace

Tile resolve_tile(const Problem& p) {
  if (p.tile != Tile::kAuto) return p.tile;
  // Measured on an H100 (bench/results/sp24_h100.md): the tall tile wins on wide layers (8192^3: 1.37x against the
  // wide tile's 1.17x over cuBLAS) and loses badly on narrow ones (VGG16 conv4, 512 features: 0.57x against 0.96x).
  // With a short K each tile runs a few K steps, and ping-pong hides one warpgroup's epilogue under the other's MMAs
  // (H200, bench/results/sp24_h200_tiles.md: BERT QKV, K = 768, 1.03x against the wide tile's 0.93x); with a long
  // K the cooperative tiles win (BERT FFN out, K = 3072: 0.90x against 1.01x). Where a few hundred rows of x or few
  // output features leave the cooperative tiles (256 x 128) on at most half the SMs, the ping-pong tile's twice as
  // many tiles fill more of them: over nmSPARSE's operator shapes on an H200 (bench/results/nm_h200_nmsparse_shapes.md)
  // 1.25-1.69x faster than the tile the rule above took, at M = 256 and at M = 1024 with 1024 features. At one block
  // of 65-128 rows the tall tile stays: the ping-pong tile was 1-4% slower there (sp24_h200.md, sp24_h200_turns.md).
  // Up to one narrow block of rows the narrow tile wastes less arithmetic on padding and streams the weight from
  // twice the tall tile's SMs (H200, 16 rows of 4096 -> 11008: 20.7 us against the tall tile's 30.5).
  if (p.M <= kNarrowMaxM) return Tile::kNarrow;
  const int64_t cooperative_tiles = (p.N + 255) / 256 * ((p.M + 127) / 128);
  if (p.M > 128 && 2 * cooperative_tiles <= p.num_sms) return Tile::kPingpong;
  if (p.N >= kTallMinN) return Tile::kTall;
  return p.K <= kPingpongMaxK ? Tile::kPingpong : Tile::kWide;
}

CompressedSizes compressed_sizes(int64_t N, int64_t K) {
  // The layout depends only on the element width, so the fp16 configuration answers for bf16 as well.
  const typename Compression<cutlass::half_t>::Utility utility(weight_shape(N, K),
                                                               weight_stride<cutlass::half_t>(N, K));
  return {utility.get_tensorA_k_physical(), static_cast<int64_t>(utility.get_tensor_E_bytes())};
}

bool available() {
  // Per process: one GPU architecture assumed, as for the TW wgmma kernels.
  static const bool ok = std::all_of(std::begin(kKernelEntries), std::end(kKernelEntries), [](const auto& row) {
    return std::all_of(std::begin(row) + 1, std::end(row),
                       [](const KernelEntries& kernel) { return kernel.binary_version() == 90; });
  });
  return ok;
}

const char* launch_compress(const void* w, int64_t N, int64_t K, DType dtype, void* values, void* meta, int num_sms,
                            cudaStream_t stream) {
  if (!available()) return "the 2:4 kernels need sm_90a machine code and a Hopper (sm_90) device";
  return dtype == DType::kHalf ? run_compress<cutlass::half_t>(w, N, K, values, meta, num_sms, stream)
                               : run_compress<cutlass::bfloat16_t>(w, N, K, values, meta, num_sms, stream);
}

int64_t workspace_bytes(const Problem& p) { return entries(p).workspace_bytes(p); }

const char* launch_sp24_matmul(const Problem& p) {
  if (!available()) return "the 2:4 kernels need sm_90a machine code and a Hopper (sm_90) device";
  return entries(p).run(p);
}

}  // namespace sp24
}  // namespace sparseprune

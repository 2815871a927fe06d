// The 2:4 GEMM with the tall CTA tile (256 output features x 128 rows of x); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_KERNEL(tall, TallTile, false)
}  // namespace sp24
}  // namespace sparseprune

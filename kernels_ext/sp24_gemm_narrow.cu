// The 2:4 GEMM with the narrow CTA tile (128 output features x 64 rows of x); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_KERNEL(narrow, NarrowTile, false)
}  // namespace sp24
}  // namespace sparseprune

// The 2:4 GEMM with the 192-row wide CTA tile (128 output features x 192 rows of x); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_KERNEL(wide192, Wide192Tile, false)
}  // namespace sp24
}  // namespace sparseprune

// The 2:4 GEMM with the 192-row wide CTA tile (128 output features x 192 rows of x) that adds a source to its result
// (the second pass of a weight split into two 2:4 matrices); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_KERNEL(wide192_source, Wide192Tile, true)
}  // namespace sp24
}  // namespace sparseprune

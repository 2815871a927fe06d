// The 2:4 GEMM with the tall CTA tile (256 output features x 128 rows of x) that adds a source to its result (the
// second pass of a weight split into two 2:4 matrices); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_KERNEL(tall_source, TallTile, true)
}  // namespace sp24
}  // namespace sparseprune

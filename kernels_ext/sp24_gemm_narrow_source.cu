// The 2:4 GEMM with the narrow CTA tile (128 output features x 64 rows of x) that adds a source to its result
// (the second pass of a weight split into two 2:4 matrices); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_KERNEL(narrow_source, NarrowTile, true)
}  // namespace sp24
}  // namespace sparseprune

// The 2:4 GEMM with the ping-pong 128 x 128 CTA tile (output features x rows of x per consumer warpgroup); see sp24_kernel.cuh.
#include "sp24_kernel.cuh"

namespace sparseprune {
namespace sp24 {
SPARSEPRUNE_SP24_TILE(pingpong, PingpongTile)
}  // namespace sp24
}  // namespace sparseprune

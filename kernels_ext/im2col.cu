// im2col into the feature-major layout (see im2col.h), staged through shared memory.
//
// The matrix is kh*kw times the input's size, so the copy is bound by its writes. One CTA owns one channel of a
// group of consecutive images (planes small enough to stage whole) or one band of output rows of one image (larger
// planes): it stages the input rows those outputs read, zero padding included, in shared memory, then writes each
// of the channel's kh*kw output rows as one contiguous run (row (c, i, j), columns b*L + oh0*ow ...), in 16-byte
// stores where the run allows. Staging makes every input element a shared memory read instead of an L1 load per
// output; the runs keep warps' stores on whole 128-byte lines; grouping images keeps the runs of small planes (VGG
// on 32 x 32 images ends in 2 x 2 planes) long.
//
// With stride 1 along the width and output rows a multiple of 8 wide, the CTA stages kw copies of its rows, copy j
// shifted left by j*dw columns: eight neighbouring outputs of tap (i, j) are then eight aligned neighbours in copy
// j, one 16-byte shared load per 16-byte store. Otherwise it stages one copy and gathers each output on its own.
#include "im2col.h"

#include <algorithm>

namespace sparseprune {
namespace im2col {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxShiftedCopies = 5;         // kw beyond this stages one copy: kw copies would crowd the SM
constexpr int kBandBytes = 16 * 1024;        // shared memory a CTA aims at, so that several CTAs share an SM
constexpr int kMaxBandBytes = 200 * 1024;    // a single output row's staging may not exceed this
constexpr int kGroupOutputs = 4096;          // outputs per channel a CTA of small planes aims at
// Planes of fewer outputs than this group images per CTA. On an H200, grouping made VGG's convolutions of 2 x 2 and
// 4 x 4 planes 1.05-3.8x faster (16 and 256 images), but its im2col of 16 x 16 and 28 x 28 planes up to 1.8x slower
// at 8-16 images (bench/results/conv_h200_im2col_groups.md): fewer, longer CTAs.
constexpr int kGroupBelow = 64;

struct Band {
  int rows;         // output rows per band (the last band may have fewer)
  int input_rows;   // staged input rows of a full band
  int pitch;        // staged row length in elements
  int copies;       // kw shifted copies, or 1
  int vector;       // outputs per store: 8, 4, 2 or 1
  int count;        // bands per plane
  int images;       // consecutive images per CTA: 1 unless one band covers the plane
  int groups;       // image groups: ceil(batch / images)
  int64_t image_elements;  // staged elements per image
  int64_t smem_bytes;
};

bool takes_shifted_copies(const Problem& p) { return p.sw == 1 && p.out_w % 8 == 0 && p.kw <= kMaxShiftedCopies; }

__host__ __device__ int input_rows_of(const Problem& p, int out_rows) { return (out_rows - 1) * p.sh + (p.kh - 1) * p.dh + 1; }

// The widest store that divides every run: a run starts at b*L + oh0*ow and holds rows*ow outputs.
int store_vector(int plane, int band_outputs) {
  for (int v = 8; v > 1; v /= 2) {
    if (plane % v == 0 && band_outputs % v == 0) return v;
  }
  return 1;
}

Band plan_band(const Problem& p) {
  Band band{};
  const bool shifted = takes_shifted_copies(p);
  band.copies = shifted ? p.kw : 1;
  band.pitch = shifted ? p.out_w : (p.out_w - 1) * p.sw + (p.kw - 1) * p.dw + 1;  // padded columns read
  const int64_t row_bytes = int64_t{band.copies} * band.pitch * 2;
  const auto bytes_of = [&](int rows) { return row_bytes * input_rows_of(p, rows); };
  band.rows = p.out_h;
  while (band.rows > 1 && bytes_of(band.rows) > kBandBytes) band.rows = (band.rows + 1) / 2;
  if (!shifted && band.rows < p.out_h) {
    // Runs of a partial plane start at oh0*ow: round the rows so those starts keep the plane's store width.
    const int plane_vector = store_vector(p.out_h * p.out_w, p.out_h * p.out_w);
    while (band.rows < p.out_h && (int64_t{band.rows} * p.out_w) % plane_vector != 0) ++band.rows;
  }
  band.input_rows = input_rows_of(p, band.rows);
  band.vector = shifted ? 8 : store_vector(p.out_h * p.out_w, band.rows * p.out_w);
  band.count = (p.out_h + band.rows - 1) / band.rows;
  band.image_elements = int64_t{band.copies} * band.input_rows * band.pitch;
  const int64_t plane = int64_t{p.out_h} * p.out_w;
  const int64_t by_outputs = (kGroupOutputs + plane - 1) / plane;
  const int64_t by_bytes = kBandBytes / (2 * band.image_elements);
  const int64_t images = std::max<int64_t>(1, std::min({by_outputs, by_bytes, int64_t{p.batch}}));
  band.images = band.count > 1 || plane >= kGroupBelow ? 1 : static_cast<int>(images);
  band.groups = (p.batch + band.images - 1) / band.images;
  band.smem_bytes = 2 * band.image_elements * band.images;
  return band;
}

template <int kVector>
struct alignas(2 * kVector) Run {
  uint16_t v[kVector];
};

// Stages the input rows of `images` consecutive images from image b0: element (r, col) of the padded input goes to
// every copy j that reads it at column col - j*dw. Out-of-image positions stage zeros, so the writes need no bounds
// checks. Without kGrouped, images is 1 and the image arithmetic compiles away.
template <bool kGrouped>
__device__ void stage_rows(const Problem& p, const Band& band, const uint16_t* channel, int b0, int images,
                           int first_row, int rows, uint16_t* tile) {
  const int read_cols = band.copies > 1 ? band.pitch + (band.copies - 1) * p.dw : band.pitch;
  const int per_image = rows * read_cols;
  const int64_t copy_stride = int64_t{band.input_rows} * band.pitch;
  for (int idx = threadIdx.x; idx < images * per_image; idx += blockDim.x) {
    const int image = kGrouped ? idx / per_image : 0, in_image = idx - image * per_image;
    const int r = in_image / read_cols, col = in_image - r * read_cols;
    const int y = first_row + r - p.ph, x = col - p.pw;
    const bool inside = y >= 0 && y < p.height && x >= 0 && x < p.width;
    const uint16_t* plane = channel + (b0 + image) * p.stride_b;
    const uint16_t value = inside ? __ldg(plane + y * p.stride_h + x * p.stride_w) : uint16_t{0};
    uint16_t* image_tile = tile + image * band.image_elements;
    for (int j = 0; j < band.copies; ++j) {
      const int shifted_col = col - j * p.dw;
      if (band.copies == 1 || (shifted_col >= 0 && shifted_col < band.pitch)) {
        image_tile[j * copy_stride + r * band.pitch + (band.copies == 1 ? col : shifted_col)] = value;
      }
    }
  }
}

// kVector outputs per store; kShifted: read kw shifted copies; kSide: a square kernel's side fixed at compile time,
// so its taps unroll (3 for 3 x 3: 2-5% faster with eight images on an H200), or 0 to read it from p; kGrouped: CTAs
// own several images (band.images > 1).
template <int kVector, bool kShifted, int kSide, bool kGrouped>
__global__ void __launch_bounds__(kThreads) im2col_feature_major_kernel(Problem p, Band band) {
  extern __shared__ __align__(16) uint16_t tile[];
  const int band_index = blockIdx.x % band.count;
  const int group_index = (blockIdx.x / band.count) % band.groups;  // consecutive CTAs extend the same runs
  const int c = static_cast<int>(blockIdx.x / band.count / band.groups);
  const int oh0 = band_index * band.rows, b0 = group_index * band.images;
  const int rows = min(band.rows, p.out_h - oh0), images = min(band.images, p.batch - b0);
  stage_rows<kGrouped>(p, band, p.x + c * p.stride_c, b0, images, oh0 * p.sh, input_rows_of(p, rows), tile);
  __syncthreads();

  const int plane = p.out_h * p.out_w;
  const int image_outputs = rows * p.out_w;  // a whole plane wherever images > 1
  const int64_t m_total = int64_t{p.batch} * plane;
  uint16_t* run_start = p.out + int64_t{c} * p.kh * p.kw * m_total + int64_t{b0} * plane + int64_t{oh0} * p.out_w;
  const int64_t copy_stride = int64_t{band.input_rows} * band.pitch;
  const int runs = images * image_outputs / kVector;
  for (int v = threadIdx.x; v < runs; v += blockDim.x) {
    const int first = v * kVector;
    const int image = kGrouped ? first / image_outputs : 0, in_image = first - image * image_outputs;
    int out_row = in_image / p.out_w, out_col = in_image - out_row * p.out_w;
    const int64_t image_base = image * band.image_elements;
    int base[kShifted ? 1 : kVector];  // staged index of each output's tap (0, 0)
    if constexpr (kShifted) {
      base[0] = out_row * p.sh * band.pitch + out_col;
    } else {
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        base[e] = out_row * p.sh * band.pitch + out_col * p.sw;
        if (++out_col == p.out_w) out_col = 0, ++out_row;
      }
    }
    uint16_t* out = run_start + first;
    const int kh = kSide ? kSide : p.kh, kw = kSide ? kSide : p.kw;
#pragma unroll
    for (int i = 0; i < kh; ++i) {
#pragma unroll
      for (int j = 0; j < kw; ++j, out += m_total) {
        Run<kVector> run;
        if constexpr (kShifted) {
          run = *reinterpret_cast<const Run<kVector>*>(tile + image_base + j * copy_stride + base[0] +
                                                       i * p.dh * band.pitch);
        } else {
#pragma unroll
          for (int e = 0; e < kVector; ++e) run.v[e] = tile[image_base + base[e] + i * p.dh * band.pitch + j * p.dw];
        }
        *reinterpret_cast<Run<kVector>*>(out) = run;
      }
    }
  }
}

template <int kVector, bool kShifted, int kSide = 0>
const char* launch(const Problem& p, const Band& band, int64_t blocks) {
  const auto kernel = band.images > 1 ? im2col_feature_major_kernel<kVector, kShifted, kSide, true>
                                      : im2col_feature_major_kernel<kVector, kShifted, kSide, false>;
  if (band.smem_bytes > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(band.smem_bytes));
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  kernel<<<static_cast<unsigned>(blocks), kThreads, band.smem_bytes, p.stream>>>(p, band);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch_im2col_feature_major(const Problem& p) {
  const int64_t m_total = int64_t{p.batch} * p.out_h * p.out_w;
  const int64_t rows = int64_t{p.channels} * p.kh * p.kw;
  if (m_total >= (int64_t{1} << 31) || rows >= (int64_t{1} << 31)) return "im2col needs B*oh*ow and C*kh*kw < 2^31";
  if (m_total == 0 || rows == 0) return nullptr;
  const Band band = plan_band(p);
  if (band.smem_bytes > kMaxBandBytes) return "im2col: one output row's input rows exceed the shared memory";
  const int64_t blocks = int64_t{band.groups} * p.channels * band.count;
  if (blocks >= (int64_t{1} << 31)) return "im2col needs B*C*bands < 2^31";
  if (takes_shifted_copies(p) && p.kh == 3 && p.kw == 3) return launch<8, true, 3>(p, band, blocks);
  if (takes_shifted_copies(p)) return launch<8, true>(p, band, blocks);
  switch (band.vector) {
    case 8: return launch<8, false>(p, band, blocks);
    case 4: return launch<4, false>(p, band, blocks);
    case 2: return launch<2, false>(p, band, blocks);
    default: return launch<1, false>(p, band, blocks);
  }
}

}  // namespace im2col
}  // namespace sparseprune

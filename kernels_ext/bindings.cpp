// Torch bindings of the sparseprune kernels: validate every input on the host, then hand raw pointers to the
// CUDA files (which never include torch, so they compile fast).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // not torch/extension.h: the full C++ API takes minutes to compile

#include <optional>
#include <string>
#include <utility>

#include "im2col.h"
#include "layer_norm.h"
#include "nm_gemm.h"
#include "tw_gemm.h"

#ifdef SPARSEPRUNE_SP24
#include "sp24_gemm.h"
#endif

namespace {

namespace nm = sparseprune::nm;
namespace tw = sparseprune::tw;

// Numbers in error messages are formatted here, not streamed: TORCH_CHECK streams into an ostringstream, and
// integer formatting through it crashed where the extension's C++ runtime differs from torch's (a newer host g++).
std::string num(int64_t value) { return std::to_string(value); }

std::string shape(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

void check_cuda_tensor(const at::Tensor& t, const char* name, const at::Device& device) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.device() == device, name, " is on ", t.device(), " but x is on ", device);
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

void check_index(const at::Tensor& t, const char* name, const at::Device& device, int64_t numel) {
  check_cuda_tensor(t, name, device);
  TORCH_CHECK(t.scalar_type() == at::kInt, name, " must be int32, got ", t.scalar_type());
  TORCH_CHECK(numel < 0 || t.numel() == numel, name, " must have ", num(numel), " entries, got ", num(t.numel()));
}

// x of a sparse GEMM: a 2-D, contiguous float16 or bfloat16 CUDA tensor (its device and dtype bind the others).
void check_activations(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D, got ", num(x.dim()), "-D");
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  check_cuda_tensor(x, "x", x.device());
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "x must be float16 or bfloat16, got ", dtype);
}

// The fused epilogue's bias: N entries on x's device, in x's dtype.
void check_bias(const std::optional<at::Tensor>& bias, const at::Tensor& x, int64_t N) {
  if (!bias.has_value()) return;
  check_cuda_tensor(*bias, "bias", x.device());
  TORCH_CHECK(bias->scalar_type() == x.scalar_type(), "bias is ", bias->scalar_type(), " but x is ", x.scalar_type());
  TORCH_CHECK(bias->numel() == N, "bias must have N = ", num(N), " entries, got ", num(bias->numel()));
}

void check_activation_code(int64_t activation) {
  TORCH_CHECK(activation >= 0 && activation <= 2, "activation code must be 0 (none), 1 (relu) or 2 (gelu)");
}

int sm_count(int device) {
  int count = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
  TORCH_CHECK(err == cudaSuccess, "cudaDeviceGetAttribute failed: ", cudaGetErrorString(err));
  return count;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// y = act(x @ B + bias) for the packed TW weight B (K x N). x is (M, K) row-major, or (K, M) when x_feature_major;
// y is (M, N), or (N, M) when y_feature_major, so a sparse layer that feeds another (through an activation at most)
// hands it a feature-major y and neither pays a transpose. `path` forces the
// tensor-core kernel family for M > 16 (0 auto, 1 mma.sync, 2 wgmma, 3 warp-specialized wgmma, 5 the tensor-core
// GEMV); tests and benchmarks compare them.
at::Tensor tw_matmul(const at::Tensor& x, const at::Tensor& values, const at::Tensor& rows,
                     const at::Tensor& tile_ptr, const at::Tensor& cols, const at::Tensor& col_pos,
                     const at::Tensor& pruned_cols, const std::optional<at::Tensor>& bias,
                     const std::optional<at::Tensor>& res_ptr, const std::optional<at::Tensor>& res_rows,
                     const std::optional<at::Tensor>& res_vals, int64_t K, int64_t N, int64_t granularity,
                     int64_t max_tile_k, int64_t activation, bool x_feature_major, bool y_feature_major,
                     int64_t path, const std::optional<at::Tensor>& host_tile_ptr) {
  check_activations(x);
  const at::Device device = x.device();
  const auto dtype = x.scalar_type();
  const int64_t M = x_feature_major ? x.size(1) : x.size(0);
  TORCH_CHECK((x_feature_major ? x.size(0) : x.size(1)) == K, "x has K = ",
              num(x_feature_major ? x.size(0) : x.size(1)),
              " but the packed weight has K = ", num(K));
  TORCH_CHECK(K % 8 == 0 && N % 8 == 0, "K and N must be multiples of 8, got K = ", num(K), ", N = ", num(N));
  TORCH_CHECK(tw::supports_granularity(granularity), "granularity must be 32, 64 or 128");
  check_activation_code(activation);
  TORCH_CHECK(path >= 0 && path <= 7 && path != 4 && path != 6,
              "path must be 0 (auto), 1 (mma.sync), 2 (wgmma), 3 (wgmma.ws), 5 (gemv.mma) or 7 (wgmma.rows)");
  TORCH_CHECK(!x_feature_major || M % 8 == 0 || M <= tw::kSmallM,
              "feature-major x needs M a multiple of 8 (16-byte rows), got M = ", num(M));
  TORCH_CHECK(aligned16(x.data_ptr()), "x must be 16-byte aligned");

  check_cuda_tensor(values, "values", device);
  TORCH_CHECK(values.scalar_type() == dtype, "values are ", values.scalar_type(), " but x is ", dtype);
  TORCH_CHECK(aligned16(values.data_ptr()), "values must be 16-byte aligned");
  TORCH_CHECK(tile_ptr.numel() >= 1, "tile_ptr must have num_tiles + 1 entries");
  const int64_t num_tiles = tile_ptr.numel() - 1;
  check_index(tile_ptr, "tile_ptr", device, -1);
  check_index(rows, "rows", device, -1);
  TORCH_CHECK(rows.numel() % tw::kKStep == 0, "rows must be padded to a multiple of ", num(tw::kKStep));
  TORCH_CHECK(aligned16(rows.data_ptr()), "rows must be 16-byte aligned");
  TORCH_CHECK(values.numel() == rows.numel() * granularity, "values must hold rows x G = ",
              num(rows.numel() * granularity), " entries, got ", num(values.numel()));
  if (host_tile_ptr.has_value()) {
    TORCH_CHECK(host_tile_ptr->device().is_cpu() && host_tile_ptr->scalar_type() == at::kInt &&
                    host_tile_ptr->is_contiguous() && host_tile_ptr->numel() == num_tiles + 1,
                "host_tile_ptr must be tile_ptr as a contiguous int32 CPU tensor");
  }
  check_index(cols, "cols", device, num_tiles * granularity);
  check_index(col_pos, "col_pos", device, N);
  check_index(pruned_cols, "pruned_cols", device, -1);
  TORCH_CHECK(max_tile_k >= 0 && max_tile_k % tw::kKStep == 0, "max_tile_k must be a multiple of ", num(tw::kKStep));
  check_bias(bias, x, N);
  const bool has_residual = res_ptr.has_value();
  TORCH_CHECK(has_residual == res_rows.has_value() && has_residual == res_vals.has_value(),
              "the TEW residual needs res_ptr, res_rows and res_vals together");
  if (has_residual) {
    check_index(*res_ptr, "res_ptr", device, N + 1);
    check_index(*res_rows, "res_rows", device, -1);
    check_cuda_tensor(*res_vals, "res_vals", device);
    TORCH_CHECK(res_vals->scalar_type() == dtype, "res_vals are ", res_vals->scalar_type(), " but x is ", dtype);
    TORCH_CHECK(res_vals->numel() == res_rows->numel(), "res_vals and res_rows differ in length");
  }

  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  auto opts = x.options();
  at::Tensor y = y_feature_major ? at::empty({N, M}, opts) : at::empty({M, N}, opts);
  if (M == 0) return y;

  tw::PackedTile w{};
  w.values = values.data_ptr();
  w.rows = rows.data_ptr<int32_t>();
  w.tile_ptr = tile_ptr.data_ptr<int32_t>();
  w.host_tile_ptr = host_tile_ptr.has_value() ? host_tile_ptr->data_ptr<int32_t>() : nullptr;
  w.cols = cols.data_ptr<int32_t>();
  w.col_pos = col_pos.data_ptr<int32_t>();
  w.pruned_cols = pruned_cols.data_ptr<int32_t>();
  w.res_ptr = has_residual ? res_ptr->data_ptr<int32_t>() : nullptr;
  w.res_rows = has_residual ? res_rows->data_ptr<int32_t>() : nullptr;
  w.res_vals = has_residual ? res_vals->data_ptr() : nullptr;
  w.num_tiles = static_cast<int32_t>(num_tiles);
  w.granularity = static_cast<int32_t>(granularity);
  w.num_pruned = static_cast<int32_t>(pruned_cols.numel());
  w.max_tile_k = static_cast<int32_t>(max_tile_k);
  w.value_rows = rows.numel();
  w.K = K;
  w.N = N;

  tw::Problem p{};
  p.M = M;
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.y = y.data_ptr();
  p.activation = static_cast<tw::Activation>(activation);
  p.dtype = dtype == at::kHalf ? tw::DType::kHalf : tw::DType::kBFloat16;
  p.num_sms = sm_count(device.index());
  p.stream = stream;
  p.path = static_cast<tw::Path>(path);
  p.sym = y_feature_major ? 1 : N;
  p.syn = y_feature_major ? M : 1;
  p.y_vec16 = aligned16(p.y) && (y_feature_major ? M % 8 == 0 : N % 8 == 0);

  // The tensor-core kernels (M above kGemvMaxM) run on a feature-major x, so a row-major x is transposed here. For
  // the GEMM kernels with pruned columns the result comes back through a transpose too: they write a feature-major y
  // as whole 128-byte column runs, while a row-major y's kept columns are scattered over each row, so its stores
  // would be a few bytes per sector (the GEMVs' few rows are written directly). A weight that keeps every column
  // (vector-wise N:M: each tile owns G adjacent columns) writes whole 16-byte runs of a row-major y directly, but
  // for the row-flexible kernel (path 7), which writes a feature-major y only. Callers that keep activations
  // feature-major skip both.
  at::Tensor xt, yt;
  const bool transposes_x = !x_feature_major && M > tw::kGemvMaxM;
  const bool transposes_y =
      !y_feature_major && M > tw::kGemvMaxM && (pruned_cols.numel() > 0 || p.path == tw::Path::kWgmmaRows) && !tw::runs_gemv(w, p);
  const int64_t ldt = (M + 7) / 8 * 8;
  // A feature-major x of 9-15 rows has no 16-byte rows for the tensor-core GEMV, so it is copied into padded ones
  // here by a small kernel, behind which the GEMV starts as its programmatic dependent and writes y unpadded: on an
  // H200 at 4096 x 11008, 13-25% faster than PackedTW's padding of x and y (bench/results/tw_h200_pad_rows.md), which
  // still serves where a kernel is forced.
  const bool pads_x = x_feature_major && M > tw::kGemvMaxM && M % 8 != 0;
  if (!transposes_x && !pads_x) {
    p.x = x.data_ptr();
    p.sxm = x_feature_major ? 1 : K;
    p.sxk = x_feature_major ? M : 1;
  } else {
    xt = at::empty({K, ldt}, opts);
    p.x = xt.data_ptr();
    p.sxm = 1;
    p.sxk = ldt;
  }
  if (transposes_y) {
    yt = at::empty({N, ldt}, opts);
    p.y = yt.data_ptr();
    p.sym = 1;
    p.syn = ldt;
    p.y_vec16 = aligned16(p.y);
  }
  at::Tensor workspace;
  if (tw::needs_workspace(w, p)) {
    // Flat fp32 buffer; the kernels index it in the output's layout (see ws_index in tw_device.cuh).
    workspace = at::zeros({M * num_tiles * granularity}, opts.dtype(at::kFloat));
    p.workspace = workspace.data_ptr<float>();
  }
  // The copy of x (transpose or padding) goes last before the GEMM (after the workspace's zeroing), so that the GEMM
  // can start as its programmatic dependent: its prologue (indices, packed values) then overlaps the copy's tail.
  if (transposes_x || pads_x) {
    const char* err = transposes_x
                          ? tw::launch_transpose(x.data_ptr(), xt.data_ptr(), M, K, K, ldt, p.dtype, stream, false)
                          : tw::launch_pad_rows(x.data_ptr(), xt.data_ptr(), K, M, M, ldt, p.dtype, stream);
    TORCH_CHECK(err == nullptr, "x copy launch failed: ", err ? err : "");
    p.x_from_prior_kernel = true;
  }
  const char* err = tw::launch_tw_matmul(w, p);
  TORCH_CHECK(err == nullptr, "tw_matmul launch failed: ", err ? err : "");
  if (transposes_y) {
    err = tw::launch_transpose(yt.data_ptr(), y.data_ptr(), N, M, ldt, N, p.dtype, stream, true);
    TORCH_CHECK(err == nullptr, "transpose launch failed: ", err ? err : "");
  }
  return y;
}

// y = act(x @ B + bias) for the packed N:M weight B (K x N): x (M, K) row-major; values and idx in the layout of
// kernels_ext/nm_gemm.h (element-wise: flat column panels, 4- or 8-bit positions; vector-wise: [K/m*kept, N] and
// uint8 [K/m*kept, N/vector]). CUDA cores: a memory-bound SpMV for M <= 16, a shared-memory-tiled SpMM above.
at::Tensor nm_matmul(const at::Tensor& x, const at::Tensor& values, const at::Tensor& idx,
                     const std::optional<at::Tensor>& bias, int64_t K, int64_t N, int64_t m, int64_t kept,
                     int64_t vector, int64_t activation) {
  check_activations(x);
  const at::Device device = x.device();
  const auto dtype = x.scalar_type();
  TORCH_CHECK(x.size(1) == K, "x has K = ", num(x.size(1)), " but the packed weight has K = ", num(K));
  TORCH_CHECK(m >= 2 && m <= nm::kMaxM && (m & (m - 1)) == 0, "N:M kernels need M a power of two in [2, ",
              num(nm::kMaxM), "], got M = ", num(m));
  TORCH_CHECK(kept >= 1 && kept < m, "N:M kernels need 1 <= N < M, got N = ", num(kept), ", M = ", num(m));
  TORCH_CHECK(K >= 0 && K % m == 0, "K must be a multiple of M, got K = ", num(K), ", M = ", num(m));
  TORCH_CHECK(N > 0 && N % 8 == 0, "N must be a positive multiple of 8 (16-byte value rows), got N = ", num(N));
  TORCH_CHECK(vector >= 1 && N % vector == 0, "vector must divide N, got vector = ", num(vector), ", N = ", num(N));
  check_activation_code(activation);
  const int64_t rows = K / m * kept;
  const int idx_bits = nm::index_bits(m, vector);

  check_cuda_tensor(values, "values", device);
  TORCH_CHECK(values.scalar_type() == dtype, "values are ", values.scalar_type(), " but x is ", dtype);
  check_cuda_tensor(idx, "idx", device);
  TORCH_CHECK(idx.scalar_type() == at::kByte, "idx must be uint8, got ", idx.scalar_type());
  if (vector == 1) {
    TORCH_CHECK(values.dim() == 1 && values.numel() == rows * N, "element-wise values must be flat with K/M*kept*N = ",
                num(rows * N), " entries, got ", shape(values.sizes()));
    TORCH_CHECK(idx.dim() == 1 && idx.numel() == rows * N * idx_bits / 8, "element-wise idx must be flat with ",
                num(rows * N * idx_bits / 8), " bytes (", idx_bits, "-bit positions), got ", shape(idx.sizes()));
  } else {
    TORCH_CHECK(values.dim() == 2 && values.size(0) == rows && values.size(1) == N, "values must be (K/M*kept, N) = (",
                num(rows), ", ", num(N), "), got ", shape(values.sizes()));
    TORCH_CHECK(idx.dim() == 2 && idx.size(0) == rows && idx.size(1) == N / vector, "idx must be (K/M*kept, N/vector) = (",
                num(rows), ", ", num(N / vector), "), got ", shape(idx.sizes()));
  }
  TORCH_CHECK(aligned16(values.data_ptr()), "values must be 16-byte aligned");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(idx.data_ptr()) % 8 == 0, "idx must be 8-byte aligned");
  check_bias(bias, x, N);

  const c10::cuda::CUDAGuard guard(device);
  const int64_t M = x.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0) return y;

  nm::PackedNMView w{};
  w.values = values.data_ptr();
  w.idx = idx.data_ptr<uint8_t>();
  w.K = K;
  w.N = N;
  w.rows = rows;
  w.m = static_cast<int>(m);
  w.kept = static_cast<int>(kept);
  w.vector = static_cast<int>(vector);
  w.idx_bits = idx_bits;

  nm::Problem p{};
  p.x = x.data_ptr();
  p.M = M;
  p.ldx = K;
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.y = y.data_ptr();
  p.ldy = N;
  p.activation = static_cast<nm::Activation>(activation);
  p.dtype = dtype == at::kHalf ? nm::DType::kHalf : nm::DType::kBFloat16;
  p.num_sms = sm_count(device.index());
  p.stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  at::Tensor workspace;
  if (const int64_t floats = nm::workspace_floats(w, p); floats > 0) {
    workspace = at::empty({floats}, x.options().dtype(at::kFloat));  // every entry is written before it is read
    p.workspace = workspace.data_ptr<float>();
  }
  const char* err = nm::launch_nm_matmul(w, p);
  TORCH_CHECK(err == nullptr, "nm_matmul launch failed: ", err ? err : "");
  return y;
}

// The im2col kernel a name selects: "auto" (by size), or one forced for tests and benchmarks.
sparseprune::im2col::Kernel im2col_kernel_named(const std::string& name) {
  using sparseprune::im2col::Kernel;
  if (name == "auto") return Kernel::kAuto;
  if (name == "staged") return Kernel::kStaged;
  if (name == "direct") return Kernel::kDirect;
  TORCH_CHECK(name == "spread", "kernel must be 'auto', 'staged', 'direct' or 'spread', got '", name, "'");
  return Kernel::kDirectSpread;
}

// im2col of a convolution input x (B, C, H, W; fp16/bf16 on CUDA, any strides) into the feature-major matrix
// (C*kh*kw, B*oh*ow) that a TW weight's kernel reads, in one pass.
at::Tensor im2col_feature_major(const at::Tensor& x, int64_t kh, int64_t kw, int64_t dh, int64_t dw, int64_t ph,
                                int64_t pw, int64_t sh, int64_t sw, const std::string& kernel) {
  const auto which = im2col_kernel_named(kernel);
  TORCH_CHECK(x.dim() == 4, "x must be 4-D (B, C, H, W), got ", num(x.dim()), "-D");
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "x must be float16 or bfloat16, got ", dtype);
  TORCH_CHECK(kh >= 1 && kw >= 1 && dh >= 1 && dw >= 1 && sh >= 1 && sw >= 1 && ph >= 0 && pw >= 0,
              "kernel size, dilation and stride must be positive and padding non-negative");
  const int64_t height = x.size(2), width = x.size(3);
  const int64_t out_h = (height + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  const int64_t out_w = (width + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  TORCH_CHECK(height + 2 * ph >= dh * (kh - 1) + 1 && width + 2 * pw >= dw * (kw - 1) + 1,
              "input ", num(height), " x ", num(width), " is smaller than the dilated kernel with its padding");
  TORCH_CHECK(x.numel() < (int64_t{1} << 40), "x is too large");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({x.size(1) * kh * kw, x.size(0) * out_h * out_w}, x.options());
  if (out.numel() == 0) return out;
  sparseprune::im2col::Problem p{};
  p.x = static_cast<const uint16_t*>(x.data_ptr());
  p.stride_b = x.stride(0);
  p.stride_c = x.stride(1);
  p.stride_h = x.stride(2);
  p.stride_w = x.stride(3);
  p.batch = static_cast<int>(x.size(0));
  p.channels = static_cast<int>(x.size(1));
  p.height = static_cast<int>(height);
  p.width = static_cast<int>(width);
  p.kh = static_cast<int>(kh);
  p.kw = static_cast<int>(kw);
  p.dh = static_cast<int>(dh);
  p.dw = static_cast<int>(dw);
  p.ph = static_cast<int>(ph);
  p.pw = static_cast<int>(pw);
  p.sh = static_cast<int>(sh);
  p.sw = static_cast<int>(sw);
  p.out_h = static_cast<int>(out_h);
  p.out_w = static_cast<int>(out_w);
  p.out = static_cast<uint16_t*>(out.data_ptr());
  p.stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const char* err = sparseprune::im2col::launch_im2col_feature_major(p, which);
  TORCH_CHECK(err == nullptr, "im2col_feature_major failed: ", err ? err : "");
  return out;
}

#ifdef SPARSEPRUNE_SP24
namespace sp24 = sparseprune::sp24;

// N and K of a 2:4 GEMM: in int32 range (CUTLASS problem shapes), K a multiple of kKAlign, N of kNAlign.
void check_sp24_dims(int64_t N, int64_t K) {
  TORCH_CHECK(N > 0 && N < (int64_t{1} << 31) && K > 0 && K < (int64_t{1} << 31),
              "2:4 GEMM needs 0 < N, K < 2^31, got N = ", num(N), ", K = ", num(K));
  TORCH_CHECK(K % sp24::kKAlign == 0, "2:4 GEMM needs K a multiple of ", num(sp24::kKAlign), ", got K = ", num(K));
  TORCH_CHECK(N % sp24::kNAlign == 0, "2:4 GEMM needs N a multiple of ", num(sp24::kNAlign), ", got N = ", num(N));
}

// Compresses the 2:4 weight W (N x K, row-major, 2:4 along K) for sp24_matmul: (values [N, K/2], metadata uint8).
// Runs once per weight, so it also counts non-zeros per group of 4 (one reduction and a sync) and refuses a W that
// is not 2:4: the compressor would silently keep wrong entries.
std::tuple<at::Tensor, at::Tensor> sp24_compress(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2, "w must be 2-D (N x K), got ", num(w.dim()), "-D");
  TORCH_CHECK(w.is_cuda(), "w must be a CUDA tensor");
  check_cuda_tensor(w, "w", w.device());
  const auto dtype = w.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "w must be float16 or bfloat16, got ", dtype);
  const int64_t N = w.size(0), K = w.size(1);
  check_sp24_dims(N, K);
  TORCH_CHECK(aligned16(w.data_ptr()), "w must be 16-byte aligned");
  const int64_t most = w.view({N, K / 4, 4}).ne(0).sum(-1).amax().item<int64_t>();
  TORCH_CHECK(most <= 2, "w is not 2:4 along K: a group of 4 holds ", num(most), " non-zeros");

  const c10::cuda::CUDAGuard guard(w.device());
  const sp24::CompressedSizes sizes = sp24::compressed_sizes(N, K);
  // Zeroed once per weight: the metadata is padded to 64 x 128 atoms, and no padding byte should ever be stale.
  at::Tensor values = at::zeros({N, sizes.values_cols}, w.options());
  at::Tensor meta = at::zeros({sizes.meta_bytes}, w.options().dtype(at::kByte));
  const auto kernel_dtype = dtype == at::kHalf ? sp24::DType::kHalf : sp24::DType::kBFloat16;
  const char* err = sp24::launch_compress(w.data_ptr(), N, K, kernel_dtype, values.data_ptr(), meta.data_ptr(),
                                          sm_count(w.device().index()),
                                          c10::cuda::getCurrentCUDAStream(w.device().index()).stream());
  TORCH_CHECK(err == nullptr, "sp24_compress launch failed: ", err ? err : "");
  return {values, meta};
}

// y = act(x @ W^T + source + bias) on Hopper sparse tensor cores, W compressed by sp24_compress: x (M, K) row-major,
// y and the optional source (M, N) row-major.
at::Tensor sp24_matmul(const at::Tensor& x, const at::Tensor& values, const at::Tensor& meta,
                       const std::optional<at::Tensor>& bias, int64_t K, int64_t N, int64_t activation, int64_t tile,
                       const std::optional<at::Tensor>& source) {
  check_activations(x);
  const at::Device device = x.device();
  const auto dtype = x.scalar_type();
  TORCH_CHECK(x.size(1) == K, "x has K = ", num(x.size(1)), " but the 2:4 weight has K = ", num(K));
  check_sp24_dims(N, K);
  const int64_t M = x.size(0);
  TORCH_CHECK(M < (int64_t{1} << 31), "2:4 GEMM needs fewer than 2^31 rows of x, got ", num(M));
  TORCH_CHECK(aligned16(x.data_ptr()), "x must be 16-byte aligned");
  check_activation_code(activation);
  TORCH_CHECK(tile >= static_cast<int64_t>(sp24::Tile::kAuto) && tile <= static_cast<int64_t>(sp24::kLastTile),
              "tile code must be 0 (auto), 1 (wide), 2 (tall), 3 (pingpong) or 4 (narrow), got ",
              num(tile));
  const sp24::CompressedSizes sizes = sp24::compressed_sizes(N, K);
  check_cuda_tensor(values, "values", device);
  TORCH_CHECK(values.scalar_type() == dtype, "values are ", values.scalar_type(), " but x is ", dtype);
  TORCH_CHECK(values.dim() == 2 && values.size(0) == N && values.size(1) == sizes.values_cols,
              "values must be (N, K/2) = (", num(N), ", ", num(sizes.values_cols), "), got ", shape(values.sizes()));
  TORCH_CHECK(aligned16(values.data_ptr()), "values must be 16-byte aligned");
  check_cuda_tensor(meta, "meta", device);
  TORCH_CHECK(meta.scalar_type() == at::kByte, "meta must be uint8, got ", meta.scalar_type());
  TORCH_CHECK(meta.numel() == sizes.meta_bytes, "meta must hold ", num(sizes.meta_bytes), " bytes, got ",
              num(meta.numel()));
  TORCH_CHECK(aligned16(meta.data_ptr()), "meta must be 16-byte aligned");
  check_bias(bias, x, N);
  TORCH_CHECK(!bias.has_value() || aligned16(bias->data_ptr()), "bias must be 16-byte aligned");
  if (source.has_value()) {
    check_cuda_tensor(*source, "source", device);
    TORCH_CHECK(source->scalar_type() == dtype, "source is ", source->scalar_type(), " but x is ", dtype);
    TORCH_CHECK(source->dim() == 2 && source->size(0) == M && source->size(1) == N, "source must be (M, N) = (",
                num(M), ", ", num(N), "), got ", shape(source->sizes()));
    TORCH_CHECK(aligned16(source->data_ptr()), "source must be 16-byte aligned");
  }

  const c10::cuda::CUDAGuard guard(device);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0) return y;
  sp24::Problem p{};
  p.values = values.data_ptr();
  p.meta = meta.data_ptr();
  p.N = N;
  p.K = K;
  p.x = x.data_ptr();
  p.M = M;
  p.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  p.source = source.has_value() ? source->data_ptr() : nullptr;
  p.y = y.data_ptr();
  p.activation = static_cast<sp24::Activation>(activation);
  p.dtype = dtype == at::kHalf ? sp24::DType::kHalf : sp24::DType::kBFloat16;
  p.tile = static_cast<sp24::Tile>(tile);
  p.device = device.index();
  p.num_sms = sm_count(device.index());
  p.stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  at::Tensor workspace;
  if (const int64_t bytes = sp24::workspace_bytes(p); bytes > 0) {
    workspace = at::empty({bytes}, x.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
  }
  const char* err = sp24::launch_sp24_matmul(p);
  TORCH_CHECK(err == nullptr, "sp24_matmul launch failed: ", err ? err : "");
  return y;
}
#endif

// x^T, contiguous, for a 2-D x with contiguous rows (any row stride) on the TW extension's tiled transpose: the
// feature-major BERT encoder's copies into and out of attention's layout, which torch's strided copy kernel ran at a
// fraction of the bandwidth (an H200 spent 1.1 ms of BERT-base's 16 x 256 tokens in them).
at::Tensor transpose_rows(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D, got ", num(x.dim()), "-D");
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "x must be float16 or bfloat16, got ", dtype);
  const int64_t R = x.size(0), C = x.size(1);
  TORCH_CHECK(C <= 1 || x.stride(1) == 1, "x's rows must be contiguous (stride 1 along dim 1)");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({C, R}, x.options());
  const int64_t ld_in = R > 1 ? x.stride(0) : C;
  const char* err = tw::launch_transpose(x.data_ptr(), out.data_ptr(), R, C, ld_in, R,
                                         dtype == at::kHalf ? tw::DType::kHalf : tw::DType::kBFloat16,
                                         c10::cuda::getCurrentCUDAStream(x.device().index()).stream(), false);
  TORCH_CHECK(err == nullptr, "transpose launch failed: ", err ? err : "");
  return out;
}

// LayerNorm(x + residual) over dim 0 of feature-major (H, T) activations: the residual stream of the
// feature-major BERT encoder (sparseprune/export/feature_major_bert.py) between its sparse GEMMs.
at::Tensor add_layer_norm_feature_major(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                        const at::Tensor& bias, double eps) {
  check_activations(x);
  const at::Device device = x.device();
  const int64_t H = x.size(0), T = x.size(1);
  TORCH_CHECK(sparseprune::norm::supports(H), "H (dim 0 of x) must be a positive multiple of ",
              num(sparseprune::norm::kHStep), " up to ", num(sparseprune::norm::kMaxH), ", got ", num(H));
  check_cuda_tensor(residual, "residual", device);
  TORCH_CHECK(residual.sizes() == x.sizes(), "residual must have x's shape ", shape(x.sizes()), ", got ",
              shape(residual.sizes()));
  for (const auto& [t, name] : {std::pair{&residual, "residual"}, {&weight, "weight"}, {&bias, "bias"}}) {
    check_cuda_tensor(*t, name, device);
    TORCH_CHECK(t->scalar_type() == x.scalar_type(), name, " is ", t->scalar_type(), " but x is ", x.scalar_type());
  }
  TORCH_CHECK(weight.numel() == H && bias.numel() == H, "weight and bias must have H = ", num(H), " entries");
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor out = at::empty({H, T}, x.options());
  sparseprune::norm::Problem p{};
  p.x = x.data_ptr();
  p.residual = residual.data_ptr();
  p.weight = weight.data_ptr();
  p.bias = bias.data_ptr();
  p.out = out.data_ptr();
  p.H = H;
  p.T = T;
  p.eps = static_cast<float>(eps);
  p.dtype = x.scalar_type() == at::kHalf ? sparseprune::norm::DType::kHalf : sparseprune::norm::DType::kBFloat16;
  p.stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  const char* err = sparseprune::norm::launch_add_layer_norm(p);
  TORCH_CHECK(err == nullptr, "add_layer_norm_feature_major launch failed: ", err ? err : "");
  return out;
}

// The constants of the headers that Python's dispatch and packing use, by qualified C++ name: sparseprune/export/
// formats/limits.py holds the same values and refuses an extension built from headers that disagree.
pybind11::dict limits() {
  pybind11::dict out;
  out["tw::kKStep"] = tw::kKStep;
  out["tw::kSmallM"] = tw::kSmallM;
  out["tw::kGemvMaxM"] = tw::kGemvMaxM;
  out["tw::kMmaGemvMaxM"] = tw::kMmaGemvMaxM;
  out["tw::kGranularities"] = pybind11::make_tuple(tw::kGranularities[0], tw::kGranularities[1], tw::kGranularities[2]);
  out["tw::Path::kAuto"] = static_cast<int>(tw::Path::kAuto);
  out["tw::Path::kMmaSync"] = static_cast<int>(tw::Path::kMmaSync);
  out["tw::Path::kWgmma"] = static_cast<int>(tw::Path::kWgmma);
  out["tw::Path::kWgmmaWs"] = static_cast<int>(tw::Path::kWgmmaWs);
  out["tw::Path::kGemvMma"] = static_cast<int>(tw::Path::kGemvMma);
  out["tw::Path::kWgmmaRows"] = static_cast<int>(tw::Path::kWgmmaRows);
  out["nm::kSmallM"] = nm::kSmallM;
  out["nm::kMaxM"] = nm::kMaxM;
  out["nm::kPanel"] = nm::kPanel;
  out["nm::kGemvMmaMinM"] = nm::kGemvMmaMinM;
  out["nm::kGemvMmaStep"] = nm::kGemvMmaStep;
  out["norm::kHStep"] = sparseprune::norm::kHStep;
  out["norm::kMaxH"] = sparseprune::norm::kMaxH;
#ifdef SPARSEPRUNE_SP24
  out["sp24::kKAlign"] = sp24::kKAlign;
  out["sp24::kNAlign"] = sp24::kNAlign;
  out["sp24::Tile::kAuto"] = static_cast<int>(sp24::Tile::kAuto);
  out["sp24::Tile::kWide"] = static_cast<int>(sp24::Tile::kWide);
  out["sp24::Tile::kTall"] = static_cast<int>(sp24::Tile::kTall);
  out["sp24::Tile::kPingpong"] = static_cast<int>(sp24::Tile::kPingpong);
  out["sp24::Tile::kNarrow"] = static_cast<int>(sp24::Tile::kNarrow);
#endif
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "sparseprune CUDA kernels (tile-wise and N:M sparse GEMM)";
  m.def("tw_matmul", &tw_matmul, "Tile-wise sparse GEMM: act(x @ B + bias) from the packed TW layout",
        pybind11::arg("x"), pybind11::arg("values"), pybind11::arg("rows"), pybind11::arg("tile_ptr"),
        pybind11::arg("cols"), pybind11::arg("col_pos"), pybind11::arg("pruned_cols"), pybind11::arg("bias"),
        pybind11::arg("res_ptr"), pybind11::arg("res_rows"), pybind11::arg("res_vals"), pybind11::arg("K"),
        pybind11::arg("N"), pybind11::arg("granularity"), pybind11::arg("max_tile_k"),
        pybind11::arg("activation"), pybind11::arg("x_feature_major"),
        pybind11::arg("y_feature_major"), pybind11::arg("path") = 0, pybind11::arg("host_tile_ptr") = pybind11::none());
  m.def("nm_matmul", &nm_matmul, "N:M sparse GEMM on CUDA cores: act(x @ B + bias) from the packed N:M layout",
        pybind11::arg("x"), pybind11::arg("values"), pybind11::arg("idx"), pybind11::arg("bias"), pybind11::arg("K"),
        pybind11::arg("N"), pybind11::arg("m"), pybind11::arg("kept"), pybind11::arg("vector"),
        pybind11::arg("activation"));
  m.def("limits", &limits, "The headers' constants that Python's dispatch and packing use, by qualified C++ name");
  m.def("transpose_rows", &transpose_rows, "x^T, contiguous, for a 2-D x with contiguous rows", pybind11::arg("x"));
  m.def("add_layer_norm_feature_major", &add_layer_norm_feature_major,
        "LayerNorm(x + residual) over dim 0 of feature-major (H, T) activations", pybind11::arg("x"),
        pybind11::arg("residual"), pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("eps"));
  m.def("im2col_feature_major", &im2col_feature_major,
        "im2col of x (B, C, H, W) into (C*kh*kw, B*oh*ow), the feature-major layout of the TW kernels",
        pybind11::arg("x"), pybind11::arg("kh"), pybind11::arg("kw"), pybind11::arg("dh"), pybind11::arg("dw"),
        pybind11::arg("ph"), pybind11::arg("pw"), pybind11::arg("sh"), pybind11::arg("sw"),
        pybind11::arg("kernel") = "auto");
#ifdef SPARSEPRUNE_SP24
  m.def("sp24_available", &sp24::available, "True when the 2:4 kernels hold sm_90a code that this device runs");
  m.def("sp24_compress", &sp24_compress, "Compresses a 2:4 weight W (N x K) into values and CUTLASS metadata",
        pybind11::arg("w"));
  m.def("sp24_matmul", &sp24_matmul, "2:4 GEMM on Hopper sparse tensor cores: act(x @ W^T + source + bias)",
        pybind11::arg("x"), pybind11::arg("values"), pybind11::arg("meta"), pybind11::arg("bias"), pybind11::arg("K"),
        pybind11::arg("N"), pybind11::arg("activation"), pybind11::arg("tile") = 0,
        pybind11::arg("source") = pybind11::none());
#endif
}

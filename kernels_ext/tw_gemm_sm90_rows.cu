// Tile-wise sparse GEMM on Hopper with items of 64 to 128 rows of x in steps of 16 (kernel "wgmma.rows"). The
// warp-specialized kernel's items are multiples of 64 rows, wgmma's M, so a problem of few tiles hands the SMs few,
// uneven items: BERT FFN out at 75% keeps three tiles of 1029 to 1910 rows, 96 items of 128 rows on 132 SMs, and the
// heaviest tile sets the time. Here the operands swap roles: the packed values are wgmma's A (M = the tile's G
// columns, 64 at a time) and the gathered rows of xT its B, whose N may be any multiple of 8. The host gives each
// tile its own item height, short items on heavy tiles, so that the items spread evenly over the SMs. Otherwise as
// the warp-specialized kernel: a producer warpgroup gathers kept rows of xT into a ring of swizzled stages with
// cp.async while the TMA unit loads the values, and two consumer warpgroups take the items in turn, one's epilogue
// under the other's MMAs. It writes a feature-major y only, without split-K or TEW residual: an item's outputs
// through stmatrix and one bulk copy per column, the pruned columns while a consumer waits for its turn.
#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "tw_sm90_ring.cuh"

namespace sparseprune {
namespace tw {
namespace {

// Item heights: kRowsMin + kRowsStep * code rows of x, code < kRowCodes.
constexpr int kRowsMin = 64, kRowsStep = 16, kRowCodes = 5, kRowsMax = kRowsMin + kRowsStep * (kRowCodes - 1);
constexpr int kRowsMaxTiles = 64;  // tiles a schedule describes (a kernel parameter)
constexpr int kRowsStages = 4;  // six were no faster (BERT and VGG16 shapes, H200)
// `auto` takes this kernel over 128-row items of the warp-specialized one where its planned schedule's busiest SM
// has at most this share (percent) of theirs in the host's cost model. On an H200 (bench/results/tw_h200_rows.md)
// the kernel won 2-8% where the model promised 0.72-0.80 (BERT QKV, FFN out and VGG16 conv4 at 75%, VGG16 conv4 at
// 90%) and lost up to 7% where it promised 0.87-0.97: at equal heights its items cost about 2% more.
constexpr int kRowsPayPercent = 82;

// The static schedule, a kernel parameter: positions in the order their items are handed out (heaviest items
// first), each a tile with one item height. Items of position q are first_item[q] .. first_item[q + 1] - 1, one
// per block of that many rows of x.
struct RowsSchedule {
  int32_t positions;
  int32_t items;
  int32_t first_item[kRowsMaxTiles + 1];
  int16_t tile[kRowsMaxTiles];
  uint8_t rows_code[kRowsMaxTiles];
};

template <int BN>
struct RowsConfig {
  static constexpr int kBN = BN, kBK = 64, kStages = kRowsStages, kValueSlabs = BN / 64;
  static constexpr int kWarpgroup = 128, kThreads = 3 * kWarpgroup, kWarpsPerGroup = kWarpgroup / 32;
  static constexpr int kSlabBytes = kBK * 128;  // 64 elements x 64 K rows
  static constexpr int kGatherBytes = kRowsMax / 64 * kSlabBytes;  // xT, then values
  static constexpr int kStageBytes = kGatherBytes + kValueSlabs * kSlabBytes;
  // Each consumer warpgroup stages its item's outputs in its own buffer, one tile column of up to kRowsMax rows
  // per buffer row (8 more, so stmatrix's eight rows fall in different banks), for the bulk copies to y.
  static constexpr int kEpiLd = kRowsMax + 8, kEpiBytes = BN * kEpiLd * 2;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kBarOffset = kPipeBytes + 2 * kEpiBytes;
  static constexpr int kSmemBytes = kBarOffset + (2 * kStages + 2) * 8;
  static_assert(kSmemBytes <= 227 * 1024, "fits an SM's shared memory");
};

struct RowsItem {
  int tile, rows, p0, p_end, ksteps;
  int64_t m0;
  bool skip;
};

// This CTA's item of round `round`: the position by binary search over first_item.
__device__ __forceinline__ RowsItem rows_item(const PackedTile& w, const RowsSchedule& s, int round) {
  RowsItem it{};
  const int item = scheduled_item(round);
  it.skip = item >= s.items;
  if (it.skip) return it;
  int lo = 0, hi = s.positions - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (s.first_item[mid] <= item) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  it.tile = s.tile[lo];
  it.rows = kRowsMin + kRowsStep * s.rows_code[lo];
  it.m0 = static_cast<int64_t>(item - s.first_item[lo]) * it.rows;
  it.p0 = w.tile_ptr[it.tile];
  it.p_end = w.tile_ptr[it.tile + 1];
  it.ksteps = (it.p_end - it.p0 + 63) / 64;
  return it;
}

__device__ __forceinline__ int schedule_rounds(const RowsSchedule& s) {
  return (s.items + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
}

#ifdef SPARSEPRUNE_WGMMA
// Producer warpgroup: one stage per K step (64 kept rows) of each item (gather_item), the item's rows of xT in
// 16-byte chunks of 8 rows, none past its height.
template <typename T, typename Cfg>
__device__ __forceinline__ void produce_rows(const PackedTile& w, const Problem& p, const RowsSchedule& s,
                                             const CUtensorMap& values_map, uint32_t ring, uint32_t full,
                                             uint32_t empty) {
  using X = StageCover<kRowsMax / 8>;
  static_assert(X::kHalves == 1, "one chunk of rows per thread and K row");
  const int chunk = threadIdx.x % X::kLanesPerRow;
  const T* x = static_cast<const T*>(p.x);
  if (threadIdx.x == 0) prefetch_tensormap(&values_map);
  wait_for_prerequisite_grid();  // x may come from the transpose launched just before
  int stage = 0;
  uint32_t phase = 0;
  const int rounds = schedule_rounds(s);
  for (int round = 0; round < rounds; ++round) {
    const RowsItem it = rows_item(w, s, round);
    if (it.skip) continue;
    const int64_t m = it.m0 + chunk * 8;
    const bool copies[1] = {chunk * 8 < it.rows && m < p.M};  // zeros elsewhere (the MMA reads the item's rows only)
    gather_item<T, Cfg, X>(w.rows, it.p0, it.p_end, 0, it.ksteps, x + m, copies, x, p.sxk, values_map, ring, full,
                           empty, stage, phase);
  }
  cp_async_wait<0>();  // nothing in flight when the warpgroup exits
}

// The columns of a thread's accumulator rows (tile columns 64 i + 16 warp + lane / 4 + 8 h) with their biases, and
// the column whose bulk copy it sends (tile column wtid, for the first G threads).
template <int BN>
struct ThreadColumns {
  int col[BN / 64][2];
  float bias[BN / 64][2];
  int copy_col;
};

// One item of `Rows` rows on consumer warpgroup cwg: its MMAs, the other warpgroup's turn, then its outputs. The
// accumulators live here, sized for this height; each height is its own instantiation. The outputs go through the
// warpgroup's buffer (stmatrix: eight rows of one tile column per 16 bytes) and leave as one bulk copy per tile
// column, a run of the item's rows of a feature-major y (storing them from the accumulators, four bytes per lane,
// was slower).
template <typename T, typename Cfg, int Rows>
__device__ __forceinline__ void consume_item(const Problem& p, const RowsItem& it, ThreadColumns<Cfg::kBN>& cols,
                                             int cwg, uint32_t ring, uint32_t full, uint32_t empty, uint32_t order,
                                             unsigned char* stage_c, int& stage, uint32_t& phase) {
  constexpr int MI = Cfg::kValueSlabs, NACC = Rows / 2, kSlab = Cfg::kSlabBytes, kLd = Cfg::kEpiLd;
  const bool release_lane = (threadIdx.x & 31) == 0;
  float acc[MI][NACC];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int e = 0; e < NACC; ++e) acc[i][e] = 0.0f;
  int held = -1;  // stage whose MMAs may still be running
  for (int ks = 0; ks < it.ksteps; ++ks) {
    mbarrier_wait(full + stage * 8, phase);
    const uint32_t sx = ring + stage * Cfg::kStageBytes, sv = sx + Cfg::kGatherBytes;
    fence_accumulators(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::kBK / 16; ++kk) {
      const uint64_t desc_x = wgmma_desc(sx + kk * 2048, kSlab, 1024);
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        wgmma_mn_major<Rows, T>(acc[i], wgmma_desc(sv + i * kSlab + kk * 2048, kSlab, 1024), desc_x);
      }
    }
    retire_previous_step<Cfg::kStages>(acc, empty, release_lane, held, stage, phase);
  }
  if (release_lane) mbarrier_arrive(order + 8 * (1 - cwg));  // every stage of this item waited on: the other's turn
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = cols.col[i][h];
      cols.bias[i][h] = bias != nullptr && col >= 0 ? to_float(bias[col]) : 0.0f;
    }
  wgmma_wait<0>();
  fence_accumulators(acc);
  if (held >= 0 && release_lane) mbarrier_arrive(empty + held * 8);
  const int wtid = threadIdx.x % Cfg::kWarpgroup, lane = wtid & 31, warp = wtid >> 5, bar_id = 1 + cwg;
  const uint32_t s_tile = smem_addr(stage_c);
  bulk_wait_read();  // this thread's copies of its previous item have left the buffer
  named_barrier_sync<Cfg::kWarpgroup>(bar_id);
  // Accumulator 4 j + 2 h + e of block i: tile column 64 i + 16 warp + 8 h + lane / 4, row 8 j + 2 (lane % 4) + e.
  // stmatrix_x4 matrix q takes h = q % 2 and row block j + q / 2; lane 8 q + r addresses its row r.
  const int q = lane >> 3, r = lane & 7;
  const uint32_t lane_dst = s_tile + ((16 * warp + 8 * (q & 1) + r) * kLd + 8 * (q >> 1)) * sizeof(T);
  with_activation(p.activation, [&](auto act) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < Rows / 8; j += 2) {
        const float b0 = cols.bias[i][0], b1 = cols.bias[i][1];
        const float* a = &acc[i][4 * j];
        float v[8] = {a[0] + b0, a[1] + b0, a[2] + b1, a[3] + b1, a[4] + b0, a[5] + b0, a[6] + b1, a[7] + b1};
        activate_fixed<decltype(act)::value>(v);
        stmatrix_x4(lane_dst + (64 * i * kLd + 8 * j) * sizeof(T), pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]),
                    pack2<T>(v[4], v[5]), pack2<T>(v[6], v[7]));
      }
  });
  fence_proxy_async();  // the bulk copies read the buffer through the async proxy
  named_barrier_sync<Cfg::kWarpgroup>(bar_id);
  // Rows past M round up to 8: a feature-major y's columns are runs of a multiple of 8 rows (y_vec16), or the
  // binding's transposed y, padded to one.
  const int64_t rows = p.M - it.m0 < Rows ? p.M - it.m0 : Rows;
  if (wtid < Cfg::kBN && cols.copy_col >= 0 && rows > 0) {
    T* dst = static_cast<T*>(p.y) + static_cast<int64_t>(cols.copy_col) * p.syn + it.m0;
    bulk_copy_to_global(dst, s_tile + wtid * kLd * sizeof(T), static_cast<uint32_t>((rows + 7) / 8 * 8 * sizeof(T)));
  }
  bulk_commit();
}

// Consumer warpgroup cwg (0 or 1): the CTA's items alternate between the two; for each of its own it waits for its
// turn (writing pruned columns meanwhile), then consume_item of the item's height; it skips the other's stages.
template <typename T, typename Cfg>
__device__ __forceinline__ void consume_rows(const PackedTile& w, const Problem& p, const RowsSchedule& s, int cwg,
                                             uint32_t ring, uint32_t full, uint32_t empty, uint32_t order,
                                             unsigned char* stage_c) {
  constexpr int BN = Cfg::kBN, kFillWarps = 2 * Cfg::kWarpsPerGroup;
  wait_for_prerequisite_grid();
  const int wtid = threadIdx.x % Cfg::kWarpgroup, lane = wtid & 31, warp = wtid / 32;
  const int rounds = schedule_rounds(s);
  int stage = 0, turn = 0;
  uint32_t phase = 0, order_parity = cwg == 0 ? 1 : 0;  // warpgroup 0 goes first: a fresh barrier passes parity 1
  PrunedColumnFill<T> fill(w, p,
                           static_cast<int64_t>(blockIdx.x) * kFillWarps + cwg * Cfg::kWarpsPerGroup + warp,
                           static_cast<int64_t>(gridDim.x) * kFillWarps);
  RowsItem next = rows_item(w, s, 0), after = rows_item(w, s, 1);  // a warpgroup's next own item: two rounds on
  for (int round = 0; round < rounds; ++round) {
    const RowsItem it = next;
    next = after;
    after = rows_item(w, s, round + 2);
    if (it.skip) continue;
    if ((turn++ & 1) != cwg) {
      advance_ring<Cfg::kStages>(stage, phase, it.ksteps);
      continue;
    }
    ThreadColumns<BN> cols;
#pragma unroll
    for (int i = 0; i < BN / 64; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) cols.col[i][h] = w.cols[it.tile * BN + 64 * i + 16 * warp + lane / 4 + 8 * h];
    cols.copy_col = wtid < BN ? w.cols[it.tile * BN + wtid] : -1;
    while (!mbarrier_test_wait(order + 8 * cwg, order_parity)) {
      if (!fill.done()) fill.step(w, p);
    }
    order_parity ^= 1;
    switch (it.rows) {
      case 64: consume_item<T, Cfg, 64>(p, it, cols, cwg, ring, full, empty, order, stage_c, stage, phase); break;
      case 80: consume_item<T, Cfg, 80>(p, it, cols, cwg, ring, full, empty, order, stage_c, stage, phase); break;
      case 96: consume_item<T, Cfg, 96>(p, it, cols, cwg, ring, full, empty, order, stage_c, stage, phase); break;
      case 112: consume_item<T, Cfg, 112>(p, it, cols, cwg, ring, full, empty, order, stage_c, stage, phase); break;
      default: consume_item<T, Cfg, 128>(p, it, cols, cwg, ring, full, empty, order, stage_c, stage, phase); break;
    }
  }
  while (!fill.done()) fill.step(w, p);
  bulk_wait_read();  // the buffer stays allocated until the last copies have read it
}
#endif

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    tw_wgmma_rows_kernel(PackedTile w, Problem p, const __grid_constant__ CUtensorMap values_map,
                         const __grid_constant__ RowsSchedule schedule) {
#ifdef SPARSEPRUNE_WGMMA
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t ring = smem_addr(smem);
  const int wg = threadIdx.x / Cfg::kWarpgroup;
  const RingBarriers bars = init_ring_barriers<Cfg>(ring, Cfg::kWarpsPerGroup);  // one warpgroup per stage
  const uint32_t full = bars.full, empty = bars.empty, order = bars.order;
  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    produce_rows<T, Cfg>(w, p, schedule, values_map, ring, full, empty);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    consume_rows<T, Cfg>(w, p, schedule, wg - 1, ring, full, empty, order, smem + Cfg::kPipeBytes + (wg - 1) * Cfg::kEpiBytes);
  }
#else
  __trap();  // built without sm_90a: the host never selects this kernel (see wgmma_available)
#endif
}

// Cost of one item in the host's model: its K steps times its rows plus kItemRowsOverhead, the per-row-block
// share of reading the tile's values and of the item's fixed costs, counted as that many more rows.
constexpr int64_t kItemRowsOverhead = 32;

int64_t item_cost(int kept, int rows) { return static_cast<int64_t>(cdiv(kept, 64)) * (rows + kItemRowsOverhead); }

// Busiest CTA's cost under the kernel's static schedule (scheduled_item) for items sorted heaviest first.
int64_t schedule_peak(const std::vector<int64_t>& costs, int grid) {
  std::vector<int64_t> loads(static_cast<size_t>(grid), 0);
  for (size_t i = 0; i < costs.size(); ++i) {
    const int round = static_cast<int>(i / grid), slot = static_cast<int>(i % grid);
    loads[static_cast<size_t>(round & 1 ? grid - 1 - slot : slot)] += costs[i];
  }
  return *std::max_element(loads.begin(), loads.end());
}

// A schedule with its busiest SM's cost in the model above.
struct PlannedRows {
  RowsSchedule schedule;
  int64_t peak;
};

// Busiest SM's cost when every tile's items are `rows` high, handed out heaviest first.
int64_t uniform_peak(const std::vector<int>& kept, int64_t M, int rows, int sms) {
  std::vector<int64_t> costs;
  for (int k : kept) costs.insert(costs.end(), static_cast<size_t>(cdiv(M, rows)), item_cost(k, rows));
  std::stable_sort(costs.begin(), costs.end(), [](int64_t a, int64_t b) { return a > b; });
  return schedule_peak(costs, static_cast<int>(std::min<int64_t>(static_cast<int64_t>(costs.size()), sms)));
}

// The schedule for these tiles (kept rows per tile), M rows of x and `sms` SMs: each tile's height is the one
// nearest to f * 128 * mean / kept (short items on heavy tiles), for the f whose static schedule has the least
// busiest SM in the cost model above.
PlannedRows plan_rows_schedule(const std::vector<int>& kept, int64_t M, int sms) {
  const int tiles = static_cast<int>(kept.size());
  double mean = 0.0;
  for (int k : kept) mean += k;
  mean = std::max(1.0, mean / tiles);
  PlannedRows best{{}, -1};
  for (int f_pct = 30; f_pct <= 300; f_pct += 5) {
    std::vector<int> code(static_cast<size_t>(tiles));
    for (int t = 0; t < tiles; ++t) {
      const double want = kept[t] > 0 ? f_pct / 100.0 * 128.0 * mean / kept[t] : kRowsMax;
      const int c = static_cast<int>((want - kRowsMin) / kRowsStep + 0.5);
      code[t] = std::clamp(c, 0, kRowCodes - 1);
    }
    std::vector<int> order(static_cast<size_t>(tiles));
    for (int t = 0; t < tiles; ++t) order[t] = t;
    const auto rows_of = [&](int t) { return kRowsMin + kRowsStep * code[t]; };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return item_cost(kept[a], rows_of(a)) > item_cost(kept[b], rows_of(b));
    });
    RowsSchedule s{};
    s.positions = tiles;
    std::vector<int64_t> costs;
    for (int q = 0; q < tiles; ++q) {
      const int t = order[q], items = cdiv(M, rows_of(t));
      s.tile[q] = static_cast<int16_t>(t);
      s.rows_code[q] = static_cast<uint8_t>(code[t]);
      s.first_item[q] = static_cast<int32_t>(costs.size());
      costs.insert(costs.end(), static_cast<size_t>(items), item_cost(kept[t], rows_of(t)));
    }
    s.items = static_cast<int32_t>(costs.size());
    s.first_item[tiles] = s.items;
    const int64_t peak = schedule_peak(costs, std::min(s.items, sms));
    if (best.peak < 0 || peak < best.peak || (peak == best.peak && s.items < best.schedule.items)) {
      best.schedule = s;
      best.peak = peak;
    }
  }
  return best;
}

// Kept rows per tile, from the host's copy of tile_ptr.
std::vector<int> host_kept_rows(const PackedTile& w) {
  std::vector<int> kept(static_cast<size_t>(w.num_tiles));
  for (int t = 0; t < w.num_tiles; ++t) kept[t] = w.host_tile_ptr[t + 1] - w.host_tile_ptr[t];
  return kept;
}

// Values kept per (M, SMs, kept rows per tile), made once: planning walks every item for 55 factors.
template <typename V>
class ShapeCache {
 public:
  template <typename Make>
  const V& get(const std::vector<int>& kept, int64_t M, int sms, Make make) {
    std::vector<int64_t> key{M, sms};
    key.insert(key.end(), kept.begin(), kept.end());
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = entries_.find(key);
    if (found != entries_.end()) return found->second;
    return entries_.emplace(std::move(key), make()).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<std::vector<int64_t>, V> entries_;
};

const PlannedRows& cached_schedule(const std::vector<int>& kept, int64_t M, int sms) {
  static ShapeCache<PlannedRows> schedules;
  return schedules.get(kept, M, sms, [&] { return plan_rows_schedule(kept, M, sms); });
}

// Whether the planned schedule's busiest SM has at most kRowsPayPercent of the 128-row schedule's. No plan's busiest
// SM has less than the mean work at the least cost per row (128-row items: (128 + 32) / 128), so where even that
// mean leaves no such margin (schedules of many rounds) the plan is not made.
bool rows_pay(const std::vector<int>& kept, int64_t M, int sms) {
  const int64_t peak_128 = uniform_peak(kept, M, 128, sms);
  int64_t steps = 0;
  for (int k : kept) steps += cdiv(k, 64);
  const int64_t least_peak = 5 * M * steps / (4 * sms);
  if (100 * least_peak > kRowsPayPercent * peak_128) return false;
  return 100 * cached_schedule(kept, M, sms).peak <= kRowsPayPercent * peak_128;
}

template <typename T, typename Cfg>
const char* run_rows(const PackedTile& w, const Problem& p) {
  constexpr auto kKernel = tw_wgmma_rows_kernel<T, Cfg>;
  if (const char* err = allow_dynamic_smem<kKernel, Cfg::kSmemBytes>()) return err;
  CUtensorMap values_map{};  // left empty when every tile is empty: no item then has a K step to load
  if (w.value_rows > 0) {
    if (const char* err = encode_values_map(w, p.dtype, &values_map)) return err;
  }
  const RowsSchedule& schedule = cached_schedule(host_kept_rows(w), p.M, std::max(1, p.num_sms)).schedule;
  // Every SM takes part: the pruned columns are written by whichever consumers wait.
  const int grid = std::max(1, p.num_sms);
  return launch_kernel(kKernel, dim3(grid), dim3(Cfg::kThreads), Cfg::kSmemBytes, p.stream, p.x_from_prior_kernel, w,
                       p, values_map, schedule);
}

}  // namespace

const char* rows_unsupported(const PackedTile& w, const Problem& p) {
  if (w.granularity != 64 && w.granularity != 128) return "wgmma.rows needs G = 64 or 128";
  if (w.res_ptr != nullptr) return "wgmma.rows does not add a TEW residual";
  if (p.sym != 1 || !p.y_vec16) return "wgmma.rows writes a feature-major y with 16-byte aligned columns only";
  if (w.num_tiles > kRowsMaxTiles) return "wgmma.rows schedules at most 64 tiles";
  if (w.host_tile_ptr == nullptr) return "wgmma.rows needs the tile pointers on the host (host_tile_ptr)";
  return nullptr;
}

bool rows_schedule_pays(const PackedTile& w, const Problem& p) {
  if (rows_unsupported(w, p) != nullptr) return false;
  static ShapeCache<bool> choices;
  const std::vector<int> kept = host_kept_rows(w);
  const int sms = std::max(1, p.num_sms);
  return choices.get(kept, p.M, sms, [&] { return rows_pay(kept, p.M, sms); });
}

const char* launch_wgmma_rows(const PackedTile& w, const Problem& p) {
  if (const char* err = rows_unsupported(w, p)) return err;
  const bool half = p.dtype == DType::kHalf;
  if (w.granularity == 128) {
    return half ? run_rows<__half, RowsConfig<128>>(w, p) : run_rows<__nv_bfloat16, RowsConfig<128>>(w, p);
  }
  return half ? run_rows<__half, RowsConfig<64>>(w, p) : run_rows<__nv_bfloat16, RowsConfig<64>>(w, p);
}

}  // namespace tw
}  // namespace sparseprune

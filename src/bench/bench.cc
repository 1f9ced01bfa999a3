// run_bench(): for each sequence length, fresh N(0.5, 1) inputs on the device, then every backend
// timed on them; the table and CSV writers.
//
// The first call of each cell goes through forward() (validation, backend selection, support
// check). The timed calls then go to the backend's run() directly: validation queries pointer
// attributes (several microseconds of host time) and would otherwise swamp the shortest cells.
#include "bench/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "api/backend.h"
#include "api/workspace.h"
#include "bench/timer.h"
#include "common/checked_math.h"
#include "verify/inputs.h"

namespace flashattn {
namespace {

std::string_view cell_status_name(CellStatus s) {
  switch (s) {
    case CellStatus::kOk: return "ok";
    case CellStatus::kOutOfMemory: return "OOM";
    case CellStatus::kUnsupported: return "unsupported";
    case CellStatus::kSkipped: return "skipped";
    case CellStatus::kError: return "error";
  }
  return "?";
}

CellStatus cell_status_of(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return CellStatus::kOk;
    case StatusCode::kOutOfMemory: return CellStatus::kOutOfMemory;
    case StatusCode::kUnsupported:
    case StatusCode::kUnsupportedHeadDim:
    case StatusCode::kBackendUnavailable:
    case StatusCode::kInvalidDevice: return CellStatus::kUnsupported;
    default: return CellStatus::kError;
  }
}

// Bytes of q, k, v, out (the test dtype) and LSE (float32), from the shape alone; run_bench()
// checked that they fit before anything ran.
std::size_t io_bytes(const ProblemShape& s) {
  ShapeSizes sizes;
  if (!shape_sizes(s, &sizes).ok()) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(sizes.io_bytes);
}

// Params over null tensors of the shape: enough for workspace_bytes(), which reads sizes only.
ForwardParams shape_params(const ProblemShape& s, Device device) {
  ForwardParams p;
  p.q = TensorView::contiguous(nullptr, s.dtype, device, {s.batch, s.seqlen_q, s.heads, s.head_dim});
  p.k = TensorView::contiguous(nullptr, s.dtype, device,
                               {s.batch, s.seqlen_k, s.kv_heads, s.head_dim});
  p.v = p.k;
  p.out = p.q;
  p.lse = TensorView::contiguous(nullptr, DType::kFP32, device, {s.batch, s.heads, s.seqlen_q});
  p.softmax_scale = s.scale;
  p.causal = s.causal;
  return p;
}

struct Timers {
  bool on_cuda = false;
  bench::L2Flusher flusher;
  bench::CudaEventTimer events;
};

// One timed call of `backend` on `params`.
Status time_once(const Backend& backend, const ForwardParams& params, Timers& timers, double* ms) {
  if (!timers.on_cuda) {
    const double t0 = bench::steady_ms();
    Status st = backend.run(params, nullptr);
    *ms = bench::steady_ms() - t0;
    return st;
  }
  Status st = timers.flusher.flush(nullptr);
  if (st.ok()) st = timers.events.start(nullptr);
  if (st.ok()) st = backend.run(params, nullptr);
  if (st.ok()) st = timers.events.stop(nullptr);
  if (st.ok()) st = timers.events.elapsed_ms(ms);
  return st;
}

void run_cell(const BenchOptions& o, const ProblemShape& shape, const ForwardParams& params,
              Timers& timers, BenchCell* cell) {
  Status st = forward(params, cell->backend);  // validates, resolves, checks support; warm-up 1
  if (st.ok()) {
    std::string resolved;
    st = resolve_backend(params, cell->backend, &resolved);
    const Backend* backend = st.ok() ? find_backend(resolved) : nullptr;
    std::vector<double> times;
    for (int i = 1; st.ok() && i < o.warmup; ++i) st = forward(params, resolved);
    std::optional<cuda::DeviceGuard> guard;
    if (timers.on_cuda) guard.emplace(o.device.index);
    // The backend's workspace (naive's S matrix), allocated once for the cell: the timed runs
    // are the kernels alone, as a caller that passes a workspace sees them.
    OwnedWorkspace workspace;
    if (st.ok()) st = workspace.allocate(*backend, params);
    const ForwardParams timed = workspace.attach(params);
    const double t_start = bench::steady_ms();
    for (int i = 0; st.ok() && i < o.max_iters; ++i) {
      const bool budget_spent = (bench::steady_ms() - t_start) * 1e-3 >= o.max_seconds_per_cell;
      if (i >= o.min_iters && budget_spent) break;
      double ms = 0.0;
      st = time_once(*backend, timed, timers, &ms);
      if (st.ok()) times.push_back(ms);
    }
    if (st.ok()) {
      const bench::TimingSummary t = bench::summarize(times);
      cell->iters = static_cast<int>(times.size());
      cell->median_ms = t.median_ms;
      cell->min_ms = t.min_ms;
      cell->max_ms = t.max_ms;
      cell->tflops = t.median_ms > 0 ? attention_flops(shape) / (t.median_ms * 1e-3) / 1e12 : 0.0;
      return;
    }
  }
  cell->status = cell_status_of(st);
  cell->message = st.to_string();
}

std::string fixed(double x, int precision) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, x);
  return buf;
}

// Three significant digits: "0.0281", "812", "2.1e+04".
std::string sig3(double x) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.3g", x);
  return buf;
}

// What a backend has shown it can do: FLOP/s on a cell (or probe) of `at_flops` FLOPs.
struct Rate {
  double flops_per_s = 0;
  double at_flops = 0;
  std::string where;  // "measured at seqlen 1024", "probed at seqlen 1767"
};

// The shape cut down to about `target` FLOPs for a rate probe: the sequence length first (not
// below 16: shorter runs are all call overhead and their rate says nothing), then the batch.
ProblemShape probe_shape(const ProblemShape& shape, double target) {
  ProblemShape p = shape;
  const double per_len2 = attention_flops(p) / (static_cast<double>(p.seqlen_q) *
                                                static_cast<double>(p.seqlen_k));
  const auto len = static_cast<std::int64_t>(std::sqrt(target / per_len2));
  p.seqlen_q = p.seqlen_k = std::min(std::max<std::int64_t>(len, 16), shape.seqlen_q);
  // With a window the FLOPs grow linearly past the window's width, so the quadratic estimate
  // leaves the probe too long (seqlen 1e6 with 64 keys: a 2.6e9-FLOP probe for a 1e8 target).
  while (p.has_window() && p.seqlen_q > 16 && attention_flops(p) > 2.0 * target) {
    p.seqlen_q = p.seqlen_k = std::max<std::int64_t>(16, p.seqlen_q / 2);
  }
  const double flops = attention_flops(p);
  if (flops > target) {
    p.batch = std::max<std::int64_t>(1, static_cast<std::int64_t>(
                                            static_cast<double>(p.batch) * target / flops));
  }
  return p;
}

// Times one run of `name` on probe_shape(shape, target) after one warm-up run. False when the probe
// could not run: the cell then runs without an estimate and reports its own error.
bool probe_rate(const BenchOptions& o, const ProblemShape& shape, const std::string& name,
                double target, Timers& timers, Rate* rate) {
  const ProblemShape ps = probe_shape(shape, target);
  verifier::Inputs in;
  verifier::Outputs outs;
  Status st = verifier::make_inputs(ps, InputLayout::kContiguous, InputKind::kNormal, o.device,
                                    o.seed, &in);
  if (st.ok()) {
    st = verifier::make_outputs(ps, InputLayout::kContiguous, ps.dtype, o.device,
                                /*with_lse=*/true, &outs);
  }
  if (!st.ok()) return false;
  BenchOptions one = o;
  one.warmup = 1;
  one.min_iters = one.max_iters = 1;
  BenchCell cell;
  cell.backend = name;
  run_cell(one, ps, verifier::make_params(ps, in, outs), timers, &cell);
  if (cell.status != CellStatus::kOk || cell.median_ms <= 0) return false;
  rate->at_flops = attention_flops(ps);
  rate->flops_per_s = rate->at_flops / (cell.median_ms * 1e-3);
  rate->where = "probed at seqlen " + std::to_string(ps.seqlen_q) +
                (ps.batch != shape.batch ? " batch " + std::to_string(ps.batch) : "");
  return true;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string csv_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += (c == '\n' ? ' ' : c);
  }
  return q + "\"";
}

}  // namespace

double attention_flops(const ProblemShape& s) {
  if (s.has_window()) {
    ShapeSizes sizes;
    if (shape_sizes(s, &sizes).ok()) {
      return 4.0 * static_cast<double>(s.heads) * static_cast<double>(s.head_dim) *
             static_cast<double>(sizes.visible_pairs);
    }
  }
  const double flops = 4.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads) *
                       static_cast<double>(s.seqlen_q) * static_cast<double>(s.seqlen_k) *
                       static_cast<double>(s.head_dim);
  return s.causal ? flops / 2.0 : flops;
}

Status run_bench(const BenchOptions& options, BenchResult* result,
                 const std::function<void(const std::string&)>& progress) {
  if (options.backends.empty()) {
    return Status(StatusCode::kInvalidShape, "bench: backends is empty, expected at least one");
  }
  if (options.min_iters < 1 || options.max_iters < options.min_iters) {
    return Status(StatusCode::kInvalidShape,
                  "bench: min_iters = " + std::to_string(options.min_iters) + ", max_iters = " +
                      std::to_string(options.max_iters) + ", expected 1 <= min_iters <= max_iters");
  }
  for (std::int64_t len : options.seqlens) {
    if (len < 0) {
      return Status(StatusCode::kInvalidShape,
                    "bench: seqlen = " + std::to_string(len) + ", expected >= 0");
    }
  }
  // Every size at the longest length fits 64 bits, so none at a shorter one overflows.
  if (!options.seqlens.empty()) {
    ProblemShape longest = options.shape;
    longest.seqlen_q = longest.seqlen_k =
        *std::max_element(options.seqlens.begin(), options.seqlens.end());
    ShapeSizes sizes;
    const Status st = shape_sizes(longest, &sizes);
    if (!st.ok()) return Status(st.code(), "bench: " + st.message());
  }
  result->options = options;
  result->cells.clear();

  Timers timers;
  timers.on_cuda = options.device.type == DeviceType::kCUDA;
  if (timers.on_cuda) {
    cuda::DeviceGuard guard(options.device.index);
    Status st = timers.flusher.init(options.device.index);
    if (st.ok()) st = timers.events.init();
    if (!st.ok()) return st;
  }
  const double probe_flops = timers.on_cuda ? kProbeFlopsCuda : kProbeFlopsCpu;
  std::map<std::string, Rate> rates;  // per backend: its largest measured cell (or probe)
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };

  for (std::int64_t len : options.seqlens) {
    ProblemShape shape = options.shape;
    shape.seqlen_q = shape.seqlen_k = len;
    const double flops = attention_flops(shape);
    const std::string where = "seqlen " + std::to_string(len) + ": ";

    // 1. Which cells run, decided before this length's inputs are allocated.
    std::vector<BenchCell> cells(options.backends.size());
    bool any_runs = false;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      BenchCell& cell = cells[i];
      cell.backend = options.backends[i];
      cell.seqlen = len;
      std::size_t workspace = 0;
      if (!workspace_bytes(shape_params(shape, options.device), cell.backend, &workspace).ok()) {
        workspace = 0;
      }
      // Saturating: a workspace too large to count (naive's S past 2^64 bytes) shows as 1.8e10 GB.
      if (!checked_add(io_bytes(shape), workspace, &cell.memory_bytes)) {
        cell.memory_bytes = std::numeric_limits<std::size_t>::max();
      }
      auto rate = rates.find(cell.backend);
      if (rate == rates.end() && flops > probe_flops) {
        Rate probed;
        if (probe_rate(options, shape, cell.backend, probe_flops, timers, &probed)) {
          rate = rates.emplace(cell.backend, probed).first;
        }
      }
      if (rate != rates.end()) {
        cell.estimated_s = flops / rate->second.flops_per_s;
        if (cell.estimated_s > options.max_seconds_per_cell) {
          cell.status = CellStatus::kSkipped;
          cell.message = "est. " + sig3(cell.estimated_s) + " s per run > --max-seconds " +
                         sig3(options.max_seconds_per_cell) + ": " + sig3(flops) + " FLOPs at " +
                         sig3(rate->second.flops_per_s) + " FLOP/s, " + rate->second.where;
          // Skipping must not hide an out-of-memory: the lesson's table shows naive OOM at 32k
          // (its 275 GB S matrix on a 141 GB H200), so a skipped cell's workspace is allocated
          // once (and freed) to see whether it fits.
          if (timers.on_cuda && workspace > 0) {
            cuda::DeviceGuard guard(options.device.index);
            cuda::DeviceBuffer probe;
            const std::string what = cell.backend + ": its workspace";
            const Status st = probe.allocate(workspace, what.c_str());
            if (st.code() == StatusCode::kOutOfMemory) {
              cell.status = CellStatus::kOutOfMemory;
              cell.message = st.to_string();
            }
          }
        }
      }
      any_runs = any_runs || cell.status == CellStatus::kOk;
    }

    // 2. Inputs once per length, when some cell runs; freed (end of this iteration) before the
    //    next length.
    verifier::Inputs in;
    verifier::Outputs outs;
    Status alloc = Status::Ok();
    if (any_runs) {
      alloc = verifier::make_inputs(shape, InputLayout::kContiguous, InputKind::kNormal,
                                    options.device, options.seed, &in);
      if (alloc.ok()) {
        alloc = verifier::make_outputs(shape, InputLayout::kContiguous, shape.dtype,
                                       options.device, /*with_lse=*/true, &outs);
      }
    }
    const ForwardParams params = any_runs && alloc.ok() ? verifier::make_params(shape, in, outs)
                                                        : shape_params(shape, options.device);

    // 3. The cells, in backend order.
    for (BenchCell& cell : cells) {
      if (cell.status != CellStatus::kOk) {
        say(where + cell.backend + " " + std::string(cell_status_name(cell.status)) + " (" +
            cell.message + ")");
        result->cells.push_back(std::move(cell));
        continue;
      }
      say(where + cell.backend + ": start" +
          (cell.estimated_s > 0 ? ", est. " + sig3(cell.estimated_s) + " s per run" : ""));
      if (!alloc.ok()) {
        cell.status = cell_status_of(alloc);
        if (alloc.code() == StatusCode::kOutOfMemory) cell.status = CellStatus::kOutOfMemory;
        cell.message = "inputs: " + alloc.to_string();
      } else {
        run_cell(options, shape, params, timers, &cell);
      }
      if (cell.status == CellStatus::kOk && cell.median_ms > 0) {
        Rate& rate = rates[cell.backend];
        if (flops >= rate.at_flops) {
          rate = {flops / (cell.median_ms * 1e-3), flops, "measured at seqlen " +
                                                              std::to_string(len)};
        }
      }
      std::string line = where + cell.backend + " ";
      if (cell.status == CellStatus::kOk) {
        line += fixed(cell.median_ms, 3) + " ms, " + fixed(cell.tflops, 2) + " TFLOP/s (" +
                std::to_string(cell.iters) + " runs)";
      } else {
        line += std::string(cell_status_name(cell.status)) + " (" + cell.message + ")";
      }
      say(line);
      result->cells.push_back(std::move(cell));
    }
  }
  return Status::Ok();
}

std::string BenchResult::table() const {
  const BenchOptions& o = options;
  const std::vector<std::string>& names = o.backends;
  std::ostringstream os;
  const ProblemShape& sh = o.shape;
  if (sh.has_window()) {
    os << "# FLOPs = 4 * heads * head_dim * the (query, key) pairs the window keeps (causal "
          "included); TFLOP/s = FLOPs / median time\n";
  } else {
    os << "# FLOPs = 4 * batch * heads * seqlen_q * seqlen_k * head_dim (FlashAttention's "
          "forward convention), halved for causal; TFLOP/s = FLOPs / median time\n";
  }
  os << "# b=" << sh.batch << " h=" << sh.heads << "/" << sh.kv_heads << " d=" << sh.head_dim
     << " " << dtype_name(sh.dtype) << (sh.causal ? " causal" : "") << sh.variants_string()
     << ", seqlen_q = seqlen_k = seqlen"
     << " | device "
     << (o.device.type == DeviceType::kCUDA ? "cuda:" + std::to_string(o.device.index) : "cpu")
     << " | median of " << o.min_iters
     << (o.min_iters == o.max_iters ? "" : "-" + std::to_string(o.max_iters))
     << (o.max_iters == 1 ? " run" : " runs") << " after " << o.warmup
     << (o.warmup == 1 ? " warm-up run" : " warm-up runs")
     << (o.device.type == DeviceType::kCUDA ? ", L2 flushed before each" : "")
     << "; cells estimated above " << sig3(o.max_seconds_per_cell) << " s per run skipped\n";
  // Speedup: the last backend listed (the fastest kernel, by the default order) over naive when
  // naive is listed, else over the first.
  std::size_t den = 0;
  const std::size_t num = names.size() - 1;
  const auto naive = std::find(names.begin(), names.end(), "naive");
  if (naive != names.end()) den = static_cast<std::size_t>(naive - names.begin());
  const bool speedup = names.size() >= 2 && num != den;

  std::string header = pad_left("seqlen", 8);
  for (const std::string& n : names) {
    header += " | " + pad_left(n + " ms", 12) + pad_left("TFLOP/s", 10) + pad_left("mem GB", 10) +
              pad_left("status", 12);
  }
  if (speedup) header += " | " + pad_left(names[num] + "/" + names[den], 12);
  os << header << "\n";

  for (std::size_t row = 0; row * names.size() < cells.size(); ++row) {
    const BenchCell* rc = &cells[row * names.size()];
    std::string line = pad_left(std::to_string(rc[0].seqlen), 8);
    for (std::size_t i = 0; i < names.size() && row * names.size() + i < cells.size(); ++i) {
      const BenchCell& c = rc[i];
      const bool ok = c.status == CellStatus::kOk;
      line += " | " + pad_left(ok ? fixed(c.median_ms, 3) : "-", 12) +
              pad_left(ok ? fixed(c.tflops, c.tflops >= 1.0 ? 1 : 4) : "-", 10) +
              pad_left(fixed(static_cast<double>(c.memory_bytes) / 1e9, 3), 10) +
              pad_left(std::string(cell_status_name(c.status)), 12);
    }
    if (speedup && row * names.size() + std::max(num, den) < cells.size()) {
      const BenchCell& a = rc[den];
      const BenchCell& b = rc[num];
      std::string s = "-";
      if (a.status == CellStatus::kOk && b.status == CellStatus::kOk && b.median_ms > 0) {
        s = fixed(a.median_ms / b.median_ms, 2) + "x";
      } else if (a.status != CellStatus::kOk && b.status == CellStatus::kOk) {
        s = names[den] + " " + std::string(cell_status_name(a.status));
      }
      line += " | " + pad_left(s, 12);
    }
    os << line << "\n";
  }
  // Messages of the cells that did not run, once each, so an OOM shows what it needed.
  for (const BenchCell& c : cells) {
    if (c.status != CellStatus::kOk) {
      os << "# seqlen " << c.seqlen << " " << c.backend << ": " << c.message << "\n";
    }
  }
  return os.str();
}

std::string BenchResult::csv() const {
  const ProblemShape& s = options.shape;
  std::ostringstream os;
  os << "seqlen,backend,status,iters,median_ms,min_ms,max_ms,tflops,memory_bytes,flops,batch,"
        "heads,kv_heads,head_dim,dtype,causal,window_left,window_right,softcap,alibi,sinks,"
        "message\n";
  for (const BenchCell& c : cells) {
    ProblemShape cs = s;
    cs.seqlen_q = cs.seqlen_k = c.seqlen;
    char nums[256];
    std::snprintf(nums, sizeof(nums), "%d,%.6f,%.6f,%.6f,%.4f,%zu,%.0f", c.iters, c.median_ms,
                  c.min_ms, c.max_ms, c.tflops, c.memory_bytes, attention_flops(cs));
    os << c.seqlen << "," << c.backend << "," << cell_status_name(c.status) << "," << nums << ","
       << s.batch << "," << s.heads << "," << s.kv_heads << "," << s.head_dim << ","
       << dtype_name(s.dtype) << "," << (s.causal ? 1 : 0) << "," << s.window_left << ","
       << s.window_right << "," << s.softcap << "," << alibi_mode_name(s.alibi) << ","
       << (s.sinks ? 1 : 0) << "," << csv_quote(c.message) << "\n";
  }
  return os.str();
}

}  // namespace flashattn

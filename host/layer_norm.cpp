// The drop-in's eager calls from C++: a signature's plan (labkit.ops.dropin.plan) as a LayerNormPlan holding the
// forward and backward Programs (host/launch_program.h) its dispatch chose, or none where torch's kernel serves,
// and a C++ autograd node, so that recording autograd costs what torch's own node costs: no Python in the
// forward after the plan lookup, none at all in the backward, which the engine runs without the GIL.
//
// What it computes is decided in Python, never here: the Programs are the plans' own (labkit.core.program), and
// every input a Program may not take at this call (a misaligned buffer, grad_y not of x's dtype) goes to
// torch's native_layer_norm(_backward), as the Python path sends it. Double backward recomputes through torch's
// layer_norm, as the Python node does (its backward is twice differentiable; ours is not).
#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <ATen/core/op_registration/adaption.h>
#include <ATen/ops/native_layer_norm_backward_native.h>
#include <ATen/ops/native_layer_norm_native.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "launch_program.h"

namespace py = pybind11;
using at::Tensor;
using labkit_host::Program;

namespace {

struct ProgramHolder : torch::CustomClassHolder {
  Program program;
};

c10::intrusive_ptr<ProgramHolder> make_program(int slots, const py::list& steps) {
  auto holder = c10::make_intrusive<ProgramHolder>();
  Program& p = holder->program;
  p.slots = slots;
  for (const auto& item : steps) {
    py::tuple t = item.cast<py::tuple>();
    labkit_host::Step s;
    std::string kind = t[0].cast<std::string>();
    if (kind == "memset") {
      s.memset = true;
      s.slot = t[1].cast<int>();
      s.offset = t[2].cast<int64_t>();
      s.nbytes = t[3].cast<int64_t>();
    } else if (kind == "launch") {
      s.fn = reinterpret_cast<labkit_host::CUfunction>(t[1].cast<uint64_t>());
      py::tuple grid = t[2].cast<py::tuple>(), block = t[3].cast<py::tuple>();
      for (int i = 0; i < 3; ++i) {
        s.grid[i] = grid[i].cast<unsigned>();
        s.block[i] = block[i].cast<unsigned>();
      }
      s.shared_mem = t[4].cast<unsigned>();
      for (const auto& a : t[5].cast<py::list>()) {
        py::tuple at = a.cast<py::tuple>();
        labkit_host::Arg arg;
        arg.kind = at[0].cast<int>();
        arg.slot = at[1].cast<int>();
        if (arg.kind == labkit_host::kMap) {
          py::tuple g = at[2].cast<py::tuple>();
          py::tuple dims = g[0].cast<py::tuple>(), strides = g[1].cast<py::tuple>(), box = g[2].cast<py::tuple>();
          auto m = std::make_unique<labkit_host::MapGeometry>();
          m->data_type = g[3].cast<int>();  // labkit.core.tensormap's CUtensorMapDataType of the elements
          TORCH_CHECK(m->data_type == 7 || m->data_type == 1, "tensor map data type must be 7 (float32) or 1 "
                      "(2-byte elements), got ", m->data_type);
          m->rank = static_cast<unsigned>(dims.size());
          TORCH_CHECK(m->rank >= 1 && m->rank <= 5 && strides.size() == m->rank - 1 && box.size() == m->rank,
                      "tensor map rank mismatch");
          for (unsigned i = 0; i < m->rank; ++i) {
            m->dims[i] = dims[i].cast<unsigned long long>();
            m->box[i] = box[i].cast<unsigned>();
            if (i + 1 < m->rank) m->strides[i] = strides[i].cast<unsigned long long>();
          }
          arg.value = static_cast<int64_t>(p.maps.size());
          p.maps.push_back(std::move(m));
        } else {
          arg.value = at[2].cast<int64_t>();
        }
        TORCH_CHECK(arg.kind >= 0 && arg.kind <= labkit_host::kEps, "unknown argument kind ", arg.kind);
        TORCH_CHECK(arg.kind != labkit_host::kPtr && arg.kind != labkit_host::kMap ||
                        (arg.slot >= 0 && arg.slot < slots),
                    "argument slot ", arg.slot, " out of range");
        s.args.push_back(arg);
      }
      TORCH_CHECK(s.args.size() <= static_cast<size_t>(Program::kMaxArgs), "too many kernel arguments");
    } else {
      TORCH_CHECK(false, "unknown step kind ", kind);
    }
    TORCH_CHECK(!s.memset || (s.slot >= 0 && s.slot < slots), "memset slot out of range");
    p.steps.push_back(std::move(s));
  }
  return holder;
}

// torch's current stream of a CUDA device, as its raw handle (the capturing stream under graph capture).
void* current_stream(const c10::Device& device) {
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return impl.getStreamNativeHandle(impl.getStream(device));
}

void run(const ProgramHolder& holder, const c10::Device& device, const uint64_t* ptrs, float eps) {
  labkit_host::use_primary_context(device.index());
  holder.program.run(ptrs, eps, current_stream(device));
}

inline uint64_t address(const Tensor& t) {
  return t.defined() ? reinterpret_cast<uint64_t>(t.data_ptr()) : 0;
}

// x, grad_y and gamma against what the plan's backward program reads them as (labkit.ops.backward
// .GradLaunches.align): 16 bytes where tensor maps read them, else torch's vector of x's dtype (16 bytes for
// float32, 8 for bfloat16/float16).
inline bool backward_misaligned(const Tensor& x, const Tensor& dy, const Tensor& g, int64_t align) {
  return ((address(x) | address(dy) | address(g)) & static_cast<uint64_t>(align - 1)) != 0;
}

// A forward's buffers against what its plan's kernels need (labkit.ops.dropin.plan.KernelPlan.misaligned,
// labkit.ops.dropin.autocast.AutocastPlan.aligned): x at `align` (torch's vector of x's dtype, 16 bytes for float32
// and 8 for bfloat16/float16, or 16 where a tensor map reads x), gamma and beta at a vector of four of their own
// elements (they are read by pointer; an autocast build's are float32 beside a 2-byte x: 16 bytes).
inline bool forward_misaligned(const Tensor& x, const Tensor& g, const Tensor& beta, int64_t align) {
  const uint64_t vector = 4 * static_cast<uint64_t>(g.element_size());
  return (address(x) & static_cast<uint64_t>(align - 1)) != 0 || ((address(g) | address(beta)) & (vector - 1)) != 0;
}

constexpr int kForwardSlots = 7;   // x, weight, bias, y, mean, rstd, scratch
constexpr int kBackwardSlots = 9;  // dy, x, mean, rstd, weight, dx, dweight, dbias, scratch
constexpr int kForwardY = 3;
constexpr int kBackwardDx = 5, kBackwardDweight = 6, kBackwardDbias = 7;

inline int64_t round_up16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// Inside our aten::native_layer_norm(_backward) kernels (labkit.enable()), the dispatcher would send a call of those
// ops back to us: there torch's own kernels are called directly (the functions torch registers for them).
thread_local bool serving_aten = false;

struct ServingAten {
  bool saved = serving_aten;
  ServingAten() { serving_aten = true; }
  ~ServingAten() { serving_aten = saved; }
};

std::tuple<Tensor, Tensor, Tensor> torch_forward(const Tensor& x, at::IntArrayRef ns, const Tensor& w,
                                                 const Tensor& b, double eps) {
  if (serving_aten) {
    if (x.is_cpu()) return at::native::layer_norm_cpu(x, ns, w, b, eps);
#ifdef LABKIT_TORCH_CUDA
    return at::native::layer_norm_cuda(x, ns, w, b, eps);
#endif
  }
  return at::native_layer_norm(x, ns, w, b, eps);
}

std::tuple<Tensor, Tensor, Tensor> torch_backward(const Tensor& dy, const Tensor& x, at::IntArrayRef ns,
                                                  const Tensor& mean, const Tensor& rstd, const Tensor& w,
                                                  const Tensor& b, std::array<bool, 3> mask) {
  if (serving_aten) {
    if (x.is_cpu()) return at::native::layer_norm_backward_cpu(dy, x, ns, mean, rstd, w, b, mask);
#ifdef LABKIT_TORCH_CUDA
    return at::native::layer_norm_backward_cuda(dy, x, ns, mean, rstd, w, b, mask);
#endif
  }
  return at::native_layer_norm_backward(dy, x, ns, mean, rstd, w, b, mask);
}

// One input signature of the drop-in (labkit.ops.dropin.plan.KernelPlan / Plan), as Python planned it.
struct LayerNormPlan : torch::CustomClassHolder {
  c10::intrusive_ptr<ProgramHolder> forward, backward;  // null: torch's kernel serves that direction
  std::vector<int64_t> normalized_shape, stat_shape;
  double eps = 1e-5;
  int64_t rows = 0, n = 0, forward_scratch = 0, backward_scratch = 0, partial_groups = 1;
  int64_t align = 16;      // the forward's x alignment in bytes (forward_misaligned: torch serves that call)
  int64_t backward_align = 16;  // the backward's for x, grad_y and gamma (backward_misaligned: torch's backward)
  Tensor ones, neg_zeros;  // gamma 1 and beta -0.0 of gamma's dtype standing in for an absent weight and bias
  // an autocast build (labkit.ops.dropin.autocast): x and dX of x's dtype, y, grad_y, dweight and dbias float32,
  // and torch's kernels, where they serve, run on x.to(float32) as autocast's cast gives it
  bool autocast = false;
  // the first forward step that touches y, the first backward step that touches dx, dweight or dbias: the steps
  // before them are launched before those outputs are allocated
  size_t forward_split = 0, backward_split = 0;

  // One allocation for the forward's scratch and statistics, [scratch | mean | rstd] (the scratch rounded up to 16
  // bytes): the no-grad forward's, and the training forward's where our backward is planned. Offsets in bytes.
  int64_t packed_mean_at() const { return round_up16(forward_scratch); }
  int64_t packed_bytes() const { return packed_mean_at() + 8 * rows; }
};

// The statistics a training forward saves: torch's mean and rstd tensors (where torch's forward served), or the
// packed buffer our forward wrote them into (LayerNormPlan::packed_mean_at). Views of the packed buffer are made
// only where torch's backward needs them as tensors.
struct SavedStats {
  Tensor mean, rstd, packed;

  uint64_t mean_address(const LayerNormPlan& p) const {
    return packed.defined() ? address(packed) + p.packed_mean_at() : address(mean);
  }
  uint64_t rstd_address(const LayerNormPlan& p) const {
    return packed.defined() ? mean_address(p) + 4 * p.rows : address(rstd);
  }
  // mean and rstd as float32 tensors of torch's statistics shape (views into the packed buffer where there is one)
  std::pair<Tensor, Tensor> tensors(const LayerNormPlan& p) const {
    if (!packed.defined()) return {mean, rstd};
    auto view = [&](int64_t at) {
      return packed.narrow(0, at, 4 * p.rows).view(at::kFloat).view(p.stat_shape);
    };
    return {view(p.packed_mean_at()), view(p.packed_mean_at() + 4 * p.rows)};
  }
};

// The forward program with every slot but y filled in `ptrs`: the steps before y's first use launched (where
// there are any: the chain's memset and statistics), then y allocated while they run, then the rest. Returns y.
Tensor launch_forward(const LayerNormPlan& p, const Tensor& x, uint64_t (&ptrs)[kForwardSlots]) {
  const Program& program = p.forward->program;
  const float eps = static_cast<float>(p.eps);
  labkit_host::use_primary_context(x.device().index());
  void* stream = current_stream(x.device());
  program.run(ptrs, eps, stream, 0, p.forward_split);
  // x's dtype: float32, or bfloat16/float16 rounded at the store; float32 in an autocast build
  Tensor y = at::empty(x.sizes(), p.autocast ? x.options().dtype(at::kFloat) : x.options());
  ptrs[kForwardY] = address(y);
  program.run(ptrs, eps, stream, p.forward_split, program.steps.size());
  return y;
}

std::tuple<Tensor, Tensor, Tensor> run_forward(const LayerNormPlan& p, const Tensor& x, const Tensor& w,
                                               const Tensor& b, bool stats) {
  const Tensor& g = w.defined() ? w : p.ones;
  const Tensor& beta = b.defined() ? b : p.neg_zeros;
  if (!p.forward || forward_misaligned(x, g, beta, p.align)) {  // torch's can_vectorize fails too: torch serves
    const Tensor xt = p.autocast ? x.to(at::kFloat) : x;  // what autocast hands torch's kernel
    if (stats) return torch_forward(xt, p.normalized_shape, w, b, p.eps);
    return {at::layer_norm(xt, p.normalized_shape, w, b, p.eps), Tensor(), Tensor()};
  }
  c10::DeviceGuard guard(x.device());
  auto f32 = x.options().dtype(at::kFloat);
  Tensor mean, rstd, scratch;
  uint64_t mp, rp, sp;
  if (stats) {
    mean = at::empty(p.stat_shape, f32);
    rstd = at::empty(p.stat_shape, f32);
    if (p.forward_scratch) scratch = at::empty({p.forward_scratch}, x.options().dtype(at::kByte));
    mp = address(mean), rp = address(rstd);
  } else {  // scratch with mean and rstd behind it: one allocation
    scratch = at::empty({p.packed_bytes()}, x.options().dtype(at::kByte));
    mp = address(scratch) + p.packed_mean_at();
    rp = mp + 4 * p.rows;
  }
  sp = address(scratch);
  uint64_t ptrs[kForwardSlots] = {address(x), address(g), address(beta), 0, mp, rp, sp};
  Tensor y = launch_forward(p, x, ptrs);
  return {y, mean, rstd};
}

// A training forward: y, and the statistics to save (SavedStats). Where our backward is planned: one allocation
// for scratch, mean and rstd, which only our kernels read unless that backward refuses the call.
std::pair<Tensor, SavedStats> run_forward_train(const LayerNormPlan& p, const Tensor& x, const Tensor& w,
                                                const Tensor& b) {
  const Tensor& g = w.defined() ? w : p.ones;
  const Tensor& beta = b.defined() ? b : p.neg_zeros;
  if (!p.forward || forward_misaligned(x, g, beta, p.align) || !p.backward) {
    // torch's forward, or torch's backward to follow, which takes mean and rstd as tensors: two allocations cost
    // less host time than views of a packed buffer made at backward
    auto [y, mean, rstd] = run_forward(p, x, w, b, true);
    return {y, SavedStats{mean, rstd, Tensor()}};
  }
  c10::DeviceGuard guard(x.device());
  SavedStats saved;
  saved.packed = at::empty({p.packed_bytes()}, x.options().dtype(at::kByte));
  const uint64_t sp = address(saved.packed), mp = saved.mean_address(p), rp = saved.rstd_address(p);
  uint64_t ptrs[kForwardSlots] = {address(x), address(g), address(beta), 0, mp, rp, sp};
  Tensor y = launch_forward(p, x, ptrs);
  return {y, std::move(saved)};
}

std::tuple<Tensor, Tensor, Tensor> run_backward(const LayerNormPlan& p, Tensor dy, const Tensor& x,
                                                const SavedStats& stats, const Tensor& w, const Tensor& b,
                                                std::array<bool, 3> mask) {
  const Tensor& g = w.defined() ? w : p.ones;
  // what labkit.ops.backward.refusal asks of grad_y, mean and rstd (a negated view or a ZeroTensor: memory that
  // does not hold the values); the packed statistics are our forward's own
  const Tensor &mean = stats.mean, &rstd = stats.rstd;
  // (any caller of aten::native_layer_norm_backward reaches this under labkit.enable(): statistics of another dtype
  // or device go to torch, which converts or refuses them as it does without us)
  const auto dy_type = p.autocast ? at::kFloat : x.scalar_type();
  bool ours = p.backward && dy.is_cuda() && dy.device() == x.device() && dy.scalar_type() == dy_type &&
              !dy.is_neg() && !dy._is_zerotensor() && dy.sizes() == x.sizes() &&
              (stats.packed.defined() ||
               (mean.device() == x.device() && rstd.device() == x.device() && mean.scalar_type() == at::kFloat &&
                rstd.scalar_type() == at::kFloat && mean.is_contiguous() && rstd.is_contiguous() &&
                !mean.is_neg() && !rstd.is_neg() && mean.numel() == p.rows && rstd.numel() == p.rows));
  if (ours) {
    dy = dy.contiguous();  // what torch's backward does first (LayerNormBackwardKernelImpl)
    ours = !backward_misaligned(x, dy, g, p.backward_align);
  }
  if (!ours) {
    auto [m, r] = stats.tensors(p);
    if (!p.autocast) return torch_backward(dy, x, p.normalized_shape, m, r, w, b, mask);
    // autocast's tensors: torch's float32 backward on the cast x, dX cast back as the cast's backward does
    auto [gx, gw, gb] = torch_backward(dy, x.to(at::kFloat), p.normalized_shape, m, r, w, b, mask);
    return {gx.defined() ? gx.to(x.scalar_type()) : gx, gw, gb};
  }
  c10::DeviceGuard guard(x.device());
  bool want_w = mask[1] && w.defined(), want_b = mask[2] && b.defined();
  // dX, dgamma, dbeta (and torch's partials) in x's dtype, as torch's kernel for it; an autocast build's dgamma
  // and dbeta in float32
  const auto out = x.options();
  const auto param_out = p.autocast ? x.options().dtype(at::kFloat) : out;
  Tensor scratch;
  if (p.backward_scratch) scratch = at::empty({p.backward_scratch}, x.options().dtype(at::kByte));
  uint64_t ptrs[kBackwardSlots] = {address(dy), address(x), stats.mean_address(p), stats.rstd_address(p),
                                   address(g), 0, 0, 0, address(scratch)};
  // the steps before the first that touches dx, dweight or dbias (the chain and rows schedules' row sums; none in
  // the split schedule) start while those are allocated
  const Program& program = p.backward->program;
  labkit_host::use_primary_context(x.device().index());
  void* stream = current_stream(x.device());
  program.run(ptrs, 0.0f, stream, 0, p.backward_split);
  Tensor dx = at::empty(x.sizes(), out);
  Tensor dg, db;
  if (p.partial_groups > 1) {
    if (want_w) dg = at::empty({p.partial_groups, p.n}, param_out);
    if (want_b) db = at::empty({p.partial_groups, p.n}, param_out);
  } else {
    if (want_w) dg = at::empty(p.normalized_shape, param_out);
    if (want_b) db = at::empty(p.normalized_shape, param_out);
  }
  ptrs[kBackwardDx] = address(dx), ptrs[kBackwardDweight] = address(dg), ptrs[kBackwardDbias] = address(db);
  program.run(ptrs, 0.0f, stream, p.backward_split, program.steps.size());
  if (p.partial_groups > 1) {  // torch's own .sum(0) of the same partials (LaunchGammaBetaBackwardCUDAKernel)
    if (dg.defined()) dg = dg.sum(0).view(p.normalized_shape);
    if (db.defined()) db = db.sum(0).view(p.normalized_shape);
  }
  return {mask[0] ? dx : Tensor(), dg, db};
}

// Every input is a defined tensor (a C++ Function's input list holds no undefined ones on every torch version):
// an absent weight or bias travels as the plan's placeholder (ones, -0.0), which requires no grad, with `affine`
// saying which are real (bit 0 weight, bit 1 bias).
struct LayerNormFunction : torch::autograd::Function<LayerNormFunction> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w_in,
                        const Tensor& b_in, int64_t affine, c10::intrusive_ptr<LayerNormPlan> plan) {
    Tensor w = affine & 1 ? w_in : Tensor(), b = affine & 2 ? b_in : Tensor();
    auto [y, stats] = run_forward_train(*plan, x, w, b);
    // saved: x, then mean and rstd (torch's forward) or the packed buffer and nothing (ours), then w and b
    const bool packed = stats.packed.defined();
    ctx->save_for_backward({x, packed ? stats.packed : stats.mean, packed ? Tensor() : stats.rstd, w, b});
    ctx->saved_data["need"] = static_cast<int64_t>(x.requires_grad() | (w.defined() && w.requires_grad()) << 1 |
                                                   (b.defined() && b.requires_grad()) << 2 | packed << 3);
    ctx->saved_data["plan"] = c10::IValue::make_capsule(std::move(plan));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto plan = c10::static_intrusive_pointer_cast<LayerNormPlan>(ctx->saved_data["plan"].toCapsule());
    int64_t need = ctx->saved_data["need"].toInt();
    // what this backward pass asks for (autograd.grad(y, x) wants dx alone), within what the forward could give
    bool nx = (need & 1) && ctx->needs_input_grad(0), nw = (need & 2) && ctx->needs_input_grad(1),
         nb = (need & 4) && ctx->needs_input_grad(2);
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[3], &b = saved[4];
    const Tensor& gy = grads[0];
    if (!gy.defined()) return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    if (torch::autograd::GradMode::is_enabled()) {
      // create_graph=True: eager autograd differentiates torch's layer_norm twice; recomputing through it gives
      // those grads and their graph
      torch::autograd::variable_list wanted;
      if (nx) wanted.push_back(x);
      if (nw) wanted.push_back(w);
      if (nb) wanted.push_back(b);
      // (an autocast build's: of autocast's cast, whose backward rounds dX to x's dtype)
      Tensor y = at::layer_norm(plan->autocast ? x.to(at::kFloat) : x, plan->normalized_shape, w, b, plan->eps);
      auto g = torch::autograd::grad({y}, wanted, {gy}, /*retain_graph=*/true, /*create_graph=*/true);
      size_t i = 0;
      Tensor gx = nx ? g[i++] : Tensor();
      Tensor gw = nw ? g[i++] : Tensor();
      Tensor gb = nb ? g[i++] : Tensor();
      return {gx, gw, gb, Tensor(), Tensor()};
    }
    const SavedStats stats =
        need & 8 ? SavedStats{Tensor(), Tensor(), saved[1]} : SavedStats{saved[1], saved[2], Tensor()};
    auto [gx, gw, gb] = run_backward(*plan, gy, x, stats, w, b, {nx, nw, nb});
    return {nx ? gx : Tensor(), nw ? gw : Tensor(), nb ? gb : Tensor(), Tensor(), Tensor()};
  }
};

inline Tensor value_or_undefined(const std::optional<Tensor>& t) {
  return t.has_value() ? *t : Tensor();
}

Tensor train(c10::intrusive_ptr<LayerNormPlan> p, const Tensor& x, const std::optional<Tensor>& w,
             const std::optional<Tensor>& b) {
  TORCH_CHECK((w || p->ones.defined()) && (b || p->neg_zeros.defined()),
              "a plan trained without weight or bias needs its placeholders (ones, neg_zeros)");
  int64_t affine = (w ? 1 : 0) | (b ? 2 : 0);
  const Tensor& wt = w ? *w : p->ones;
  const Tensor& bt = b ? *b : p->neg_zeros;
  return LayerNormFunction::apply(x, wt, bt, affine, std::move(p));
}

// --- the eager call's decisions, cached by signature -------------------------------------------------------------
// Python's get_plan decides; `remember` records its answer for a signature, and `call` then serves that signature
// with no Python between the drop-in's entry checks and the launches (or torch's own at::layer_norm): what the
// Python path costs on top of torch's call is mostly building the signature tuple and looking it up.
// The key holds everything labkit.ops.dropin.plan.signature holds (shape, strides, dtype, device and negation bit
// of x, weight and bias, which of them require grad, normalized_shape, eps, whether autograd records) plus device
// types. The contexts that change a decision are not in it: Python remembers only decisions planned in the default
// context, takes its own path where a dispatch protocol is set, and suspends the fast path while a forced backward
// or host.off is active (labkit.ops.dropin.host.suspend).

// torch's layer_norm (its own autograd node), the plan's, or (the registered ops' kernels only, never kept) the
// Python runner's: the plan is ours but the host extension does not serve it (host.off, a device it refuses)
enum Decision : int { kTorch = 0, kOurs = 1, kPython = 2 };

struct Remembered {
  int decision = kTorch;
  c10::intrusive_ptr<LayerNormPlan> plan;  // kOurs
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& v) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

constexpr size_t kMaxRemembered = 4096;  // labkit.ops.dropin.plan.MAX_PLANS: cleared, not evicted, when full
std::mutex remembered_lock;  // held for lookups too (of every Decisions map): the GIL is not what guards C++ state
using Decisions = std::unordered_map<std::vector<int64_t>, Remembered, KeyHash>;
Decisions remembered;  // the eager fast path's; each Served registration keeps two more

// The answer kept for `key` in `map`, if any.
std::optional<Remembered> lookup(const Decisions& map, const std::vector<int64_t>& key) {
  std::lock_guard<std::mutex> hold(remembered_lock);
  auto it = map.find(key);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

// Keep `r` for `key` (a full map is cleared, not evicted). Entries given up are destroyed after the lock is released:
// a plan's tensors may take the GIL when they go, and a thread holding the GIL may be waiting for this lock.
void keep(Decisions& map, std::vector<int64_t> key, Remembered r) {
  Decisions dropped;
  std::lock_guard<std::mutex> hold(remembered_lock);
  if (map.size() >= kMaxRemembered) dropped.swap(map);
  std::swap(map[std::move(key)], r);  // r now holds what was there, destroyed after the lock
}

// Every answer in `map` dropped, destroyed after the lock is released (as keep's).
void drop_all(Decisions& map) {
  Decisions dropped;
  std::lock_guard<std::mutex> hold(remembered_lock);
  dropped.swap(map);
}

// false where a tensor is not one our signatures describe (sparse, nested, a ZeroTensor): Python's path decides.
bool plain_tensor(const Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_nested() && !t._is_zerotensor();
}

void put_tensor(std::vector<int64_t>& k, const Tensor& t) {
  k.push_back(t.dim());
  for (int64_t s : t.sizes()) k.push_back(s);
  for (int64_t s : t.strides()) k.push_back(s);
  k.push_back(static_cast<int64_t>(t.scalar_type()));
  k.push_back(static_cast<int64_t>(t.device().type()));
  k.push_back(t.device().index());
  k.push_back(t.requires_grad());
  k.push_back(t.is_neg());  // a lazily negated view: Python refuses it for our kernels (its memory holds -t)
}

// x, then whether weight and bias are given and each as put_tensor describes it: the tail of every key. False
// (nothing pushed) where a tensor is not one our plans describe.
bool put_inputs(std::vector<int64_t>& k, const Tensor& x, const Tensor* w, const Tensor* b) {
  if (!plain_tensor(x) || (w && !plain_tensor(*w)) || (b && !plain_tensor(*b))) return false;
  put_tensor(k, x);
  k.push_back(w != nullptr);
  if (w) put_tensor(k, *w);
  k.push_back(b != nullptr);
  if (b) put_tensor(k, *b);
  return true;
}

// An exact Python int that fits int64 (not a bool, numpy integer or SymInt), with no Python error left set.
bool exact_int(PyObject* o, long long& v) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// normalized_shape's dims when it is an exact int, or a tuple or list (torch.Size included) of them; anything else
// (floats, bools, tensors, numpy integers, SymInts, huge ints) returns false and takes the Python path, which
// accepts or refuses it as torch does.
bool parse_shape(py::handle h, std::vector<int64_t>& out) {
  PyObject* o = h.ptr();
  long long v;
  if (PyLong_CheckExact(o)) {
    if (!exact_int(o, v)) return false;
    out.push_back(v);
    return true;
  }
  if (!PyTuple_Check(o) && !PyList_Check(o)) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!exact_int(items[i], v)) return false;
    out.push_back(v);
  }
  return true;
}

bool needs_grad(const Tensor& x, const std::optional<Tensor>& w, const std::optional<Tensor>& b) {
  return torch::autograd::GradMode::is_enabled() &&
         (x.requires_grad() || (w && w->requires_grad()) || (b && b->requires_grad()));
}

// eps as the double torch's parser makes of it: a float, or an int it holds exactly (an eps of 0); anything else
// (numpy scalars, bools, tensors) returns false and takes the Python path.
bool parse_eps(py::handle h, double& e) {
  PyObject* o = h.ptr();
  if (PyFloat_CheckExact(o)) {
    e = PyFloat_AS_DOUBLE(o);
    return true;
  }
  long long v;
  if (!exact_int(o, v) || v > (1LL << 53) || v < -(1LL << 53)) return false;  // beyond 2^53 a double rounds it
  e = static_cast<double>(v);
  return true;
}

// The key, or false where this call cannot have one (then Python decides, and does not remember).
bool make_key(const Tensor& x, py::handle ns, const std::optional<Tensor>& w, const std::optional<Tensor>& b,
              py::handle eps, bool grad, std::vector<int64_t>& k, double& e) {
  if (!parse_eps(eps, e)) return false;
  k.reserve(32);
  size_t at = k.size();
  k.push_back(0);  // normalized_shape's length, filled in below
  if (!parse_shape(ns, k)) return false;
  k[at] = static_cast<int64_t>(k.size() - at - 1);
  int64_t bits;
  std::memcpy(&bits, &e, sizeof bits);
  k.push_back(bits);
  k.push_back(grad);
  return put_inputs(k, x, w ? &*w : nullptr, b ? &*b : nullptr);
}

// The remembered answer for this call, run; None where there is none (Python then decides). The work runs with
// the GIL released, as torch's own bindings run at::layer_norm, so that threads calling the drop-in overlap; a
// TORCH_WARN on the way reaches Python's warnings module, as it does from torch's bindings.
py::object call(const Tensor& x, py::handle ns, const std::optional<Tensor>& w, const std::optional<Tensor>& b,
                py::handle eps) {
  bool grad = needs_grad(x, w, b);
  std::vector<int64_t> key;
  double e;
  if (!make_key(x, ns, w, b, eps, grad, key, e)) return py::none();
  std::optional<Remembered> kept = lookup(remembered, key);
  if (!kept) return py::none();
  const Remembered& r = *kept;
  Tensor y;
  bool refused = false;
  {
    torch::PyWarningHandler warnings;
    try {
      py::gil_scoped_release nogil;
      if (r.decision == kOurs) {
        y = grad ? train(r.plan, x, w, b)
                 : std::get<0>(run_forward(*r.plan, x, value_or_undefined(w), value_or_undefined(b), false));
      } else {
        std::vector<int64_t> shape(key.begin() + 1, key.begin() + 1 + key[0]);
        try {
          y = at::layer_norm(x, shape, w, b, e);
        } catch (const c10::Error&) {
          refused = true;  // torch refuses this input: Python's path calls torch, which raises its own error
        }
      }
    } catch (...) {
      warnings.set_in_exception();  // the error wins over buffered warnings, as in torch's own bindings
      throw;
    }
  }
  if (refused) return py::none();
  return py::cast(std::move(y));
}

void remember(const Tensor& x, py::handle ns, const std::optional<Tensor>& w, const std::optional<Tensor>& b,
              py::handle eps, bool grad, int decision, std::optional<c10::intrusive_ptr<LayerNormPlan>> plan) {
  TORCH_CHECK(decision == kTorch || (decision == kOurs && plan), "decision ", decision, " needs its plan");
  std::vector<int64_t> key;
  double e;
  if (!make_key(x, ns, w, b, eps, grad, key, e)) return;
  Remembered r;
  r.decision = decision;
  if (plan) r.plan = *plan;
  keep(remembered, std::move(key), std::move(r));
}

// --- C++ kernels at a dispatch key: labkit.enable()'s for aten, and the registered ops' ------------------------------
// Two registrations share one mechanism (`Served`): kernels at a backend dispatch key, each looking its call's
// signature up in a map of its own; on a miss, Python plans it (with the GIL, labkit.ops.dropin.plan
// .host_forward_plan / host_backward_plan) and the answer is kept where Python says it may be (planned in the
// default context, not under graph capture).
//
// labkit.enable(): kernels for aten::native_layer_norm and aten::native_layer_norm_backward in front of torch's
// (CUDA; CPU for the tests), so that F.layer_norm, nn.LayerNorm, autocast, vmap and torch's own autograd node carry
// our kernels with no model change. Where the plan is torch's, or a call is one our programs may not take, torch's
// own kernel runs (torch_forward / torch_backward, directly: we are the dispatcher's kernel for these ops).
// Dropping the registration (disable) brings torch's kernels back.
//
// The registered ops labkit::layer_norm and labkit::layer_norm_backward (labkit.ops.dropin.op; what torch.compile's
// graphs, modes and subclasses call): their CUDA kernels, registered when the extension loads, in front of the
// Python implementations (which stay the CPU's, and every device's where the extension cannot build). A compiled
// graph's call then reaches our launches with no Python. Where Python's runner serves a plan (kPython), its
// implementation is called.

struct Served {
  std::atomic<bool> on{false};
  // set and reset by enable_aten / serve_ops and unserve, with the GIL held: one per dispatch key registered at
  std::vector<std::unique_ptr<torch::Library>> libraries;
  // (x, normalized_shape, weight, bias[, eps]) -> (LayerNormPlan | None, keep, python runner serves)
  py::object plan_forward, plan_backward;
  py::object python_forward, python_backward;  // the ops' Python implementations (None for aten's)
  Decisions forward, backward;  // under remembered_lock
};

// One state each for the process, never freed: a kernel call in flight on another thread may still hold references
// into it when disable() runs, and at exit the dispatcher and Python may be gone before it would be destroyed.
Served& aten() {
  static Served* state = new Served();
  return *state;
}

Served& ops() {
  static Served* state = new Served();
  return *state;
}

Tensor defined_or_empty(const std::optional<Tensor>& t) {
  return t.has_value() && t->defined() ? *t : Tensor();
}

py::object tensor_or_none(const Tensor& t) {
  return t.defined() ? py::cast(t) : py::none();
}

// What torch's generated CUDA wrapper checks before its kernel runs, which calling the kernel directly would skip:
// every tensor argument on one device (a weight left on the CPU is torch's RuntimeError, not a launch on a host
// pointer). Its own message, naming the method as its wrapper does (wrapper_CUDA__<op>).
void check_devices(std::initializer_list<std::pair<const Tensor*, const char*>> args, const char* op) {
  std::optional<c10::Device> common;
  for (const auto& [t, name] : args)
    if (t->defined()) c10::impl::check_and_update_common_device(common, *t, op, name);
}

// The key of a served call: normalized_shape, eps (the forward's; the backward has none), and x, weight, bias as
// put_tensor describes them. False where a tensor is not one our plans describe.
bool served_key(const Tensor& x, at::IntArrayRef ns, const Tensor& w, const Tensor& b, const double* eps,
                std::vector<int64_t>& k) {
  k.reserve(32);
  k.push_back(static_cast<int64_t>(ns.size()));
  k.insert(k.end(), ns.begin(), ns.end());
  int64_t bits = 0;
  if (eps) std::memcpy(&bits, eps, sizeof bits);
  k.push_back(bits);
  return put_inputs(k, x, w.defined() ? &w : nullptr, b.defined() ? &b : nullptr);
}

// The plan of a served call, forward's or backward's: looked up by key in that direction's map, asked of Python on
// a miss and kept where Python says so. kTorch where the registration is off or the call has no key.
Remembered served_plan(Served& state, bool forward, const Tensor& x, at::IntArrayRef ns, const Tensor& w,
                       const Tensor& b, const double* eps) {
  std::vector<int64_t> key;
  if (!state.on.load() || !served_key(x, ns, w, b, eps, key)) return Remembered{};
  Decisions& plans = forward ? state.forward : state.backward;
  if (std::optional<Remembered> kept = lookup(plans, key)) return *kept;
  Remembered r;
  bool kept_by_python = false;
  {
    py::gil_scoped_acquire gil;
    py::object planner = forward ? state.plan_forward : state.plan_backward;  // a reference of our own
    if (!planner || planner.is_none() || !state.on.load()) return Remembered{};
    std::vector<int64_t> shape(ns.begin(), ns.end());
    py::tuple answer = forward ? planner(x, shape, tensor_or_none(w), tensor_or_none(b), *eps)
                               : planner(x, shape, tensor_or_none(w), tensor_or_none(b));
    if (!answer[0].is_none()) {
      r.decision = kOurs;
      r.plan = answer[0].cast<c10::intrusive_ptr<LayerNormPlan>>();
    } else if (answer[2].cast<bool>()) {
      r.decision = kPython;
    }
    kept_by_python = answer[1].cast<bool>() && r.decision != kPython;
  }
  if (kept_by_python) keep(plans, std::move(key), r);
  return r;
}

std::tuple<Tensor, Tensor, Tensor> aten_forward(const Tensor& x, c10::SymIntArrayRef ns_sym,
                                                const std::optional<Tensor>& w_opt,
                                                const std::optional<Tensor>& b_opt, double eps) {
  at::IntArrayRef ns = C10_AS_INTARRAYREF_SLOW(ns_sym);
  const Tensor w = defined_or_empty(w_opt), b = defined_or_empty(b_opt);
  check_devices({{&x, "input"}, {&w, "weight"}, {&b, "bias"}}, "wrapper_CUDA__native_layer_norm");
  ServingAten serving;
  c10::DeviceGuard guard(x.device());
  Remembered r = served_plan(aten(), true, x, ns, w, b, &eps);
  if (r.decision != kOurs || !r.plan->forward) return torch_forward(x, ns, w, b, eps);
  return run_forward(*r.plan, x, w, b, true);
}

std::tuple<Tensor, Tensor, Tensor> aten_backward(const Tensor& dy, const Tensor& x, c10::SymIntArrayRef ns_sym,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const std::optional<Tensor>& w_opt,
                                                 const std::optional<Tensor>& b_opt, std::array<bool, 3> mask) {
  at::IntArrayRef ns = C10_AS_INTARRAYREF_SLOW(ns_sym);
  const Tensor w = defined_or_empty(w_opt), b = defined_or_empty(b_opt);
  check_devices({{&dy, "grad_out"}, {&x, "input"}, {&mean, "mean"}, {&rstd, "rstd"}, {&w, "weight"}, {&b, "bias"}},
                "wrapper_CUDA__native_layer_norm_backward");
  ServingAten serving;
  c10::DeviceGuard guard(x.device());
  Remembered r = served_plan(aten(), false, x, ns, w, b, nullptr);
  if (r.decision != kOurs || !r.plan->backward) return torch_backward(dy, x, ns, mean, rstd, w, b, mask);
  return run_backward(*r.plan, dy, x, SavedStats{mean, rstd, Tensor()}, w, b, mask);
}

std::tuple<Tensor, Tensor, Tensor> three_tensors(const py::object& result) {
  py::tuple t = result;
  return {t[0].cast<Tensor>(), t[1].cast<Tensor>(), t[2].cast<Tensor>()};
}

// labkit::layer_norm: what its Python implementation returns (y, mean, rstd), for the same plan.
std::tuple<Tensor, Tensor, Tensor> op_forward(const Tensor& x, c10::SymIntArrayRef ns_sym,
                                              const std::optional<Tensor>& w_opt,
                                              const std::optional<Tensor>& b_opt, double eps) {
  at::IntArrayRef ns = C10_AS_INTARRAYREF_SLOW(ns_sym);
  const Tensor w = defined_or_empty(w_opt), b = defined_or_empty(b_opt);
  c10::DeviceGuard guard(x.device());
  Remembered r = served_plan(ops(), true, x, ns, w, b, &eps);
  if (r.decision == kPython) {
    py::gil_scoped_acquire gil;
    return three_tensors(ops().python_forward(x, std::vector<int64_t>(ns.begin(), ns.end()), tensor_or_none(w),
                                              tensor_or_none(b), eps));
  }
  if (r.decision != kOurs || !r.plan->forward) return at::native_layer_norm(x, ns, w, b, eps);
  return run_forward(*r.plan, x, w, b, true);
}

// labkit::layer_norm_backward: (grad_x, grad_weight, grad_bias), an output not asked for (or without its parameter)
// an empty tensor, as its Python implementation returns them.
std::tuple<Tensor, Tensor, Tensor> op_backward(const Tensor& dy, const Tensor& x, c10::SymIntArrayRef ns_sym,
                                               const Tensor& mean, const Tensor& rstd,
                                               const std::optional<Tensor>& w_opt,
                                               const std::optional<Tensor>& b_opt, c10::List<bool> mask_list) {
  at::IntArrayRef ns = C10_AS_INTARRAYREF_SLOW(ns_sym);
  TORCH_CHECK(mask_list.size() == 3, "output_mask needs 3 entries, got ", mask_list.size());
  const std::array<bool, 3> mask = {mask_list.get(0), mask_list.get(1), mask_list.get(2)};
  const Tensor w = defined_or_empty(w_opt), b = defined_or_empty(b_opt);
  c10::DeviceGuard guard(x.device());
  Remembered r = served_plan(ops(), false, x, ns, w, b, nullptr);
  if (r.decision == kPython) {
    py::gil_scoped_acquire gil;
    return three_tensors(ops().python_backward(dy, x, std::vector<int64_t>(ns.begin(), ns.end()), mean, rstd,
                                               tensor_or_none(w), tensor_or_none(b),
                                               std::vector<bool>(mask.begin(), mask.end())));
  }
  auto [gx, gw, gb] = r.decision == kOurs && r.plan->backward
                          ? run_backward(*r.plan, dy, x, SavedStats{mean, rstd, Tensor()}, w, b, mask)
                          : at::native_layer_norm_backward(dy, x, ns, mean, rstd, w, b, mask);
  auto empty = [&](const Tensor& t) { return t.defined() ? t : at::empty({0}, x.options()); };
  return {empty(gx), empty(gw), empty(gb)};
}

// The registered ops' autograd in C++, what op.py's register_autograd does in Python (which stays the fallback where
// the extension does not serve): a call that records autograd gets a node saving x, mean, rstd, weight and bias whose
// backward calls labkit::layer_norm_backward (create_graph: recomputed through torch's layer_norm, as the eager
// node does); every other call goes straight below autograd. A compiled graph calls the ops with autograd off, so its
// calls pass no Python at all. The backward op has no derivative: torch's not-implemented fallback, in C++.

using OpForwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, c10::SymIntArrayRef,
                                                       const std::optional<Tensor>&, const std::optional<Tensor>&,
                                                       double);
using OpBackwardFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, c10::SymIntArrayRef,
                                                        const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                                        const std::optional<Tensor>&, c10::List<bool>);

const c10::TypedOperatorHandle<OpForwardFn>& forward_op() {
  static const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("labkit::layer_norm", "").typed<OpForwardFn>();
  return handle;
}

const c10::TypedOperatorHandle<OpBackwardFn>& backward_op() {
  static const auto handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("labkit::layer_norm_backward", "").typed<OpBackwardFn>();
  return handle;
}

std::optional<Tensor> optional_of(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

// As LayerNormFunction's inputs: every input a defined tensor, an absent weight or bias an empty placeholder that
// requires no grad, `affine` saying which are real (bit 0 weight, bit 1 bias).
struct OpFunction : torch::autograd::Function<OpFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                                const Tensor& w_in, const Tensor& b_in, int64_t affine,
                                                std::vector<c10::SymInt> ns, double eps) {
    Tensor w = affine & 1 ? w_in : Tensor(), b = affine & 2 ? b_in : Tensor();
    auto [y, mean, rstd] = forward_op().call(x, ns, optional_of(w), optional_of(b), eps);  // autograd is off here
    ctx->save_for_backward({x, mean, rstd, w, b});
    ctx->saved_data["ns"] = c10::IValue(c10::SymIntArrayRef(ns));
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["affine"] = affine;
    ctx->mark_non_differentiable({mean, rstd});
    return {y, mean, rstd};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t affine = ctx->saved_data["affine"].toInt();
    const bool nx = ctx->needs_input_grad(0), nw = (affine & 1) && ctx->needs_input_grad(1),
               nb = (affine & 2) && ctx->needs_input_grad(2);
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &mean = saved[1], &rstd = saved[2], &w = saved[3], &b = saved[4];
    const Tensor& gy = grads[0];
    torch::autograd::variable_list out(6);
    if (!gy.defined()) return out;
    const std::vector<c10::SymInt> ns = ctx->saved_data["ns"].toSymIntVector();
    if (torch::autograd::GradMode::is_enabled()) {  // create_graph=True: as LayerNormFunction::backward
      torch::autograd::variable_list wanted;
      if (nx) wanted.push_back(x);
      if (nw) wanted.push_back(w);
      if (nb) wanted.push_back(b);
      Tensor y = at::layer_norm_symint(x, ns, optional_of(w), optional_of(b), ctx->saved_data["eps"].toDouble());
      auto g = torch::autograd::grad({y}, wanted, {gy}, /*retain_graph=*/true, /*create_graph=*/true);
      size_t i = 0;
      if (nx) out[0] = g[i++];
      if (nw) out[1] = g[i++];
      if (nb) out[2] = g[i++];
      return out;
    }
    auto [gx, gw, gb] =
        backward_op().call(gy, x, ns, mean, rstd, optional_of(w), optional_of(b), c10::List<bool>({nx, nw, nb}));
    if (nx) out[0] = gx;
    if (nw) out[1] = gw;
    if (nb) out[2] = gb;
    return out;
  }
};

std::tuple<Tensor, Tensor, Tensor> op_forward_autograd(c10::DispatchKeySet ks, const Tensor& x,
                                                       c10::SymIntArrayRef ns, const std::optional<Tensor>& w_opt,
                                                       const std::optional<Tensor>& b_opt, double eps) {
  const Tensor w = defined_or_empty(w_opt), b = defined_or_empty(b_opt);
  const bool record = torch::autograd::GradMode::is_enabled() &&
                      (x.requires_grad() || (w.defined() && w.requires_grad()) || (b.defined() && b.requires_grad()));
  if (!record) {
    at::AutoDispatchBelowADInplaceOrView below;
    return forward_op().redispatch(ks & c10::after_autograd_keyset, x, ns, w_opt, b_opt, eps);
  }
  Tensor placeholder = at::empty({0}, x.options());
  auto out = OpFunction::apply(x, w.defined() ? w : placeholder, b.defined() ? b : placeholder,
                               static_cast<int64_t>(w.defined()) | static_cast<int64_t>(b.defined()) << 1,
                               std::vector<c10::SymInt>(ns.begin(), ns.end()), eps);
  return {out[0], out[1], out[2]};
}

// A served registration's answers dropped (labkit.ops.dropin.plan.clear, enable and disable).
void forget_served(Served& state) {
  drop_all(state.forward);
  drop_all(state.backward);
}

// Every remembered answer dropped (labkit.ops.dropin.plan.clear): the eager fast path's and both registrations'.
void forget() {
  drop_all(remembered);
  forget_served(aten());
  forget_served(ops());
}

c10::DispatchKey backend_key(const std::string& key) {
  if (key == "CUDA") {
#ifndef LABKIT_TORCH_CUDA
    TORCH_CHECK(false, "this torch has no CUDA kernels to stand in front of (torch.version.cuda is None)");
#endif
    return c10::DispatchKey::CUDA;
  }
  if (key == "CPU") return c10::DispatchKey::CPU;  // the tests' key: the mechanism without a GPU
  TORCH_CHECK(false, "dispatch key must be CUDA or CPU, got ", key);
}

void unserve(Served& state) {
  if (!state.on.exchange(false)) return;
  state.libraries.clear();  // the kernels registered before serve serve again from here on
  forget_served(state);
}

void enable_aten(py::object plan_forward, py::object plan_backward, const std::string& key) {
  Served& state = aten();
  TORCH_CHECK(!state.on.load(), "labkit's aten kernels are registered already");
  c10::DispatchKey k = backend_key(key);
  torch::PyWarningHandler warnings;  // the dispatcher's "Overriding a previously registered kernel" reaches Python
  forget_served(state);
  state.plan_forward = std::move(plan_forward);
  state.plan_backward = std::move(plan_backward);
  auto& lib = state.libraries.emplace_back(
      std::make_unique<torch::Library>(torch::Library::IMPL, "aten", k, __FILE__, __LINE__));
  lib->impl("native_layer_norm", TORCH_FN(aten_forward));
  lib->impl("native_layer_norm_backward", TORCH_FN(aten_backward));
  state.on.store(true);
}

void serve_ops(py::object plan_forward, py::object plan_backward, py::object python_forward,
               py::object python_backward, const std::string& key) {
  Served& state = ops();
  TORCH_CHECK(!state.on.load(), "labkit's op kernels are registered already");
  c10::DispatchKey k = backend_key(key);
  forget_served(state);
  state.plan_forward = std::move(plan_forward);
  state.plan_backward = std::move(plan_backward);
  state.python_forward = std::move(python_forward);
  state.python_backward = std::move(python_backward);
  auto& kernels = state.libraries.emplace_back(
      std::make_unique<torch::Library>(torch::Library::IMPL, "labkit", k, __FILE__, __LINE__));
  kernels->impl("layer_norm", TORCH_FN(op_forward));
  kernels->impl("layer_norm_backward", TORCH_FN(op_backward));
  // and their autograd, at the same backend's autograd key
  const c10::DispatchKey autograd = c10::getAutogradKeyFromBackend(c10::toBackendComponent(k));
  auto& nodes = state.libraries.emplace_back(
      std::make_unique<torch::Library>(torch::Library::IMPL, "labkit", autograd, __FILE__, __LINE__));
  nodes->impl("layer_norm", TORCH_FN(op_forward_autograd));
  nodes->impl("layer_norm_backward", torch::autograd::autogradNotImplementedFallback());
  state.on.store(true);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<ProgramHolder, c10::intrusive_ptr<ProgramHolder>>(m, "Program")
      .def(py::init(&make_program), py::arg("slots"), py::arg("steps"))
      .def_property_readonly("steps", [](const ProgramHolder& h) { return h.program.steps.size(); })
      .def("first_use",
           [](const ProgramHolder& h, const std::vector<int>& slots) { return h.program.first_use(slots); });

  py::class_<LayerNormPlan, c10::intrusive_ptr<LayerNormPlan>>(m, "LayerNormPlan")
      .def(py::init([](std::optional<c10::intrusive_ptr<ProgramHolder>> forward,
                       std::optional<c10::intrusive_ptr<ProgramHolder>> backward, std::vector<int64_t> ns,
                       double eps, std::vector<int64_t> stat_shape, int64_t rows, int64_t n, int64_t forward_scratch,
                       int64_t backward_scratch, int64_t partial_groups, std::optional<Tensor> ones,
                       std::optional<Tensor> neg_zeros, int64_t align, int64_t backward_align, bool autocast) {
             // the slots run_forward / run_backward hand over (labkit.core.program FORWARD_SLOTS, BACKWARD_SLOTS)
             TORCH_CHECK(!forward || (*forward)->program.slots == kForwardSlots, "a forward program has ",
                         kForwardSlots, " slots, got ", (*forward)->program.slots);
             TORCH_CHECK(!backward || (*backward)->program.slots == kBackwardSlots, "a backward program has ",
                         kBackwardSlots, " slots, got ", (*backward)->program.slots);
             auto p = c10::make_intrusive<LayerNormPlan>();
             if (forward) p->forward = *forward;
             if (backward) p->backward = *backward;
             p->normalized_shape = std::move(ns);
             p->stat_shape = std::move(stat_shape);
             p->eps = eps;
             p->rows = rows, p->n = n;
             p->forward_scratch = forward_scratch, p->backward_scratch = backward_scratch;
             p->partial_groups = partial_groups;
             p->ones = value_or_undefined(ones);
             p->neg_zeros = value_or_undefined(neg_zeros);
             TORCH_CHECK(align == 8 || align == 16, "align must be 8 or 16 bytes, got ", align);
             p->align = align;
             TORCH_CHECK(backward_align == 8 || backward_align == 16, "backward_align must be 8 or 16 bytes, got ",
                         backward_align);
             p->backward_align = backward_align;
             p->autocast = autocast;
             if (p->forward) p->forward_split = p->forward->program.first_use({kForwardY});
             if (p->backward)
               p->backward_split = p->backward->program.first_use({kBackwardDx, kBackwardDweight, kBackwardDbias});
             return p;
           }),
           py::arg("forward"), py::arg("backward"), py::arg("normalized_shape"), py::arg("eps"),
           py::arg("stat_shape"), py::arg("rows"), py::arg("n"), py::arg("forward_scratch"),
           py::arg("backward_scratch"), py::arg("partial_groups"), py::arg("ones"), py::arg("neg_zeros"),
           py::arg("align") = 16, py::arg("backward_align") = 16, py::arg("autocast") = false)
      .def_property_readonly("has_forward", [](const LayerNormPlan& p) { return bool(p.forward); })
      .def_property_readonly("has_backward", [](const LayerNormPlan& p) { return bool(p.backward); })
      .def_property_readonly("forward_split", [](const LayerNormPlan& p) { return p.forward_split; })
      .def_property_readonly("backward_split", [](const LayerNormPlan& p) { return p.backward_split; });

  m.def("forward", [](const LayerNormPlan& p, const Tensor& x, std::optional<Tensor> w, std::optional<Tensor> b) {
    return std::get<0>(run_forward(p, x, value_or_undefined(w), value_or_undefined(b), false));
  });
  m.def("forward_stats",
        [](const LayerNormPlan& p, const Tensor& x, std::optional<Tensor> w, std::optional<Tensor> b) {
          return run_forward(p, x, value_or_undefined(w), value_or_undefined(b), true);
        });
  m.def("train", &train);
  m.def("call", &call, py::arg("x"), py::arg("normalized_shape"), py::arg("weight"), py::arg("bias"),
        py::arg("eps"));
  m.def("remember", &remember, py::arg("x"), py::arg("normalized_shape"), py::arg("weight"), py::arg("bias"),
        py::arg("eps"), py::arg("needs_grad"), py::arg("decision"), py::arg("plan"));
  m.def("forget", &forget);
  m.def("remembered", []() {
    std::lock_guard<std::mutex> hold(remembered_lock);
    return remembered.size();
  });
  m.attr("TORCH") = static_cast<int>(kTorch);
  m.attr("OURS") = static_cast<int>(kOurs);
  m.def("backward", [](const LayerNormPlan& p, const Tensor& dy, const Tensor& x, const Tensor& mean,
                       const Tensor& rstd, std::optional<Tensor> w, std::optional<Tensor> b, std::vector<bool> mask) {
    TORCH_CHECK(mask.size() == 3, "output_mask needs 3 entries");
    return run_backward(p, dy, x, SavedStats{mean, rstd, Tensor()}, value_or_undefined(w), value_or_undefined(b),
                        {mask[0], mask[1], mask[2]});
  });
  m.def("run", [](const ProgramHolder& h, int device, std::vector<uint64_t> ptrs, float eps) {
    TORCH_CHECK(static_cast<int>(ptrs.size()) == h.program.slots, "one address per slot");
    c10::Device dev(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    c10::DeviceGuard guard(dev);  // torch's current stream of that device, as the entry points above
    run(h, dev, ptrs.data(), eps);
  });
  m.def("current_stream", [](int device) {
    return reinterpret_cast<uint64_t>(
        current_stream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device))));
  });
  m.def("enable_aten", &enable_aten, py::arg("plan_forward"), py::arg("plan_backward"), py::arg("key"));
  m.def("disable_aten", []() { unserve(aten()); });
  m.def("aten_enabled", []() { return aten().on.load(); });
  m.def("aten_planned", []() {
    std::lock_guard<std::mutex> hold(remembered_lock);
    return std::make_pair(aten().forward.size(), aten().backward.size());
  });
  m.def("serve_ops", &serve_ops, py::arg("plan_forward"), py::arg("plan_backward"), py::arg("python_forward"),
        py::arg("python_backward"), py::arg("key"));
  m.def("unserve_ops", []() { unserve(ops()); });
  m.def("ops_served", []() { return ops().on.load(); });
  m.def("ops_planned", []() {
    std::lock_guard<std::mutex> hold(remembered_lock);
    return std::make_pair(ops().forward.size(), ops().backward.size());
  });
  m.def("driver_error", []() { return labkit_host::Driver::get().error; });
}

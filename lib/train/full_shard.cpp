#include "train/full_shard.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "models/accumulate_grad_hook.h"
#include "models/param_storage.h"
#include "train/adamw.h"

namespace omnibal::train {

/// One unit's flat parameter buffer and this rank's shard of it (see the file comment).
struct FullShard::Group {
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  std::vector<int64_t> offsets;  ///< of each parameter in the flat buffer
  int64_t numel = 0, padded = 0, per_rank = 0;
  bool trainable = false;
  torch::Tensor full;  ///< [padded] parameters' dtype; memory only while held
  size_t full_nbytes = 0;
  torch::Tensor shard;                              ///< [per_rank] parameters' dtype
  torch::Tensor master, exp_avg, exp_avg_sq, grad;  ///< [per_rank] fp32 (trainable only)
  int held = 0;                                     ///< gathers not yet released
  /// A prefetch launched the gather of `full` (non-blocking) and holds it for the next gather().
  bool prefetched = false;
  comm::Request pending;  ///< the prefetch's all-gather
  int reached = 0;        ///< parameters whose gradient of this backward arrived
  /// This rank's part of parameter `param`: [local, local + length) of the shard tensors.
  struct Segment {
    size_t param = 0;
    int64_t local = 0, length = 0;
  };
  std::vector<Segment> segments;  ///< trainable groups: every parameter part this rank holds

  /// The parts of the parameters inside DP rank `rank`'s shard.
  std::vector<Segment> segments_of(int rank) const {
    std::vector<Segment> out;
    const int64_t lo = rank * per_rank;
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t a = std::max(offsets[i], lo);
      const int64_t b = std::min(offsets[i] + params[i].numel(), lo + per_rank);
      if (b > a) out.push_back({i, a - lo, b - a});
    }
    return out;
  }
};

FullShard::FullShard(OptimizerOptions options, comm::Communicator* dp, DpShard shard)
    : options_(std::move(options)), dp_(dp), shard_(shard) {
  OMNIBAL_CHECK(dp == nullptr || (dp->size() == shard.size && dp->rank() == shard.rank),
                "FullShard: the DP group disagrees with the shard (rank ", shard.rank, " of ",
                shard.size, ")");
}

FullShard::FullShard(const std::vector<models::UnitPtr>& units, OptimizerOptions options,
                     comm::Communicator* dp, DpShard shard)
    : FullShard(std::move(options), dp, shard) {
  for (const auto& unit : units) add_unit(unit);
}

void FullShard::add_unit(const models::UnitPtr& unit) {
  const torch::Dtype dtype = precision_dtype(options_.precision);
  torch::NoGradGuard no_grad;
  position_[unit.get()] = units_.size();
  units_.push_back(unit);
  auto g = std::make_unique<Group>();
  std::set<Group*> uses;
  int trainable = 0;
  for (const auto& np : unit->named_parameters()) {
    const torch::Tensor& p = np.value();
    if (auto it = owner_.find(p.unsafeGetTensorImpl()); it != owner_.end()) {
      uses.insert(it->second);
      continue;
    }
    OMNIBAL_CHECK(p.scalar_type() == dtype, "FullShard: parameter ", unit->unit_name(), ".",
                  np.key(), " is ", comm::dtype_name(p.scalar_type()), ", expected ",
                  comm::dtype_name(dtype));
    owner_[p.unsafeGetTensorImpl()] = g.get();
    g->names.push_back(unit->unit_name() + "." + np.key());
    g->params.push_back(p);
    g->offsets.push_back(g->numel);
    g->numel += p.numel();
    trainable += p.requires_grad() ? 1 : 0;
  }
  for (const auto& p : unit->borrowed_parameters()) {
    const auto it = owner_.find(p.unsafeGetTensorImpl());
    OMNIBAL_CHECK(it != owner_.end(), "FullShard: unit ", unit->unit_name(),
                  " reads a parameter of a unit outside this stage (a tied head split over "
                  "stages: train.shard full needs parallel.pp 1)");
    uses.insert(it->second);
  }
  OMNIBAL_CHECK(trainable == 0 || trainable == static_cast<int>(g->params.size()),
                "FullShard: unit ", unit->unit_name(),
                " mixes trainable and frozen parameters (train.freeze freezes whole units)");
  auto& mine = unit_groups_[unit.get()];
  if (!g->params.empty()) {
    g->trainable = trainable > 0;
    shard_group(*g);
    mine.push_back(g.get());
    groups_.push_back(std::move(g));
  }
  mine.insert(mine.end(), uses.begin(), uses.end());
}

void FullShard::shard_group(Group& g) {
  const torch::Dtype dtype = precision_dtype(options_.precision);
  const int64_t dpn = shard_.size;
  g.padded = (g.numel + dpn - 1) / dpn * dpn;
  g.per_rank = g.padded / dpn;
  const torch::Device device = g.params.front().device();
  g.full = torch::zeros({g.padded}, torch::dtype(dtype).device(device));
  g.full_nbytes = g.full.storage().nbytes();
  for (size_t i = 0; i < g.params.size(); ++i) {
    torch::Tensor& p = g.params[i];
    torch::Tensor view = g.full.narrow(0, g.offsets[i], p.numel());
    view.copy_(p.detach().reshape(-1));
    p.set_data(view.view(p.sizes()));
  }
  g.shard = g.full.narrow(0, shard_.rank * g.per_rank, g.per_rank).clone();
  if (g.trainable) {
    g.segments = g.segments_of(shard_.rank);
    g.master = options_.precision == Precision::kFp32 ? g.shard : g.shard.to(torch::kFloat32);
    g.exp_avg = torch::zeros({g.per_rank}, torch::dtype(torch::kFloat32).device(device));
    g.exp_avg_sq = torch::zeros_like(g.exp_avg);
    g.grad = torch::zeros_like(g.exp_avg);
    for (const auto& p : g.params)
      models::compat::set_post_accumulate_grad_hook(
          p,
          [this, gptr = &g](const torch::Tensor&) {
            if (++gptr->reached == static_cast<int>(gptr->params.size())) reduce_scatter(*gptr);
          },
          this);
  }
  models::free_storage(g.full);
}

void FullShard::store_gathered(models::PipelineUnit& unit) {
  torch::NoGradGuard no_grad;
  for (Group* g : groups_of(unit)) {
    OMNIBAL_CHECK(g->held > 0, "FullShard::store_gathered: ", unit.unit_name(), " is not gathered");
    g->shard.copy_(g->full.narrow(0, shard_.rank * g->per_rank, g->per_rank));
    if (g->trainable && options_.precision != Precision::kFp32) g->master.copy_(g->shard);
  }
}

FullShard::~FullShard() {
  for (auto& u : units_)
    if (u->param_hooks() == this) u->set_param_hooks(nullptr);
  for (auto& g : groups_)
    if (g->trainable)
      for (const auto& p : g->params) models::compat::clear_post_accumulate_grad_hook(p, this);
}

void FullShard::attach() {
  for (auto& u : units_) u->set_param_hooks(this);
}

const std::vector<FullShard::Group*>& FullShard::groups_of(const models::PipelineUnit& unit) const {
  const auto it = unit_groups_.find(&unit);
  OMNIBAL_CHECK(it != unit_groups_.end(), "FullShard: unit ", unit.unit_name(), " is not sharded");
  return it->second;
}

void FullShard::gather(Group& g) {
  if (g.prefetched) {  // the prefetch's hold becomes this gather's
    g.prefetched = false;
    g.pending.wait();
    return;
  }
  if (g.held++ > 0) return;
  torch::NoGradGuard no_grad;
  models::restore_storage(g.full, g.full_nbytes);
  count_gathered(static_cast<int64_t>(g.full_nbytes));
  torch::Tensor out = models::unversioned_alias(g.full);
  if (dp_ != nullptr && shard_.size > 1)
    dp_->all_gather(g.shard, out, "ZeRO-3 parameter all-gather");
  else out.copy_(g.shard);
}

void FullShard::prefetch(const models::PipelineUnit* unit) {
  if (unit == nullptr || !options_.overlap || dp_ == nullptr || shard_.size == 1) return;
  torch::NoGradGuard no_grad;
  for (Group* g : groups_of(*unit)) {
    if (g->held > 0 || g->prefetched) continue;
    g->held = 1;
    g->prefetched = true;
    ++prefetches_;
    models::restore_storage(g->full, g->full_nbytes);
    count_gathered(static_cast<int64_t>(g->full_nbytes));
    g->pending =
        dp_->iall_gather(g->shard, models::unversioned_alias(g->full), "ZeRO-3 parameter prefetch");
  }
}

void FullShard::settle(Group& g) {
  if (g.prefetched) {
    g.prefetched = false;
    g.pending.wait();
  }
  while (g.held > 0) release(g);
}

void FullShard::count_gathered(int64_t bytes) {
  gathered_bytes_ += bytes;
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
}

void FullShard::release(Group& g) {
  if (g.held == 0 || --g.held > 0) return;
  models::free_storage(g.full);
  count_gathered(-static_cast<int64_t>(g.full_nbytes));
}

void FullShard::before_forward(models::PipelineUnit& unit) {
  for (Group* g : groups_of(unit)) gather(*g);
  prefetch(neighbour(unit, +1));
}

void FullShard::release_unit(models::PipelineUnit& unit) {
  for (Group* g : groups_of(unit)) release(*g);
}

void FullShard::after_forward(models::PipelineUnit& unit, const models::UnitState& in,
                              const models::UnitState& out) {
  // Gathered again for the backward: autograd's saved views need the data back. The hook sits
  // on the output every gradient of the unit passes through: the hidden state, or the head's
  // logits (the loss terms are computed from them).
  const torch::Tensor& y = out.hidden.defined() ? out.hidden : out.logits;
  if (torch::GradMode::is_enabled() && y.defined() && y.requires_grad()) {
    y.register_hook([this, u = &unit](const torch::Tensor&) {
      for (Group* g : groups_of(*u)) gather(*g);
      prefetch(neighbour(*u, -1));
    });
    // A trainable group is released by its reduce-scatter; a frozen one when the gradient of
    // the unit's input exists, i.e. the unit's backward is done (FSDP's reshard after backward).
    std::vector<Group*> frozen;
    for (Group* g : groups_of(unit))
      if (!g->trainable) frozen.push_back(g);
    if (!frozen.empty() && in.hidden.defined() && in.hidden.requires_grad())
      in.hidden.register_hook([this, frozen](const torch::Tensor&) {
        for (Group* g : frozen) release(*g);
      });
  }
  for (Group* g : groups_of(unit)) release(*g);
}

void FullShard::reduce_scatter(Group& g) {
  torch::NoGradGuard no_grad;
  const torch::Dtype wire = precision_dtype(options_.reduce_dtype);
  torch::Tensor flat = torch::zeros({g.padded}, g.grad.options().dtype(wire));
  for (size_t i = 0; i < g.params.size(); ++i) {
    torch::Tensor& p = g.params[i];
    if (p.grad().defined()) flat.narrow(0, g.offsets[i], p.numel()).copy_(p.grad().reshape(-1));
    p.mutable_grad() = torch::Tensor();
  }
  torch::Tensor mine = torch::empty({g.per_rank}, flat.options());
  if (dp_ != nullptr && shard_.size > 1)
    dp_->reduce_scatter(flat, mine, "ZeRO-3 gradient reduce-scatter");
  else mine.copy_(flat);
  g.grad.add_(mine.to(torch::kFloat32));
  g.reached = 0;
  release(g);
}

void FullShard::end_backward() {
  for (auto& g : groups_) {
    if (g->trainable && g->reached > 0) reduce_scatter(*g);  // a parameter no gradient reached
    settle(*g);
  }
}

void FullShard::zero_grad() {
  for (auto& g : groups_)
    if (g->trainable) g->grad.zero_();
}

double FullShard::grad_norm(const GradNormScope& scope) {
  torch::NoGradGuard no_grad;
  torch::Tensor acc;  // summed on the gradient's device, one copy to the host at the end
  for (auto& g : groups_)
    for (const auto& seg : g->segments) {
      if (scope.exclude.count(g->names[seg.param])) continue;
      const torch::Tensor sq =
          g->grad.narrow(0, seg.local, seg.length).to(torch::kFloat64).pow(2).sum();
      acc = acc.defined() ? acc + sq : sq;
    }
  torch::Tensor t =
      acc.defined() ? acc.reshape({1}).to(torch::kCPU) : torch::zeros({1}, torch::kFloat64);
  local_grad_sq_ = t.item<double>();
  if (dp_ != nullptr && shard_.size > 1)
    dp_->all_reduce(t, comm::ReduceOp::kSum, "ZeRO-3 gradient norm");
  for (comm::Communicator* group : scope.groups)
    group->all_reduce(t, comm::ReduceOp::kSum, "gradient norm over " + group->name());
  return std::sqrt(t.item<double>());
}

double FullShard::clip(double norm, double max_norm) {
  const double coef = clip_coefficient(norm, max_norm, "FullShard::clip");
  if (coef < 1.0)
    for (auto& g : groups_)
      if (g->trainable) g->grad.mul_(coef);
  return coef;
}

void FullShard::step(double lr) {
  torch::NoGradGuard no_grad;
  for (auto& g : groups_)  // no gather may read a shard while it changes
    if (g->prefetched) settle(*g);
  ++steps_;
  for (auto& g : groups_) {
    for (const auto& seg : g->segments) {
      const auto part = [&](const torch::Tensor& t) { return t.narrow(0, seg.local, seg.length); };
      adamw_update(part(g->master), part(g->grad), part(g->exp_avg), part(g->exp_avg_sq), lr,
                   steps_, g->params[seg.param].dim() >= 2, options_.adam);
    }
    if (g->trainable && options_.precision != Precision::kFp32) g->shard.copy_(g->master);
  }
}

namespace {

/// The state tensors of a group by name suffix: master weight (or, frozen, the value) and moments.
constexpr const char* kSuffixes[] = {"", "#exp_avg", "#exp_avg_sq"};

}  // namespace

std::vector<std::pair<const char*, torch::Tensor*>> FullShard::parts_of(Group& g) {
  if (!g.trainable) return {{"", &g.shard}};
  return {{kSuffixes[0], &g.master}, {kSuffixes[1], &g.exp_avg}, {kSuffixes[2], &g.exp_avg_sq}};
}

std::map<std::string, torch::Tensor> FullShard::state_tensors(bool keep) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> out;
  for (auto& g : groups_)
    for (const auto& [suffix, t] : parts_of(*g)) {
      torch::Tensor whole = torch::empty({g->padded}, t->options());
      if (dp_ != nullptr && shard_.size > 1)
        dp_->all_gather(t->contiguous(), whole, "ZeRO-3 state gather");
      else whole.copy_(*t);
      if (!keep) continue;
      for (size_t i = 0; i < g->params.size(); ++i)
        out[g->names[i] + suffix] = whole.narrow(0, g->offsets[i], g->params[i].numel())
                                        .view(g->params[i].sizes())
                                        .to(torch::kCPU, torch::kFloat32);
    }
  return out;
}

std::vector<std::string> FullShard::state_names() const {
  std::vector<std::string> out;
  for (const auto& g : groups_)
    for (const auto& name : g->names)
      for (const char* suffix : kSuffixes) {
        out.push_back(name + suffix);
        if (!g->trainable) break;
      }
  return out;
}

void FullShard::load_state_tensors(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  for (auto& g : groups_) {
    const int64_t lo = shard_.rank * g->per_rank;
    for (const auto& [suffix, t] : parts_of(*g)) {
      torch::Tensor whole = torch::zeros({g->padded}, t->options());
      for (size_t i = 0; i < g->params.size(); ++i) {
        const auto it = state.find(g->names[i] + suffix);
        OMNIBAL_CHECK(it != state.end(), "FullShard: no state '", g->names[i] + suffix, "'");
        OMNIBAL_CHECK(it->second.numel() == g->params[i].numel(), "FullShard: '",
                      g->names[i] + suffix, "' has ", it->second.numel(), " elements, expected ",
                      g->params[i].numel());
        whole.narrow(0, g->offsets[i], g->params[i].numel()).copy_(it->second.reshape(-1));
      }
      t->copy_(whole.narrow(0, lo, g->per_rank));
    }
    if (g->trainable && options_.precision != Precision::kFp32) g->shard.copy_(g->master);
  }
}

void FullShard::gather_all() {
  for (auto& g : groups_) gather(*g);
}

void FullShard::release_all() {
  for (auto& g : groups_) release(*g);
}

const models::PipelineUnit* FullShard::neighbour(const models::PipelineUnit& unit, int step) const {
  const auto it = position_.find(&unit);
  if (it == position_.end()) return nullptr;
  const int64_t j = static_cast<int64_t>(it->second) + step;
  return j >= 0 && j < static_cast<int64_t>(units_.size()) ? units_[j].get() : nullptr;
}

ShardBytes FullShard::resident_bytes() const {
  ShardBytes b;
  for (const auto& g : groups_) {
    b.params += static_cast<int64_t>(g->shard.nbytes() + g->full.storage().nbytes());
    if (!g->trainable) continue;
    b.grads += static_cast<int64_t>(g->grad.nbytes());
    b.optimizer += static_cast<int64_t>(g->exp_avg.nbytes() + g->exp_avg_sq.nbytes());
    if (options_.precision != Precision::kFp32)
      b.optimizer += static_cast<int64_t>(g->master.nbytes());
  }
  return b;
}

}  // namespace omnibal::train

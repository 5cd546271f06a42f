#include "train/distributed_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "models/accumulate_grad_hook.h"

namespace omnibal::train {
namespace {

/// Adds `param`'s bf16 .grad into `main` (its fp32 main gradient, flat) and frees it; nothing
/// when the parameter has no gradient. The one fold of both paths: the post-accumulate-grad
/// hook and accumulate_grads().
void fold_grad(const torch::Tensor& main, const torch::Tensor& param) {
  torch::Tensor& g = param.mutable_grad();
  if (!g.defined()) return;
  torch::NoGradGuard no_grad;
  main.add_(g.reshape(-1));  // fp32 += bf16
  g.reset();
}

/// Steady-clock microseconds: the time base of pipeline::trace_clock_us (trace spans).
double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

torch::Dtype precision_dtype(Precision p) {
  switch (p) {
    case Precision::kFp32: return torch::kFloat32;
    case Precision::kBf16: return torch::kBFloat16;
  }
  return torch::kFloat32;
}

DistributedOptimizer::DistributedOptimizer(const NamedParams& params, OptimizerOptions options,
                                           comm::Communicator* dp, DpShard shard)
    : options_(std::move(options)), dp_(dp), shard_(shard) {
  OMNIBAL_CHECK(shard.size >= 1 && shard.rank >= 0 && shard.rank < shard.size,
                "DistributedOptimizer: DP rank ", shard.rank, " of ", shard.size);
  OMNIBAL_CHECK(dp == nullptr || (dp->size() == shard.size && dp->rank() == shard.rank),
                "DistributedOptimizer: the DP group (rank ", dp ? dp->rank() : -1, " of ",
                dp ? dp->size() : -1, ") disagrees with the shard (rank ", shard.rank, " of ",
                shard.size, ")");
  const bool bf16 = options_.precision == Precision::kBf16;
  const bool hooks = models::compat::has_post_accumulate_grad_hook();
  overlap_ = options_.overlap && shard.size > 1;
  owner_ = std::this_thread::get_id();
  // Marking needs the hook to see whether a call brought a gradient: the folding hook does.
  marks_in_hooks_ = overlap_ && hooks && (!bf16 || options_.fold_in_backward);
  fp32_grad_views_ = !bf16 && !marks_in_hooks_;
  const auto ordered = layout_order(params);
  torch::Device device = torch::kCPU;
  if (!ordered.empty()) device = ordered.front().second.device();
  slot_bucket_ = lay_out(ordered);
  bind_buffers(device, slot_bucket_);
  const bool fold = hooks && (bf16 ? options_.fold_in_backward : marks_in_hooks_);
  if (fold) install_grad_hooks(true);
  folds_in_backward_ = bf16 && fold;
  OMNIBAL_CHECK(options_.chunks >= 1, "DistributedOptimizer: ", options_.chunks, " chunks");
  bucket_chunks_.resize(buckets_.size());
  gathers_.resize(buckets_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto it = options_.chunk_of.find(slots_[i].name);
    const int c = it == options_.chunk_of.end() ? 0 : it->second;
    OMNIBAL_CHECK(c >= 0 && c < options_.chunks, "DistributedOptimizer: parameter '",
                  slots_[i].name, "' in chunk ", c, " of ", options_.chunks);
    const bool late = options_.late.count(slots_[i].name) > 0;
    slot_chunk_.push_back(late ? -1 : c);
    for (int k = 0; k < options_.chunks; ++k)
      if (late || k == c) bucket_chunks_[slot_bucket_[i]].insert(k);
  }
  reset_overlap();
}

std::vector<std::pair<std::string, torch::Tensor>> DistributedOptimizer::layout_order(
    const std::vector<std::pair<std::string, torch::Tensor>>& params) const {
  const torch::Dtype dtype = precision_dtype(options_.precision);
  // Layout order: own_bucket names first (in their listed order), then the rest in stage order.
  std::vector<std::pair<std::string, torch::Tensor>> ordered;
  // Zero-element parameters have nothing to update and no place in a bucket.
  for (const auto& want : options_.own_bucket)
    for (const auto& [name, p] : params)
      if (name == want && p.requires_grad() && p.numel() > 0) ordered.emplace_back(name, p);
  for (const auto& [name, p] : params)
    if (p.requires_grad() && p.numel() > 0 &&
        std::find(options_.own_bucket.begin(), options_.own_bucket.end(), name) ==
            options_.own_bucket.end())
      ordered.emplace_back(name, p);
  const torch::Device device =
      ordered.empty() ? torch::Device(torch::kCPU) : ordered.front().second.device();
  for (const auto& [name, p] : ordered) {
    OMNIBAL_CHECK(p.scalar_type() == dtype, "DistributedOptimizer: parameter '", name, "' is ",
                  comm::dtype_name(p.scalar_type()), ", expected ", comm::dtype_name(dtype),
                  " (train.precision ", choice_name(options_.precision), ")");
    OMNIBAL_CHECK(p.device() == device, "DistributedOptimizer: parameter '", name, "' is on ",
                  p.device().str(), ", the others on ", device.str());
  }
  return ordered;
}

std::vector<int> DistributedOptimizer::lay_out(
    const std::vector<std::pair<std::string, torch::Tensor>>& ordered) {
  // Buckets of at most bucket_bytes of fp32 gradient, each padded to a multiple of the DP size.
  const int64_t dpn = shard_.size;
  const int64_t cap = std::max<int64_t>(1, options_.bucket_bytes / 4);
  Bucket cur;
  int64_t used = 0;
  const auto close = [&] {
    if (used == 0) return;
    cur.size = (used + dpn - 1) / dpn * dpn;
    buckets_.push_back(cur);
    cur = Bucket{};
    cur.begin = buckets_.back().begin + buckets_.back().size;
    used = 0;
  };
  std::vector<int> slot_bucket;
  for (const auto& [name, p] : ordered) {
    const bool own = std::find(options_.own_bucket.begin(), options_.own_bucket.end(), name) !=
                     options_.own_bucket.end();
    const int64_t n = p.numel();
    if (own || (used > 0 && used + n > cap)) close();
    slots_.push_back({name, p, cur.begin + used, n, p.dim() >= 2});
    slot_bucket.push_back(static_cast<int>(buckets_.size()));
    used += n;
    if (own) close();
  }
  close();
  return slot_bucket;
}

void DistributedOptimizer::bind_buffers(torch::Device device, const std::vector<int>& slot_bucket) {
  const torch::Dtype dtype = precision_dtype(options_.precision);
  const int64_t dpn = shard_.size;
  const int64_t total = buckets_.empty() ? 0 : buckets_.back().begin + buckets_.back().size;
  torch::NoGradGuard no_grad;
  param_buffer_ = torch::zeros({total}, torch::dtype(dtype).device(device));
  main_grad_ = torch::zeros({total}, torch::dtype(torch::kFloat32).device(device));
  for (auto& s : slots_) {
    torch::Tensor view = param_buffer_.slice(0, s.offset, s.offset + s.numel);
    view.copy_(s.param.detach().reshape(-1));
    s.param.set_data(view.view(s.param.sizes()));
    if (fp32_grad_views_)
      s.param.mutable_grad() =
          main_grad_.slice(0, s.offset, s.offset + s.numel).view(s.param.sizes());
  }
  for (auto& b : buckets_) {
    b.owned = options_.zero1 ? b.size / dpn : b.size;
    b.owned_begin = b.begin + (options_.zero1 ? shard_.rank * b.owned : 0);
    const torch::Tensor mine = param_buffer_.slice(0, b.owned_begin, b.owned_begin + b.owned);
    b.master = options_.precision == Precision::kFp32 ? mine : mine.to(torch::kFloat32);
    b.exp_avg = torch::zeros({b.owned}, main_grad_.options());
    b.exp_avg_sq = torch::zeros({b.owned}, main_grad_.options());
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const Bucket& b = buckets_[slot_bucket[i]];
    const int64_t lo = std::max(s.offset, b.owned_begin);
    const int64_t hi = std::min(s.offset + s.numel, b.owned_begin + b.owned);
    if (hi > lo)
      segments_.push_back({static_cast<int>(i), slot_bucket[i], lo - b.owned_begin, lo, hi - lo});
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  if (!hooks_set_) return;
  for (const auto& s : slots_) models::compat::clear_post_accumulate_grad_hook(s.param, this);
}

void DistributedOptimizer::install_grad_hooks(bool fold) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const torch::Tensor main = main_grad_of(slots_[i]);
    const int slot = static_cast<int>(i);
    models::compat::set_post_accumulate_grad_hook(
        slots_[i].param,
        [this, main, slot, fold](const torch::Tensor& param) {
          const bool produced = param.grad().defined();
          if (fold) fold_grad(main, param);
          if (marks_in_hooks_) on_accumulated(slot, produced);
        },
        this);
  }
  hooks_set_ = true;
}

torch::Tensor DistributedOptimizer::owned_grad(const Bucket& b) const {
  return main_grad_.slice(0, b.owned_begin, b.owned_begin + b.owned);
}

torch::Tensor DistributedOptimizer::main_grad_of(const Slot& s) const {
  return main_grad_.slice(0, s.offset, s.offset + s.numel);
}

void DistributedOptimizer::zero_grad() {
  torch::NoGradGuard no_grad;
  reset_overlap();
  main_grad_.zero_();
  for (auto& s : slots_) {
    if (!fp32_grad_views_) {
      if (s.param.grad().defined()) s.param.mutable_grad().reset();
    } else if (!s.param.grad().defined() || !s.param.grad().is_alias_of(main_grad_)) {
      // Someone replaced the view (e.g. reset it): point it back at the fp32 main gradient.
      s.param.mutable_grad() =
          main_grad_.slice(0, s.offset, s.offset + s.numel).view(s.param.sizes());
    }
  }
}

void DistributedOptimizer::accumulate_grads() {
  if (fp32_grad_views_) return;
  for (const auto& s : slots_) fold_grad(main_grad_of(s), s.param);
}

void DistributedOptimizer::reduce_grads() {
  if (shard_.size == 1) return;
  OMNIBAL_CHECK(dp_ != nullptr, "DistributedOptimizer: DP size ", shard_.size,
                " but no DP group to reduce over");
  torch::NoGradGuard no_grad;
  if (overlap_) {
    for (size_t i = 0; i < slots_.size(); ++i) mark_final(static_cast<int>(i));
    launch_ready();
    for (auto& r : reductions_) {
      r.request.wait();
      finish_reduction(r);
    }
    reductions_.clear();
    return;
  }
  const bool low = options_.reduce_dtype == Precision::kBf16;
  for (auto& b : buckets_) {
    torch::Tensor full = main_grad_.slice(0, b.begin, b.begin + b.size);
    torch::Tensor wire = low ? full.to(torch::kBFloat16) : full;
    if (options_.zero1) {
      torch::Tensor out = torch::empty({b.owned}, wire.options());
      dp_->reduce_scatter(wire, out, "ZeRO-1 gradient reduce-scatter");
      owned_grad(b).copy_(out);
    } else {
      dp_->all_reduce(wire, comm::ReduceOp::kSum, "gradient all-reduce");
      if (low) full.copy_(wire);
    }
  }
}

void DistributedOptimizer::reset_overlap() {
  if (!overlap_) return;
  OMNIBAL_CHECK(reductions_.empty(), "DistributedOptimizer: a new step with ", reductions_.size(),
                " gradient reductions in flight (reduce_grads() was not called)");
  slot_final_.assign(slots_.size(), 0);
  chunk_final_.assign(options_.chunks, 0);
  bucket_open_.assign(buckets_.size(), 0);
  for (const int b : slot_bucket_) ++bucket_open_[b];
  launched_ = 0;
  window_ = -1;
  launches_.clear();
}

void DistributedOptimizer::begin_final_grads(int chunk) {
  OMNIBAL_CHECK(chunk >= 0 && chunk < options_.chunks, "DistributedOptimizer: chunk ", chunk,
                " of ", options_.chunks);
  if (overlap_ && marks_in_hooks_) window_ = chunk;
}

void DistributedOptimizer::end_final_grads(int chunk, bool chunk_done) {
  OMNIBAL_CHECK(chunk >= 0 && chunk < options_.chunks, "DistributedOptimizer: chunk ", chunk,
                " of ", options_.chunks);
  if (!overlap_) return;
  window_ = -1;
  if (chunk_done) {
    chunk_final_[chunk] = 1;
    const bool all =
        std::all_of(chunk_final_.begin(), chunk_final_.end(), [](char f) { return f; });
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slot_chunk_[i] == chunk || (all && slot_chunk_[i] < 0)) mark_final(static_cast<int>(i));
  }
  launch_ready();
  progress();
}

void DistributedOptimizer::on_accumulated(int slot, bool produced) {
  const bool on_owner = std::this_thread::get_id() == owner_;
  if (produced && window_ >= 0 && slot_chunk_[slot] == window_) {
    mark_final(slot);
    if (on_owner) launch_ready();
  }
  if (on_owner && !reductions_.empty()) progress();
}

void DistributedOptimizer::mark_final(int slot) {
  if (slot_final_[slot]) return;
  slot_final_[slot] = 1;
  --bucket_open_[slot_bucket_[slot]];
}

void DistributedOptimizer::launch_ready() {
  const int n = static_cast<int>(buckets_.size());
  while (launched_ < n && bucket_open_[n - 1 - launched_] == 0) {
    launch_reduction(n - 1 - launched_);
    ++launched_;
  }
}

void DistributedOptimizer::launch_reduction(int bucket) {
  OMNIBAL_CHECK(dp_ != nullptr, "DistributedOptimizer: DP size ", shard_.size,
                " but no DP group to reduce over");
  const double start = now_us();
  torch::NoGradGuard no_grad;
  const Bucket& b = buckets_[bucket];
  Reduction r;
  r.bucket = bucket;
  const torch::Tensor full = main_grad_.slice(0, b.begin, b.begin + b.size);
  r.wire = options_.reduce_dtype == Precision::kBf16 ? full.to(torch::kBFloat16) : full;
  if (options_.zero1) {
    r.out = torch::empty({b.owned}, r.wire.options());
    r.request = dp_->ireduce_scatter(r.wire, r.out, "ZeRO-1 gradient reduce-scatter (overlapped)");
  } else {
    r.request = dp_->iall_reduce(r.wire, comm::ReduceOp::kSum, "gradient all-reduce (overlapped)");
  }
  reductions_.push_back(std::move(r));
  launches_.push_back({bucket, start, now_us()});
}

void DistributedOptimizer::finish_reduction(Reduction& r) {
  const Bucket& b = buckets_[r.bucket];
  if (options_.zero1) owned_grad(b).copy_(r.out);
  else if (options_.reduce_dtype == Precision::kBf16)
    main_grad_.slice(0, b.begin, b.begin + b.size).copy_(r.wire);
}

void DistributedOptimizer::progress() {
  for (auto& r : reductions_)
    if (!r.request.test()) break;
}

std::vector<DistributedOptimizer::Launch> DistributedOptimizer::take_launches() {
  std::vector<Launch> out;
  out.swap(launches_);
  return out;
}

void DistributedOptimizer::wait_params(int chunk) {
  for (size_t b = 0; b < gathers_.size(); ++b)
    if (chunk < 0 || bucket_chunks_[b].count(chunk)) gathers_[b].wait();
}

torch::Tensor DistributedOptimizer::reduced_grad(const std::string& name) {
  for (const auto& seg : segments_)
    if (slots_[seg.slot].name == name)
      return main_grad_.slice(0, seg.global, seg.global + seg.length);
  return torch::Tensor();
}

double DistributedOptimizer::grad_norm(const GradNormScope& scope) {
  torch::NoGradGuard no_grad;
  // Summed on the gradient's device, one copy to the host at the end.
  torch::Tensor acc = torch::zeros({1}, main_grad_.options().dtype(torch::kFloat64));
  for (const auto& seg : segments_) {
    if (scope.exclude.count(slots_[seg.slot].name)) continue;
    acc +=
        main_grad_.slice(0, seg.global, seg.global + seg.length).to(torch::kFloat64).pow(2).sum();
  }
  torch::Tensor sq = acc.to(torch::kCPU);
  local_grad_sq_ = sq.item<double>();
  if (options_.zero1 && shard_.size > 1) {
    OMNIBAL_CHECK(dp_ != nullptr, "DistributedOptimizer: no DP group for the gradient norm");
    dp_->all_reduce(sq, comm::ReduceOp::kSum, "ZeRO-1 gradient norm over DP");
  }
  for (comm::Communicator* group : scope.groups)
    group->all_reduce(sq, comm::ReduceOp::kSum, "gradient norm over " + group->name());
  return std::sqrt(sq.item<double>());
}

double clip_coefficient(double norm, double max_norm, const char* who) {
  OMNIBAL_CHECK(std::isfinite(norm), who, ": the gradient norm is ", norm,
                "; a non-finite step must be skipped (skip_step) or stopped before clipping "
                "(train/nonfinite_guard.h)");
  return max_norm <= 0 ? 1.0 : std::min(1.0, max_norm / (norm + 1e-6));
}

double DistributedOptimizer::clip(double norm, double max_norm) {
  const double coef = clip_coefficient(norm, max_norm, "DistributedOptimizer::clip");
  if (coef < 1.0) {
    torch::NoGradGuard no_grad;
    for (const auto& seg : segments_)
      main_grad_.slice(0, seg.global, seg.global + seg.length).mul_(coef);
  }
  return coef;
}

void DistributedOptimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  wait_params();
  ++steps_;
  for (const auto& seg : segments_) {
    Bucket& b = buckets_[seg.bucket];
    const auto part = [&](const torch::Tensor& t) {
      return t.slice(0, seg.local, seg.local + seg.length);
    };
    adamw_update(part(b.master), main_grad_.slice(0, seg.global, seg.global + seg.length),
                 part(b.exp_avg), part(b.exp_avg_sq), lr, steps_, slots_[seg.slot].decay,
                 options_.adam);
  }
  for (auto& b : buckets_) {
    torch::Tensor mine = param_buffer_.slice(0, b.owned_begin, b.owned_begin + b.owned);
    if (options_.precision == Precision::kBf16) mine.copy_(b.master);
    if (options_.zero1 && shard_.size > 1) {
      OMNIBAL_CHECK(dp_ != nullptr, "DistributedOptimizer: no DP group to gather parameters");
      torch::Tensor all = param_buffer_.slice(0, b.begin, b.begin + b.size);
      if (overlap_)  // waited for by wait_params (the chunk's first forward, or any reader)
        gathers_[&b - buckets_.data()] =
            dp_->iall_gather(mine.clone(), all, "ZeRO-1 parameter all-gather (overlapped)");
      else dp_->all_gather(mine.clone(), all, "ZeRO-1 parameter all-gather");
    }
  }
}

void DistributedOptimizer::skip_step() { zero_grad(); }

std::vector<std::string> DistributedOptimizer::names() const {
  std::vector<std::string> out;
  for (const auto& s : slots_) out.push_back(s.name);
  return out;
}

std::vector<std::string> DistributedOptimizer::state_names() const {
  std::vector<std::string> out;
  for (const auto& s : slots_) {
    out.push_back(s.name);
    out.push_back(s.name + "#exp_avg");
    out.push_back(s.name + "#exp_avg_sq");
  }
  return out;
}

std::map<std::string, torch::Tensor> DistributedOptimizer::state_tensors(bool keep) {
  torch::NoGradGuard no_grad;
  wait_params();
  std::map<std::string, torch::Tensor> out;
  const bool sharded = options_.zero1 && shard_.size > 1;
  if (!sharded && !keep) return out;
  const char* suffixes[3] = {"", "#exp_avg", "#exp_avg_sq"};
  for (const Bucket& b : buckets_) {
    const torch::Tensor parts[3] = {b.master, b.exp_avg, b.exp_avg_sq};
    for (int j = 0; j < 3; ++j) {
      torch::Tensor full = parts[j];
      if (sharded) {
        OMNIBAL_CHECK(dp_ != nullptr, "DistributedOptimizer: no DP group to gather the state");
        full = torch::empty({b.size}, main_grad_.options());
        dp_->all_gather(parts[j].contiguous(), full, "ZeRO-1 optimizer state for a checkpoint");
        if (!keep) continue;  // this rank does not write: drop the bucket now
        full = full.to(torch::kCPU);
      }
      for (const auto& s : slots_) {
        if (s.offset < b.begin || s.offset >= b.begin + b.size) continue;
        const int64_t at = s.offset - b.begin;
        out[s.name + suffixes[j]] = full.slice(0, at, at + s.numel).view(s.param.sizes());
      }
    }
  }
  return out;
}

void DistributedOptimizer::load_state_tensors(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  wait_params();
  for (auto& b : buckets_) {
    torch::Tensor full[3];
    for (auto& t : full) t = torch::zeros({b.size}, main_grad_.options());
    for (const auto& s : slots_) {
      if (s.offset < b.begin || s.offset >= b.begin + b.size) continue;
      const char* suffixes[3] = {"", "#exp_avg", "#exp_avg_sq"};
      for (int j = 0; j < 3; ++j) {
        const std::string name = s.name + suffixes[j];
        const auto it = state.find(name);
        OMNIBAL_CHECK(it != state.end(), "optimizer: the checkpoint has no '", name, "'");
        OMNIBAL_CHECK(it->second.sizes() == s.param.sizes(), "optimizer: '", name, "' has shape ",
                      it->second.sizes(), " in the checkpoint, expected ", s.param.sizes());
        full[j]
            .slice(0, s.offset - b.begin, s.offset - b.begin + s.numel)
            .copy_(it->second.reshape(-1));
      }
    }
    const int64_t at = b.owned_begin - b.begin;
    b.master.copy_(full[0].slice(0, at, at + b.owned));
    b.exp_avg.copy_(full[1].slice(0, at, at + b.owned));
    b.exp_avg_sq.copy_(full[2].slice(0, at, at + b.owned));
    param_buffer_.slice(0, b.begin, b.begin + b.size).copy_(full[0]);
  }
}

int64_t DistributedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) {
    bytes += static_cast<int64_t>(b.exp_avg.nbytes() + b.exp_avg_sq.nbytes());
    if (options_.precision == Precision::kBf16) bytes += static_cast<int64_t>(b.master.nbytes());
  }
  return bytes;
}

}  // namespace omnibal::train

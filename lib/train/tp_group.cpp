#include "train/tp_group.h"

#include "comm/link_probe.h"
#include "core/error.h"

#include <chrono>

namespace omnibal::train {

namespace {

/// models::TpCollectives over a comm::Communicator (blocking, under its watchdog).
class CommTpCollectives : public models::TpCollectives {
 public:
  explicit CommTpCollectives(comm::Communicator& group) : group_(group) {}
  void all_reduce(torch::Tensor& t, Op op) override {
    const auto t0 = std::chrono::steady_clock::now();
    const comm::ReduceOp r = op == Op::kSum   ? comm::ReduceOp::kSum
                             : op == Op::kMax ? comm::ReduceOp::kMax
                                              : comm::ReduceOp::kMin;
    group_.all_reduce(t, r, "TP all-reduce");
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  torch::Tensor all_gather(const torch::Tensor& local) override {
    const torch::Tensor in = local.contiguous();
    torch::Tensor out = torch::empty({group_.size() * in.numel()}, in.options());
    group_.all_gather(in, out, "TP all-gather");
    return out;
  }
  double seconds = 0;  ///< wall time in all_reduce (waits for the slowest TP rank included)

 private:
  comm::Communicator& group_;
};

std::string base_name(const std::string& name) { return name.substr(0, name.find('#')); }

}  // namespace

models::TensorParallel tensor_parallel_of(comm::ParallelComms& comms) {
  return tensor_parallel_over(comms.tp_group());
}

models::TensorParallel tensor_parallel_over(comm::Communicator& group) {
  if (group.size() == 1) return {};
  return {group.rank(), group.size(), c10::make_intrusive<CommTpCollectives>(group)};
}

double tp_all_reduce_seconds(const models::TensorParallel& tp) {
  const auto* c = dynamic_cast<const CommTpCollectives*>(tp.group.get());
  return c ? c->seconds : 0.0;
}

partition::TpLink measure_tp_link(comm::ParallelComms& comms, const torch::Device& device,
                                  torch::Dtype dtype) {
  if (comms.tp_group().size() == 1) return {};
  const comm::AllReduceLink link =
      comm::probe_all_reduce(comms.tp_group(), torch::TensorOptions(dtype).device(device));
  torch::Tensor v = torch::tensor({link.latency_s, -link.bus_bandwidth}, torch::kFloat64);
  comms.world().all_reduce(v, comm::ReduceOp::kMax, "TP link");  // slowest group: every rank
  return {-v[1].item<double>(), v[0].item<double>()};
}

TpLayout::TpLayout(const std::vector<models::UnitPtr>& units, models::TensorParallel tp)
    : tp_(std::move(tp)) {
  for (const auto& u : units)
    for (const auto& [local, spec] : u->shard_specs())
      specs_[u->unit_name() + "." + local] = u->shard_spec(local);
}

models::ShardSpec TpLayout::spec(const std::string& name) const {
  const auto it = specs_.find(base_name(name));
  return it == specs_.end() ? models::ShardSpec{} : it->second;
}

torch::Tensor TpLayout::gather(const std::string& name, const torch::Tensor& local) const {
  return models::gather_full(local, spec(name), tp_);
}

torch::Tensor TpLayout::shard(const std::string& name, const torch::Tensor& full,
                              const std::string& origin) const {
  const models::ShardSpec s = spec(name);
  if (s.sharded())
    OMNIBAL_CHECK(full.dim() > s.dim && full.size(s.dim) == s.rows, origin, ": '", name,
                  "' has shape ", full.sizes(), " there but ", s.rows, " rows along dimension ",
                  s.dim, " in this model (another preset?)");
  return models::shard_of(full, s, tp_);
}

void TpLayout::alias(const std::string& name, const std::string& same_as) {
  const auto it = specs_.find(same_as);
  if (it != specs_.end()) specs_[name] = it->second;
}

std::set<std::string> TpLayout::replicated_names(const std::vector<std::string>& names) const {
  std::set<std::string> out;
  for (const auto& n : names)
    if (replicated(n)) out.insert(n);
  return out;
}

}  // namespace omnibal::train

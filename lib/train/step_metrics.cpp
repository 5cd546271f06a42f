#include "train/step_metrics.h"

#include <algorithm>

#include "comm/communicator.h"
#include "core/error.h"

namespace omnibal::train {

StepMetrics::StepMetrics(int stages_, int dp) {
  OMNIBAL_CHECK(stages_ >= 1 && dp >= 1, "StepMetrics: expected >= 1 stages and DP ranks, got ",
                stages_, " and ", dp);
  stages.resize(stages_);
  dp_ranks.resize(dp);
}

int64_t StepMetrics::packed_size() const {
  return 3 + 4 * static_cast<int64_t>(stages.size()) + 3 * static_cast<int64_t>(dp_ranks.size()) +
         2;
}

torch::Tensor StepMetrics::pack() const {
  torch::Tensor v = torch::zeros({packed_size()}, torch::kFloat64);
  auto a = v.accessor<double, 1>();
  int64_t i = 0;
  a[i++] = loss_term_sum;
  a[i++] = samples;
  a[i++] = tokens;
  for (const StageSeconds& s : stages) {
    a[i++] = s.forward_s;
    a[i++] = s.backward_s;
    a[i++] = s.idle_s;
    a[i++] = s.reduce_s;
  }
  for (const DpRankLoad& d : dp_ranks) {
    a[i++] = d.tiles;
    a[i++] = d.tokens;
    a[i++] = d.busy_s;
  }
  a[i++] = micro_batch_mean_loss_sum;
  a[i++] = micro_batches;
  return v;
}

StepMetrics StepMetrics::unpack(const torch::Tensor& packed, int stages, int dp) {
  StepMetrics m(stages, dp);
  OMNIBAL_CHECK(packed.defined() && packed.dim() == 1 && packed.scalar_type() == torch::kFloat64 &&
                    packed.size(0) == m.packed_size(),
                "StepMetrics::unpack: expected [", m.packed_size(), "] float64 for ", stages,
                " stages and ", dp, " DP ranks, got ",
                packed.defined() ? comm::describe_tensor(packed)
                                 : std::string("an undefined tensor"));
  const torch::Tensor cpu = packed.to(torch::kCPU).contiguous();
  const auto a = cpu.accessor<double, 1>();
  int64_t i = 0;
  m.loss_term_sum = a[i++];
  m.samples = a[i++];
  m.tokens = a[i++];
  for (StageSeconds& s : m.stages) {
    s.forward_s = a[i++];
    s.backward_s = a[i++];
    s.idle_s = a[i++];
    s.reduce_s = a[i++];
  }
  for (DpRankLoad& d : m.dp_ranks) {
    d.tiles = a[i++];
    d.tokens = a[i++];
    d.busy_s = a[i++];
  }
  m.micro_batch_mean_loss_sum = a[i++];
  m.micro_batches = a[i++];
  return m;
}

nlohmann::json metrics_record(const StepMetrics& m, const StepScalars& s) {
  nlohmann::json stages = nlohmann::json::array(), dp_ranks = nlohmann::json::array();
  double idle = 0, reduce = 0;
  for (const StageSeconds& t : m.stages) {
    stages.push_back(
        {{"forward_s", t.forward_s}, {"backward_s", t.backward_s}, {"idle_s", t.idle_s}});
    idle += t.idle_s;
    reduce = std::max(reduce, t.reduce_s);
  }
  for (const DpRankLoad& d : m.dp_ranks)
    dp_ranks.push_back({{"tiles", static_cast<int64_t>(d.tiles)},
                        {"tokens", static_cast<int64_t>(d.tokens)},
                        {"busy_s", d.busy_s}});
  const double n_stages = static_cast<double>(m.stages.size());
  nlohmann::json out = {{"step", s.step},
                        {"loss", m.loss(s.normaliser)},
                        {"lr", s.lr},
                        {"grad_norm", s.grad_norm},
                        {"samples", static_cast<int64_t>(m.samples)},
                        {"tokens", static_cast<int64_t>(m.tokens)},
                        {"label_tokens", s.label_tokens},
                        {"loss_normaliser", s.normaliser},
                        {"tokens_per_s", m.tokens / s.seconds},
                        {"samples_per_s", m.samples / s.seconds},
                        {"step_seconds", s.seconds},
                        {"dp_wait_s", reduce},
                        {"bubble_fraction", idle / n_stages / s.seconds},
                        {"epoch", s.epoch},
                        {"micro_batch_mean_loss",
                         m.micro_batches ? m.micro_batch_mean_loss_sum / m.micro_batches : 0.0},
                        {"stages", stages},
                        {"dp_ranks", dp_ranks}};
  if (!s.predicted.rank_s.empty()) {
    out["predicted_rank_s"] = s.predicted.rank_s;
    out["cost_dist_dp"] = s.predicted.dist_dp;
    out["cost_dist_mb"] = s.predicted.dist_mb;
  }
  if (s.nonfinite_skipped) out["nonfinite_skipped"] = true;
  return out;
}

StepMetrics gather_step_metrics(const pipeline::StageStepResult& r,
                                const std::vector<models::PackBatch>& packs, const StageCoord& at,
                                comm::Communicator& world) {
  const int stages = at.stages, dp = at.dp, dp_rank = at.dp_rank, stage_index = at.stage;
  StepMetrics mine(stages, dp);
  const bool counts = at.tp_rank == 0;  // the TP ranks of a stage hold the same loss, packs, times
  if (counts && at.last()) {
    mine.loss_term_sum = r.loss_term_sum;  // sum of w_t * l_t under loss.reduction
    for (const auto& [loss, count] : r.micro_batches) {
      mine.micro_batch_mean_loss_sum += count ? loss / count : 0.0;
      mine.micro_batches += 1;
    }
  }
  if (counts && stage_index == 0) {
    int64_t samples = 0, tokens = 0, tiles = 0;
    for (const auto& p : packs) {
      samples += p.num_samples();
      tokens += p.position_ids.numel();
      tiles += p.image_flags.numel();
    }
    mine.samples = static_cast<double>(samples);
    mine.tokens = static_cast<double>(tokens);
    mine.dp_ranks[dp_rank].tiles = static_cast<double>(tiles);
    mine.dp_ranks[dp_rank].tokens = static_cast<double>(tokens);
  }
  if (counts) mine.dp_ranks[dp_rank].busy_s = r.times.forward_s + r.times.backward_s;
  if (counts && dp_rank == 0)
    mine.stages[stage_index] = {r.times.forward_s, r.times.backward_s, r.times.idle_s,
                                r.times.reduce_s};
  torch::Tensor v = mine.pack();
  world.all_reduce(v, comm::ReduceOp::kSum, "step metrics");
  return StepMetrics::unpack(v, stages, dp);
}

}  // namespace omnibal::train

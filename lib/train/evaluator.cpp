#include "train/evaluator.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "data/pack_loader.h"

namespace omnibal::train {

namespace {

std::string answer_text(const data::AnnotationEntry& entry) {
  std::string out;
  if (!entry.record) return out;
  for (const auto& t : entry.record->turns)
    if (t.role == data::Role::kGpt) out += t.value + "\n";
  return out;
}

}  // namespace

Evaluator::Evaluator(LoadedSet set, int samples_per_pack, int64_t max_tokens, int every)
    : set_(std::move(set)), every_(every) {
  std::vector<int64_t> current;
  int64_t tokens = 0;
  // The table repeats samples per the eval meta's repeat_time; evaluation scores each sample
  // once (the majority rates below count each once too).
  std::vector<bool> seen(static_cast<size_t>(set_.dataset->size()), false);
  for (uint32_t s = 0; s < set_.table.size(); ++s) {
    if (seen[set_.global_id(s)]) continue;
    seen[set_.global_id(s)] = true;
    const int64_t t = set_.table.load[s].tokens();
    if (!current.empty() &&
        (static_cast<int>(current.size()) >= samples_per_pack || tokens + t > max_tokens)) {
      packs_.push_back(std::move(current));
      current.clear();
      tokens = 0;
    }
    current.push_back(set_.global_id(s));
    tokens += t;
  }
  if (!current.empty()) packs_.push_back(std::move(current));
  const auto& ds = *set_.dataset;
  for (int d = 0; d < ds.num_datasets(); ++d) {
    std::map<std::string, int64_t> counts;
    for (const auto& e : ds.entries(d)) ++counts[answer_text(e)];
    int64_t best = 0;
    for (const auto& [text, n] : counts) best = std::max(best, n);
    majority_.push_back(ds.entries(d).empty() ? 0.0
                                              : static_cast<double>(best) / ds.entries(d).size());
  }
}

SampleMatch match_samples(const models::UnitState& out) {
  const int64_t n = out.num_samples();
  SampleMatch m{std::vector<bool>(n, true), std::vector<double>(n, 0.0),
                std::vector<int64_t>(n, 0)};
  if (out.label_count == 0) return m;
  const torch::Tensor pos = out.label_positions.to(torch::kCPU);
  const torch::Tensor targets = out.labels.to(torch::kCPU).index_select(0, pos + 1);
  // The head's argmax over the whole vocabulary (vocab-parallel under TP).
  const torch::Tensor pred = out.predictions.defined() ? out.predictions : out.logits.argmax(-1);
  const torch::Tensor hit = pred.to(torch::kCPU).eq(targets);
  const torch::Tensor loss = out.token_loss.to(torch::kCPU, torch::kFloat64);
  const auto cu = out.cu_seqlens.accessor<int64_t, 1>();
  const auto p = pos.accessor<int64_t, 1>();
  const auto h = hit.accessor<bool, 1>();
  const auto l = loss.accessor<double, 1>();
  int64_t sample = 0;
  for (int64_t i = 0; i < pos.size(0); ++i) {
    while (p[i] >= cu[sample + 1]) ++sample;
    m.correct[sample] = m.correct[sample] && h[i];
    m.loss_sum[sample] += l[i];
    ++m.labels[sample];
  }
  return m;
}

EvalResult Evaluator::run(pipeline::StageExecutor& stage, comm::ParallelComms& comms,
                          bool lockstep) {
  const int dp = comms.grid().shape().dp, my_dp = comms.coord().dp;
  const int pp = comms.grid().shape().pp, s = comms.coord().pp;
  std::vector<std::vector<int64_t>> mine;
  for (size_t i = my_dp; i < packs_.size(); i += dp) mine.push_back(packs_[i]);
  const size_t scored = mine.size();
  if (lockstep && !packs_.empty())  // pad to the largest DP rank's count (unscored copies)
    mine.resize((packs_.size() + dp - 1) / dp, packs_.front());
  const bool need_pack = stage.is_first() || stage.is_last();
  const int datasets = set_.dataset->num_datasets();
  torch::Tensor acc = torch::zeros({datasets, 4}, torch::kFloat64);
  if (need_pack) {
    data::LoaderOptions lo;
    lo.workers = 1;
    lo.parts = {s == 0, s == 0, true};
    (void)pp;
    data::PackLoader loader(*set_.builder, mine, lo);
    for (int i = 0; i < static_cast<int>(mine.size()); ++i) {
      const models::PackBatch pack = *loader.next();
      auto out = stage.forward_only(i, &pack);
      if (!out || static_cast<size_t>(i) >= scored) continue;
      const SampleMatch m = match_samples(*out);
      for (size_t k = 0; k < pack.sample_ids.size(); ++k) {
        const int d = set_.dataset->locate(pack.sample_ids[k]).first;
        auto row = acc[d];
        row[0] += 1;
        row[1] += m.correct[k] && m.labels[k] > 0 ? 1 : 0;
        row[2] += m.loss_sum[k];
        row[3] += m.labels[k];
      }
    }
    // Samples left out under data.on_bad_sample: skip, per DP replica (stage 0 counts them).
    if (s == 0 && loader.bad_samples().total() > 0)
      log_info_every_rank("eval: DP rank {}: {} (not scored)", my_dp,
                          loader.bad_samples().report());
  } else {
    for (int i = 0; i < static_cast<int>(mine.size()); ++i) stage.forward_only(i, nullptr);
  }
  if (comms.coord().tp != 0) acc.zero_();  // TP ranks score the same packs: count once
  comms.world().all_reduce(acc, comm::ReduceOp::kSum, "eval scores");
  EvalResult r;
  r.overall.task = "overall";
  const auto a = acc.accessor<double, 2>();
  double majority_weighted = 0;
  for (int d = 0; d < datasets; ++d) {
    TaskScore t{set_.dataset->meta(d).name,    static_cast<int64_t>(a[d][0]),
                static_cast<int64_t>(a[d][1]), a[d][2],
                static_cast<int64_t>(a[d][3]), majority_[d]};
    r.overall.samples += t.samples;
    r.overall.correct += t.correct;
    r.overall.loss_sum += t.loss_sum;
    r.overall.label_tokens += t.label_tokens;
    majority_weighted += t.majority_rate * t.samples;
    r.tasks.push_back(t);
  }
  r.overall.majority_rate = r.overall.samples ? majority_weighted / r.overall.samples : 0;
  return r;
}

}  // namespace omnibal::train

#include "train/training_data.h"

#include "balance/length_reader.h"
#include "balance/plan_json.h"
#include "core/error.h"
#include "core/log.h"
#include "data/length_scanner.h"

namespace omnibal::train {

namespace {

balance::SampleTable table_from_lengths(const data::ConversationDataset& ds,
                                        const std::vector<data::SampleLengths>& lengths) {
  balance::SampleTable table;
  for (int d = 0; d < ds.num_datasets(); ++d) {
    const auto& meta = ds.meta(d);
    balance::DatasetInfo info{meta.name, meta.annotation, 0, 0, 1.0};
    info.records = static_cast<int64_t>(ds.entries(d).size());
    const uint32_t id = table.add_dataset(info);
    for (int64_t e = 0; e < info.records; ++e) {
      const auto& l = lengths[ds.offset(d) + e];
      if (l.vit_num < 0) continue;  // skipped as bad
      table.add(id, static_cast<uint32_t>(e),
                balance::Load{{static_cast<int32_t>(l.vit_num), static_cast<int32_t>(l.token_num)}},
                static_cast<int32_t>(l.image_flags));
    }
  }
  return table;
}

}  // namespace

LoadedSet load_set(const std::string& meta_path, const Config& config, const ModelPreset& preset,
                   const data::Tokenizer& tokenizer, int threads) {
  LoadedSet set;
  const auto policy = data::parse_bad_sample_policy(config.data.on_bad_sample, "data.on_bad_sample");
  set.dataset = std::make_unique<data::ConversationDataset>(
      data::ConversationDataset::load(meta_path, policy));
  set.processor = std::make_unique<data::SampleProcessor>(
      tokenizer, data::sample_options(config.data, preset));
  set.builder = std::make_unique<data::PackBuilder>(*set.dataset, *set.processor, policy);
  bool have_lengths = true;
  for (int d = 0; d < set.dataset->num_datasets(); ++d)
    have_lengths = have_lengths && !set.dataset->meta(d).token_lengths.empty();
  if (have_lengths) {
    set.lengths = data::load_meta_lengths(*set.dataset);
  } else {
    data::ScanResult scan = data::scan_lengths(*set.dataset, *set.processor, policy, threads);
    for (auto& per_dataset : scan.lengths)
      set.lengths.insert(set.lengths.end(), per_dataset.begin(), per_dataset.end());
  }
  for (const auto& l : set.lengths) set.bad_samples += l.vit_num < 0 ? 1 : 0;
  set.table = table_from_lengths(*set.dataset, set.lengths);
  set.builder->expect_lengths(set.lengths);
  return set;
}

TrainingData::TrainingData(LoadedSet set, const Config& config)
    : set_(std::move(set)),
      method_(balance::parse_method(config.balance.method, "balance.method")),
      options_(balance::planner_options(config.parallel, config.balance, config.data)),
      dp_(config.parallel.dp),
      micro_batches_(config.parallel.micro_batches) {
  // A step is dp * m packs fixed independently of how it is run (conventions.md): plan one
  // "rank" of dp * m packs and deal them to DP ranks here, so any DP size sees the same steps.
  options_.dp = 1;
  options_.micro_batches = dp_ * micro_batches_;
  OMNIBAL_CHECK(set_.table.size() > 0, config.data.meta, ": no usable training samples");
}

void TrainingData::plan_next_epoch() {
  const int e = static_cast<int>(epochs_.size());
  balance::PlannerOptions o = options_;
  o.seed = options_.seed + static_cast<uint64_t>(e);
  balance::PackList carry;
  if (e > 0) carry = balance::carried_packs(epochs_.back());
  balance::MethodResult r = balance::plan_method(set_.table, method_, o, e > 0 ? &carry : nullptr);
  // Budgets are searched once: later epochs reuse epoch 0's.
  if (e == 0 && balance::budgets_unset(options_.budgets) &&
      (method_ == balance::Method::kIsf || method_ == balance::Method::kIsfRandomPlacement))
    options_.budgets = r.budgets;
  OMNIBAL_CHECK(r.plan.steps() > 0, "epoch ", e, " of balance.method ", balance::method_name(method_),
                " has no full step (", r.packing.packs.size(), " packs for dp * m = ",
                r.plan.packs_per_step(), "); use fewer ranks, micro-batches or samples per pack");
  first_step_.push_back(e == 0 ? 0 : first_step_.back() + static_cast<int64_t>(epochs_.back().plan.steps()));
  epochs_.push_back(std::move(r));
}

DataPosition TrainingData::position(int64_t step) {
  OMNIBAL_CHECK(step >= 0, "TrainingData: negative step ", step);
  if (epochs_.empty()) plan_next_epoch();
  while (step >= first_step_.back() + static_cast<int64_t>(epochs_.back().plan.steps()))
    plan_next_epoch();
  int e = static_cast<int>(epochs_.size()) - 1;
  while (first_step_[e] > step) --e;
  return {e, step - first_step_[e]};
}

std::vector<int64_t> TrainingData::pack(int64_t step, int dp_rank, int micro) {
  const DataPosition pos = position(step);
  const auto& r = epochs_[pos.epoch];
  // Snake order over DP ranks (heavy and light packs of the load-sorted step alternate).
  const uint32_t p = r.plan.pack(static_cast<size_t>(pos.step_in_epoch), 0, slot(dp_rank, micro));
  std::vector<int64_t> ids;
  for (const uint32_t* s = r.packing.packs.begin(p); s != r.packing.packs.end(p); ++s)
    ids.push_back(set_.global_id(*s));
  return ids;
}

int64_t TrainingData::steps_in_epoch(int epoch) {
  while (static_cast<int>(epochs_.size()) <= epoch) plan_next_epoch();
  return static_cast<int64_t>(epochs_[epoch].plan.steps());
}

const balance::MethodResult& TrainingData::epoch_plan(int epoch) {
  steps_in_epoch(epoch);
  return epochs_[epoch];
}

uint64_t TrainingData::plan_hash() {
  const auto& r = epoch_plan(0);
  return balance::plan_hash(set_.table, r.packing.packs, r.plan);
}

}  // namespace omnibal::train

#include "train/training_data.h"

#include "balance/repeat_time.h"
#include "core/error.h"
#include "data/length_scanner.h"

namespace omnibal::train {

namespace {

// One row per (dataset, record) occurrence after repeat_time (balance/repeat_time.h, the rule
// omnibal-plan's length reader applies with the same seed), bad records left out.
balance::SampleTable table_from_lengths(const data::ConversationDataset& ds,
                                        const std::vector<data::SampleLengths>& lengths,
                                        uint64_t seed, bool repeat) {
  balance::SampleTable table;
  for (int d = 0; d < ds.num_datasets(); ++d) {
    const auto& meta = ds.meta(d);
    balance::DatasetInfo info{meta.name, meta.annotation, 0, 0, meta.repeat_time};
    info.records = static_cast<int64_t>(ds.entries(d).size());
    const uint32_t id = table.add_dataset(info);
    const auto rows = balance::repeat_records(info.records, repeat ? meta.repeat_time : 1.0, seed, id,
                                              "dataset '" + meta.name + "' (" + meta.annotation + ")");
    for (const uint32_t e : rows) {
      const auto& l = lengths[ds.offset(d) + e];
      if (l.vit_num < 0) continue;  // skipped as bad
      table.add(id, e,
                balance::Load{{static_cast<int32_t>(l.vit_num), static_cast<int32_t>(l.token_num)}},
                static_cast<int32_t>(l.image_flags));
    }
  }
  return table;
}

}  // namespace

LoadedSet load_set(const std::string& meta_path, const Config& config, const ModelPreset& preset,
                   const data::Tokenizer& tokenizer, int threads, bool repeat) {
  LoadedSet set;
  const auto policy = config.data.on_bad_sample;
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
  set.table = table_from_lengths(*set.dataset, set.lengths, config.balance.seed, repeat);
  set.builder->expect_lengths(set.lengths);
  set.max_seq_len = preset.llm.max_seq_len;
  set.preset_name = preset.name.empty() ? config.model.preset : preset.name;
  return set;
}

TrainingData::TrainingData(LoadedSet set, const Config& config) : set_(std::move(set)) {
  OMNIBAL_CHECK(set_.table.size() > 0, config.data.meta, ": no usable training samples");
  balance::PlannerOptions options =
      balance::planner_options(config.parallel, config.balance, config.data);
  options.dp = config.parallel.dp;
  options.micro_batches = config.parallel.micro_batches;
  options.max_seq_len = set_.max_seq_len;
  options.max_seq_len_origin = "preset " + set_.preset_name;
  planner_ = std::make_unique<balance::EpochPlanner>(
      set_.table, config.balance.method, options);
}

DataPosition TrainingData::position(int64_t step) { return planner_->position(step); }

std::vector<int64_t> TrainingData::pack(int64_t step, int dp_rank, int micro) {
  std::vector<int64_t> ids;
  for (const uint32_t s : planner_->pack(step, dp_rank, micro)) ids.push_back(set_.global_id(s));
  return ids;
}

int64_t TrainingData::steps_in_epoch(int epoch) { return planner_->steps_in_epoch(epoch); }

const balance::MethodResult& TrainingData::epoch_plan(int epoch) {
  return planner_->epoch_plan(epoch);
}

uint64_t TrainingData::plan_hash() { return planner_->plan_hash(); }

}  // namespace omnibal::train

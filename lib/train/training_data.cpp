#include "train/training_data.h"

#include <time.h>

#include <algorithm>

#include "balance/repeat_time.h"
#include "core/error.h"
#include "core/log.h"
#include "data/input_checks.h"
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
    const auto rows =
        balance::repeat_records(info.records, repeat ? meta.repeat_time : 1.0, seed, id,
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
  data::check_tokenizer_fits(tokenizer, preset, config.model.preset);
  set.dataset = std::make_unique<data::ConversationDataset>(
      data::ConversationDataset::load(meta_path, policy));
  set.processor =
      std::make_unique<data::SampleProcessor>(tokenizer, data::sample_options(config.data, preset));
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
  for (const auto& warning : data::check_empty_datasets(meta_path, *set.dataset, set.lengths,
                                                        config.data.allow_empty_datasets))
    log_line(warning);
  set.table = table_from_lengths(*set.dataset, set.lengths, config.balance.seed, repeat);
  set.builder->expect_lengths(set.lengths);
  set.max_seq_len = preset.llm.max_seq_len;
  set.preset_name = preset.name.empty() ? config.model.preset : preset.name;
  return set;
}

TrainingData::TrainingData(LoadedSet set, const Config& config, DataRank rank)
    : set_(std::move(set)),
      rank_(rank),
      micro_batches_(config.parallel.micro_batches),
      workers_(config.data.workers),
      pin_memory_(config.runtime.device == RuntimeDevice::kCuda) {
  OMNIBAL_CHECK(set_.table.size() > 0, config.data.meta, ": no usable training samples");
  balance::PlannerOptions options =
      balance::planner_options(config.parallel, config.balance, config.data);
  options.dp = config.parallel.dp;
  options.micro_batches = config.parallel.micro_batches;
  options.max_seq_len = set_.max_seq_len;
  options.max_seq_len_origin = "preset " + set_.preset_name;
  planner_ = std::make_unique<balance::EpochPlanner>(set_.table, config.balance.method, options);
}

TrainingData::~TrainingData() = default;

DataPosition TrainingData::position(int64_t step) { return planner_->position(step); }

bool TrainingData::loads_packs() const {
  const data::PackParts parts = data::PackParts::for_stage(rank_.stage, rank_.stages);
  return parts.pixels || parts.input_ids || parts.labels;
}

/// The samples the packer (ISF budgets, baselines' caps) left out of epoch `epoch` under
/// data.on_bad_sample: skip: counted once per epoch this run enters, logged by rank 0 with the
/// first one's file:line and load.
void TrainingData::count_packer_skips(int epoch) {
  if (epoch <= packer_epoch_) return;
  packer_epoch_ = epoch;
  const auto& plan = epoch_plan(epoch);
  const auto& skipped = plan.packing.skipped;
  if (skipped.empty()) return;
  skipped_by_packer_ += static_cast<int64_t>(skipped.size());
  const uint32_t first = skipped.front();
  log_info(
      "data: epoch {}: the packer left out {} samples over the pack budgets (Q_v {} Q_t {}) "
      "under data.on_bad_sample: skip; first: {} ({} tiles, {} tokens)",
      epoch, skipped.size(), plan.budgets.q_vit, plan.budgets.q_tok,
      set_.dataset->entry(set_.global_id(first)).origin.to_string(), set_.table.load[first].tiles(),
      set_.table.load[first].tokens());
}

/// Logs the loader's skipped-sample report (reasons, first example) for its epoch on every
/// first-stage rank (one per DP replica) when it skipped any; the loader may have built a few
/// packs ahead of the last step.
void TrainingData::report_loader_skips() const {
  if (loader_ && rank_.stage == 0 && loader_->bad_samples().total() > 0)
    log_info_every_rank("data: epoch {}, DP rank {}: {}", loader_epoch_, rank_.dp_rank,
                        loader_->bad_samples().report());
}

void TrainingData::start_loader(int64_t step, const DataPosition& pos) {
  std::vector<std::vector<int64_t>> packs;
  const int64_t steps = steps_in_epoch(pos.epoch);
  const int64_t first = step - pos.step_in_epoch;
  for (int64_t s = pos.step_in_epoch; s < steps; ++s)
    for (int k = 0; k < micro_batches_; ++k) packs.push_back(pack(first + s, rank_.dp_rank, k));
  report_loader_skips();
  loader_.reset();
  loader_ = std::make_unique<data::PackLoader>(builder(), std::move(packs), loader_options());
  loader_epoch_ = pos.epoch;
}

data::LoaderOptions TrainingData::loader_options() const {
  data::LoaderOptions lo;
  lo.workers = workers_;
  lo.prefetch = std::max(4, 2 * micro_batches_);
  lo.parts = data::PackParts::for_stage(rank_.stage, rank_.stages);
  lo.pin_memory = pin_memory_;
  return lo;
}

double TrainingData::pack_build_seconds(int packs) {
  OMNIBAL_CHECK(packs >= 1, "pack_build_seconds: expected >= 1 packs, got ", packs);
  if (!loads_packs()) return 0.0;
  const data::PackParts parts = data::PackParts::for_stage(rank_.stage, rank_.stages);
  const int64_t steps = steps_in_epoch(0);
  const auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  std::vector<double> seconds;
  for (int i = 0; i <= packs; ++i) {  // pack 0 untimed
    const int64_t step = (i / micro_batches_) % steps;
    const std::vector<int64_t> ids = pack(step, rank_.dp_rank, i % micro_batches_);
    data::BadSampleCounts counts;
    const double t0 = cpu_now();
    const models::PackBatch built = builder().build(ids, parts, &counts);
    if (i > 0) seconds.push_back(cpu_now() - t0);
  }
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  return n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
}

std::unique_ptr<data::PackLoader> TrainingData::trial_loader(int64_t steps) {
  if (!loads_packs()) return nullptr;
  const int64_t in_epoch = steps_in_epoch(0);
  std::vector<std::vector<int64_t>> packs;
  for (int64_t s = 0; s < steps; ++s)
    for (int k = 0; k < micro_batches_; ++k) packs.push_back(pack(s % in_epoch, rank_.dp_rank, k));
  return std::make_unique<data::PackLoader>(builder(), std::move(packs), loader_options());
}

std::vector<models::PackBatch> TrainingData::next_packs(int64_t step) {
  const DataPosition pos = position(step);
  count_packer_skips(pos.epoch);
  if (!loads_packs()) return {};
  if (pos.epoch != loader_epoch_) start_loader(step, pos);
  std::vector<models::PackBatch> out;
  for (int k = 0; k < micro_batches_; ++k) {
    auto p = loader_->next();
    OMNIBAL_CHECK(p.has_value(), "data loader ran out of packs at step ", step);
    if (rank_.stage == 0) {  // every loading stage skips the same samples; count them once
      skipped_in_packs_ += static_cast<int64_t>(p->skipped.size());
      if (p->num_samples() == 0) {
        std::string why;
        for (const auto& e : p->skipped) why += "\n  " + e;
        log_info_every_rank(
            "data: step {}, DP rank {}, micro-batch {}: every sample of the pack "
            "was left out (data.on_bad_sample: skip); it runs as an empty "
            "micro-batch:{}",
            step, rank_.dp_rank, k, why);
      }
    }
    out.push_back(std::move(*p));
  }
  return out;
}

void TrainingData::stop_loading() {
  report_loader_skips();
  loader_.reset();
}

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

void TrainingData::log_plan(BalanceMethod method, int dp, const balance::PackTimeModel& time,
                            const std::string& time_description) {
  const auto& epoch0 = epoch_plan(0);
  const int m = micro_batches_;
  const size_t left_out = epoch0.packing.skipped.size();
  log_info(
      "data: {} samples{}, balance.method {}, {} packs, {} steps per epoch of dp {} x m {} "
      "packs, budgets Q_v {} Q_t {}, plan hash {:016x}",
      set_.table.size(),
      left_out ? fmt::format(" ({} planned; the packer leaves out {} over budget)",
                             set_.table.size() - left_out, left_out)
               : std::string(),
      choice_name(method), epoch0.packing.packs.size(), epoch0.plan.steps(), dp, m,
      epoch0.budgets.q_vit, epoch0.budgets.q_tok, plan_hash());
  const balance::BalanceMetrics dealt = dealt_metrics(0, &time);
  log_info("data: epoch 0 dealt to dp {} x m {}: Dist ViT {:.4f}, LLM {:.4f} (counts)", dp, m,
           dealt.dist_ratio_vit, dealt.dist_ratio_llm);
  log_info("data: cost Dist (predicted, {}): ranks {:.4f}, micro-batches {:.4f}", time_description,
           dealt.cost_dist_ratio_dp, dealt.cost_dist_ratio_mb);
  if (set_.bad_samples > 0)
    log_info("data: on_bad_sample skip: the start-up scan left out {} samples (not in the plan)",
             set_.bad_samples);
}

}  // namespace omnibal::train

#include "memory/stage_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace omnibal::memory {
namespace {

using partition::Partition;
using partition::UnitCostTable;

constexpr const char* kFormat = "omnibal.stage_plan.v1";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

RecomputeOptions recompute_options(const StagePlannerOptions& o) {
  RecomputeOptions ro;
  ro.memory = o.memory;
  ro.micro_batches = o.micro_batches;
  ro.budget_bytes = o.budget_bytes;
  return ro;
}

/// The table memory is predicted from.
const UnitCostTable& memory_table(const UnitCostTable& table, const StagePlannerOptions& o) {
  return o.memory_table ? *o.memory_table : table;
}

/// The recompute plan of `spec` on split `p` (adaptive without a budget: nothing recomputed).
RecomputePlan recompute_plan(const UnitCostTable& table, const Partition& p,
                             const RecomputeSpec& spec, const StagePlannerOptions& o) {
  const RecomputeOptions ro = recompute_options(o);
  const UnitCostTable& mt = memory_table(table, o);
  switch (spec.mode) {
    case RecomputeMode::kAdaptive:
      return o.budget_bytes > 0 ? plan_adaptive_recompute(mt, p, ro) : plan_no_recompute(mt, p, ro);
    case RecomputeMode::kNone:
    case RecomputeMode::kFull:
    case RecomputeMode::kPerStage: break;
  }
  return plan_with_flags(mt, p, fixed_recompute(spec, p, block_units(mt)).per_unit, ro);
}

std::vector<double> totals(const RecomputePlan& plan) {
  std::vector<double> out;
  for (const auto& m : plan.memory) out.push_back(m.total());
  return out;
}

/// The flags a round of the search assumes before it knows the split: full recomputation's
/// own, none's own, or (adaptive) first_round_recompute. Per-stage counts depend on the split,
/// so their search runs without recomputation.
RecomputeFlags search_flags(const UnitCostTable& table, const RecomputeSpec& spec) {
  const int n = static_cast<int>(table.units.size());
  switch (spec.mode) {
    case RecomputeMode::kFull: return RecomputeFlags::full(block_units(table));
    case RecomputeMode::kAdaptive: return first_round_recompute(table);
    case RecomputeMode::kNone:
    case RecomputeMode::kPerStage: break;
  }
  return RecomputeFlags::none(n);
}

/// BMP over `table`; for adaptive recomputation the search repeats with the pick's flags.
void plan_balanced(const UnitCostTable& table, const RecomputeSpec& spec,
                   const StagePlannerOptions& o, const CandidateJudge& judge, StagePlan& plan,
                   partition::PartitionSearchResult* last_search) {
  const bool adaptive = spec.mode == RecomputeMode::kAdaptive;
  // A split is admissible when the recompute mode can make it fit: adaptive can at most
  // recompute everything, so it fits when full recomputation fits.
  RecomputeSpec fit_spec = spec;
  if (adaptive) fit_spec.mode = RecomputeMode::kFull;
  RecomputeFlags flags = search_flags(table, spec);
  partition::PartitionSearchResult search;
  Partition pick;
  int rounds = 0;
  for (int round = 0; round < (adaptive ? 3 : 1); ++round) {
    auto in = search_input(table, flags, o);
    if (o.budget_bytes > 0 || spec.mode == RecomputeMode::kPerStage)
      in.fits = [&](const Partition& p) {
        try {
          return recompute_plan(table, p, fit_spec, o).all_fit();
        } catch (const Error&) {
          return false;  // per-stage counts that exceed this split's blocks
        }
      };
    search = partition::search_partitions(in);
    ++rounds;
    plan.candidates.clear();
    for (const auto& c : search.top) plan.candidates.push_back({c.partition, c.pipeline_s, {}});
    plan.chosen = judge ? judge(plan.candidates) : judge_by_pipeline_time(plan.candidates);
    OMNIBAL_CHECK(plan.chosen >= 0 && plan.chosen < static_cast<int>(plan.candidates.size()),
                  "stage plan: the candidate judge chose ", plan.chosen, " of ",
                  plan.candidates.size(), " candidates");
    const Partition p = plan.candidates[plan.chosen].partition;
    if (round > 0 && p == pick) break;
    pick = p;
    if (adaptive) flags = RecomputeFlags{recompute_plan(table, pick, spec, o).recompute};
  }
  plan.partition = pick;
  if (last_search) *last_search = search;
  plan.partition_source = fmt::format(
      "balanced: BMP on the {} table at {} tiles / {} tokens, radius {}, top {}, {} round{}; "
      "anchors exact {} greedy {} refined {}",
      table.source, table.load.tiles, table.load.tokens, o.radius, o.top_k, rounds,
      rounds > 1 ? "s" : "", search.exact_anchor.to_string(), search.greedy_anchor.to_string(),
      search.refined_anchor.to_string());
  if (plan.chosen != 0)
    plan.partition_source +=
        fmt::format("; {} chose candidate {}",
                    plan.candidates[plan.chosen].trial_s.empty() ? "the judge" : "timed trials",
                    plan.chosen);
}

std::vector<int> sizes_of(const nlohmann::json& j, const std::string& where) {
  OMNIBAL_CHECK(j.is_array(), where, ": expected a list of unit counts");
  std::vector<int> out;
  for (const auto& v : j) out.push_back(v.get<int>());
  return out;
}

template <class T> T get(const nlohmann::json& j, const char* key, const std::string& origin) {
  OMNIBAL_CHECK(j.is_object() && j.contains(key), origin, ": stage plan lacks '", key, "'");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(origin, ": stage plan key '", key, "' has the wrong type (", e.what(), ")");
  }
}

}  // namespace

std::vector<int> StagePlan::recomputed_per_stage() const {
  std::vector<int> out;
  for (int s = 0; s < partition.stages(); ++s)
    out.push_back(static_cast<int>(recomputed_units(s).size()));
  return out;
}

std::vector<std::string> StagePlan::recomputed_units(int stage) const {
  std::vector<std::string> out;
  for (int u = partition.begin(stage); u < partition.end(stage); ++u)
    if (recompute[u]) out.push_back(unit_names.at(u));
  return out;
}

std::string StagePlan::describe() const {
  std::string rc;
  for (int s = 0; s < partition.stages(); ++s) {
    const auto names = recomputed_units(s);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    rc += fmt::format("{}stage {}: {}", s ? "; " : "", s, names.empty() ? "none" : list);
    if (s < static_cast<int>(predicted_bytes.size()))
      rc += fmt::format(" ({:.1f} MiB predicted)", predicted_bytes[s] / (1 << 20));
  }
  return fmt::format("split {}, recompute {{{}}}", partition.to_string(), rc);
}

std::string StagePlan::describe_stages() const {
  std::string out;
  for (int s = 0; s < stages(); ++s)
    out += fmt::format("{}stage {}: {}..{} ({} units, {} recomputed)", s ? ", " : "", s,
                       unit_names.at(begin(s)), unit_names.at(end(s) - 1), end(s) - begin(s),
                       recompute.count(begin(s), end(s)));
  return out;
}

int judge_by_pipeline_time(std::vector<PlanCandidate>& candidates) {
  OMNIBAL_CHECK(!candidates.empty(), "stage plan: no candidate to judge");
  return 0;  // the search ranks by pipeline_s, best first
}

RecomputeFlags first_round_recompute(const UnitCostTable& table) {
  return RecomputeFlags::full(block_units(table));
}

partition::PartitionSearchInput search_input(const UnitCostTable& table,
                                             const RecomputeFlags& recompute,
                                             const StagePlannerOptions& o) {
  OMNIBAL_CHECK(recompute.units() == static_cast<int>(table.units.size()),
                "stage plan: ", recompute.units(), " recompute flags for a cost table of ",
                table.units.size(), " units");
  partition::PartitionSearchInput in;
  const bool tp_comm = table.tp > 1 && o.tp_link.bandwidth > 0;
  for (size_t u = 0; u < table.units.size(); ++u) {
    const auto& c = table.units[u];
    const bool flag = recompute[static_cast<int>(u)];
    const bool rc = flag && c.recomputable() && c.trainable;
    const double tp_f = tp_comm ? partition::tp_forward_seconds(c, table.tp, o.tp_link) : 0.0;
    const double tp_b =
        tp_comm ? partition::tp_backward_seconds(c, flag, table.tp, o.tp_link) : 0.0;
    in.unit_seconds.push_back(c.forward_s + c.backward_s + (rc ? c.forward_s : 0.0) + tp_f + tp_b);
    in.unit_forward_s.push_back(c.forward_s + tp_f);
    in.output_bytes.push_back(c.output_bytes);
  }
  in.link_bandwidth = o.link_bandwidth;
  in.stages = o.stages;
  in.radius = o.radius;
  in.top_k = o.top_k;
  in.micro_batches = o.micro_batches;
  return in;
}

void plan_recompute_for(const UnitCostTable& table, const RecomputeSpec& spec,
                        const StagePlannerOptions& o, StagePlan& plan) {
  const RecomputePlan rp = recompute_plan(table, plan.partition, spec, o);
  const RecomputeOptions ro = recompute_options(o);
  const UnitCostTable& mt = memory_table(table, o);
  plan.recompute = RecomputeFlags{rp.recompute};
  plan.budget_bytes = o.budget_bytes;
  plan.predicted_bytes = totals(rp);
  plan.none_bytes = totals(plan_no_recompute(mt, plan.partition, ro));
  plan.full_bytes = totals(plan_full_recompute(mt, plan.partition, ro));
  if (spec.mode == RecomputeMode::kAdaptive) {
    for (int s = 0; s < plan.partition.stages(); ++s)
      OMNIBAL_CHECK(rp.fits[s], "memory.budget_gb: ", o.budget_bytes / kGiB,
                    " GiB is too small: ", "stage ", s, " of split ", plan.partition.to_string(),
                    " needs ", plan.full_bytes[s] / kGiB, " GiB even with every block recomputed (",
                    plan.none_bytes[s] / kGiB, " GiB without); raise memory.budget_gb or use ",
                    "more pipeline stages");
    plan.recompute_source =
        o.budget_bytes > 0 ? fmt::format(
                                 "adaptive: knapsack per stage, budget {:.3f} GiB, m {}, recompute "
                                 "{:.2f} ms of forward per micro-batch",
                                 o.budget_bytes / kGiB, o.micro_batches, 1e3 * rp.recompute_s)
                           : std::string("adaptive: no memory budget, nothing recomputed");
  } else {
    plan.recompute_source =
        "config: " + (spec.mode == RecomputeMode::kPerStage ? std::string("per-stage counts")
                                                            : choice_name(spec.mode));
  }
}

StagePlan plan_stages(const UnitCostTable& table, const PartitionSpec& part,
                      const RecomputeSpec& recompute, const StagePlannerOptions& o,
                      const CandidateJudge& judge, partition::PartitionSearchResult* last_search) {
  const int n = static_cast<int>(table.units.size());
  OMNIBAL_CHECK(static_cast<int>(o.unit_names.size()) == n, "stage plan: ", o.unit_names.size(),
                " unit names for a cost table of ", n, " units");
  OMNIBAL_CHECK(o.stages >= 1 && o.stages <= n, "parallel.pp: ", o.stages,
                " pipeline stages but the model has ", n,
                " pipeline units; use parallel.pp <= ", n);
  OMNIBAL_CHECK(!o.memory_table || o.memory_table->units.size() == table.units.size(),
                "stage plan: the memory table has ",
                o.memory_table ? o.memory_table->units.size() : 0, " units, the cost table ", n);
  StagePlan plan;
  plan.model = table.model;
  plan.micro_batches = o.micro_batches;
  plan.unit_names = o.unit_names;
  plan.budget_bytes = o.budget_bytes;
  if (part.method == PartitionMethod::kBalanced) {
    plan_balanced(table, recompute, o, judge, plan, last_search);
  } else {
    std::vector<double> bytes;
    for (const auto& u : table.units) bytes.push_back(u.parameter_bytes);
    plan.partition = fixed_split(part, bytes, o.stages);
    plan.partition_source = "config: " + choice_name(part.method);
  }
  plan_recompute_for(table, recompute, o, plan);
  return plan;
}

nlohmann::json stage_plan_json(const StagePlan& p) {
  nlohmann::json rc = nlohmann::json::array(), cands = nlohmann::json::array();
  for (int u = 0; u < p.recompute.units(); ++u)
    if (p.recompute[u]) rc.push_back(p.unit_names.at(u));
  for (const auto& c : p.candidates)
    cands.push_back(
        {{"partition", c.partition.sizes}, {"pipeline_s", c.pipeline_s}, {"trial_s", c.trial_s}});
  return {{"format", kFormat},
          {"model", p.model},
          {"micro_batches", p.micro_batches},
          {"partition", p.partition.sizes},
          {"units", p.unit_names},
          {"recompute", rc},
          {"partition_source", p.partition_source},
          {"recompute_source", p.recompute_source},
          {"budget_bytes", p.budget_bytes},
          {"predicted_bytes", p.predicted_bytes},
          {"none_bytes", p.none_bytes},
          {"full_bytes", p.full_bytes},
          {"candidates", cands},
          {"chosen", p.chosen},
          {"hash", fmt::format("{:016x}", stage_plan_hash(p))}};
}

StagePlan parse_stage_plan(const nlohmann::json& j, const std::string& origin) {
  const auto format = get<std::string>(j, "format", origin);
  OMNIBAL_CHECK(format == kFormat, origin, ": stage plan format '", format, "', expected '",
                kFormat, "'");
  StagePlan p;
  p.model = get<std::string>(j, "model", origin);
  p.micro_batches = get<int>(j, "micro_batches", origin);
  p.partition = Partition{sizes_of(j.at("partition"), origin + ": partition")};
  p.unit_names = get<std::vector<std::string>>(j, "units", origin);
  OMNIBAL_CHECK(p.partition.units() == static_cast<int>(p.unit_names.size()), origin,
                ": the split ", p.partition.to_string(), " does not cover the ",
                p.unit_names.size(), " units");
  p.recompute = RecomputeFlags::none(static_cast<int>(p.unit_names.size()));
  for (const auto& name : get<std::vector<std::string>>(j, "recompute", origin)) {
    const auto it = std::find(p.unit_names.begin(), p.unit_names.end(), name);
    OMNIBAL_CHECK(it != p.unit_names.end(), origin, ": recomputed unit '", name, "' is not a unit");
    p.recompute.per_unit[it - p.unit_names.begin()] = true;
  }
  p.partition_source = get<std::string>(j, "partition_source", origin);
  p.recompute_source = get<std::string>(j, "recompute_source", origin);
  p.budget_bytes = get<double>(j, "budget_bytes", origin);
  p.predicted_bytes = get<std::vector<double>>(j, "predicted_bytes", origin);
  p.none_bytes = get<std::vector<double>>(j, "none_bytes", origin);
  p.full_bytes = get<std::vector<double>>(j, "full_bytes", origin);
  for (const auto& c : get<nlohmann::json>(j, "candidates", origin))
    p.candidates.push_back({Partition{sizes_of(c.at("partition"), origin + ": candidates")},
                            c.at("pipeline_s").get<double>(),
                            c.at("trial_s").get<std::vector<double>>()});
  p.chosen = get<int>(j, "chosen", origin);
  return p;
}

uint64_t stage_plan_hash(const StagePlan& p) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  mix(p.partition.sizes.size());
  for (int s : p.partition.sizes) mix(static_cast<uint64_t>(s));
  mix(p.recompute.per_unit.size());
  for (bool b : p.recompute.per_unit) mix(b ? 1 : 0);
  return h;
}

}  // namespace omnibal::memory

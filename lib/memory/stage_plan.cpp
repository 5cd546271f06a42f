#include "memory/stage_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "partition/pick_margin.h"
#include "schedule/schedules.h"

namespace omnibal::memory {
namespace {

using partition::Partition;
using partition::UnitCostTable;

constexpr const char* kFormat = "omnibal.stage_plan.v1";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// v chunks per rank of a concrete schedule.
int chunks_per_rank(const StagePlannerOptions& o) {
  return schedule::chunks_per_rank(o.schedule, o.virtual_stages);
}

RecomputeOptions recompute_options(const StagePlannerOptions& o) {
  RecomputeOptions ro;
  ro.memory = o.memory;
  ro.micro_batches = o.micro_batches;
  ro.budget_bytes = o.budget_bytes;
  ro.schedule = o.schedule;
  ro.virtual_stages = chunks_per_rank(o);
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

/// The candidates' indices, most preferred first, by nothing that is timed: the fewest
/// parameter bytes on the fullest pipeline rank (chunk k on its rank under the candidate's
/// schedule: k % P, or ZB-V's V), then the split's unit
/// counts in lexicographic order.
std::vector<int> split_preference(const std::vector<PlanCandidate>& c, const UnitCostTable& table,
                                  int stages) {
  std::vector<double> fullest;
  for (const auto& cand : c) {
    std::vector<double> rank(stages, 0.0);
    for (int k = 0; k < cand.partition.stages(); ++k)
      for (int u = cand.partition.begin(k); u < cand.partition.end(k); ++u)
        rank[schedule::stage_of_virtual(k, stages, schedule::chunk_layout(cand.schedule))] +=
            table.units.at(u).parameter_bytes;
    fullest.push_back(*std::max_element(rank.begin(), rank.end()));
  }
  std::vector<int> order(c.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (fullest[a] != fullest[b]) return fullest[a] < fullest[b];
    return c[a].partition.sizes < c[b].partition.sizes;
  });
  return order;
}

/// Moves the margin's pick among `c` (partition/pick_margin.h) to the front, the others keeping
/// their order; returns what the margin decided ("" when it kept the fastest or is 0).
std::string put_margin_pick_first(std::vector<PlanCandidate>& c, const UnitCostTable& table,
                                  const StagePlannerOptions& o) {
  if (o.pick_margin <= 0 || c.size() < 2) return "";
  std::vector<double> seconds;
  std::vector<std::string> names;
  for (const auto& cand : c) {
    seconds.push_back(cand.pipeline_s);
    names.push_back(cand.partition.to_string());
  }
  const int pick =
      partition::pick_within_margin(seconds, split_preference(c, table, o.stages), o.pick_margin);
  const std::string note = partition::margin_note(seconds, names, pick, o.pick_margin);
  std::rotate(c.begin(), c.begin() + pick, c.begin() + pick + 1);
  return note;
}

/// The memory-aware search's last step: when its rounds picked different splits, `judge` (or
/// the pipeline time, each split timed under its own recompute plan) decides among those
/// picks, which become the plan's candidates. A later round is not always better: each ranks
/// its candidates under the previous pick's flags, and a judge that measures (the ablation's
/// simulation, timed trials) can prefer an earlier round's pick.
void judge_round_picks(const UnitCostTable& table, const RecomputeSpec& spec,
                       const StagePlannerOptions& o, const CandidateJudge& judge,
                       const std::vector<Partition>& picks, StagePlan& plan) {
  std::vector<PlanCandidate> c;
  for (const Partition& p : picks) {
    const RecomputeFlags own{recompute_plan(table, p, spec, o).recompute};
    c.push_back({p,
                 partition::pipeline_seconds(p, search_input(table, own, o)),
                 {},
                 o.schedule,
                 chunks_per_rank(o)});
  }
  const int chosen = judge ? judge(c) : judge_by_pipeline_time(c);
  OMNIBAL_CHECK(chosen >= 0 && chosen < static_cast<int>(c.size()), "stage plan: the candidate ",
                "judge chose ", chosen, " of the ", c.size(), " rounds' picks");
  plan.candidates = std::move(c);
  plan.chosen = chosen;
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
  std::vector<Partition> picks;  // each round's, distinct (a repeated pick ends the search)
  std::string margin;            // what the pick margin decided in the last round
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
    for (const auto& c : search.top)
      plan.candidates.push_back({c.partition, c.pipeline_s, {}, o.schedule, chunks_per_rank(o)});
    margin = put_margin_pick_first(plan.candidates, table, o);
    plan.chosen = judge ? judge(plan.candidates) : judge_by_pipeline_time(plan.candidates);
    OMNIBAL_CHECK(plan.chosen >= 0 && plan.chosen < static_cast<int>(plan.candidates.size()),
                  "stage plan: the candidate judge chose ", plan.chosen, " of ",
                  plan.candidates.size(), " candidates");
    const Partition p = plan.candidates[plan.chosen].partition;
    if (round > 0 && p == pick) break;
    pick = p;
    if (std::find(picks.begin(), picks.end(), p) == picks.end()) picks.push_back(p);
    if (adaptive) flags = RecomputeFlags{recompute_plan(table, pick, spec, o).recompute};
  }
  if (picks.size() > 1) {
    judge_round_picks(table, spec, o, judge, picks, plan);
    pick = plan.candidates[plan.chosen].partition;
  }
  plan.partition = pick;
  if (last_search) *last_search = search;
  plan.partition_source = fmt::format(
      "balanced: BMP on the {} table at {} tiles / {} tokens, {}{}, radius {}, top {}, {} "
      "round{}; anchors exact {} greedy {} refined {}",
      table.source, table.load.tiles, table.load.tokens, choice_name(o.schedule),
      chunks_per_rank(o) > 1 ? fmt::format(" v {}", chunks_per_rank(o)) : std::string(), o.radius,
      o.top_k, rounds, rounds > 1 ? "s" : "", search.exact_anchor.to_string(),
      search.greedy_anchor.to_string(), search.refined_anchor.to_string());
  if (picks.size() > 1)
    plan.partition_source +=
        fmt::format("; the rounds' {} picks judged again, each under its own recomputation",
                    picks.size());
  if (o.pick_margin > 0)
    plan.partition_source +=
        fmt::format("; pick margin {:.1f} % (the profile's spread){}", 100.0 * o.pick_margin,
                    margin.empty() ? std::string() : ": " + margin);
  if (!o.host_micro_batch_s.empty()) {
    std::string ms;
    for (double h : o.host_micro_batch_s)
      ms += fmt::format("{}{:.1f}", ms.empty() ? "" : ", ", 1e3 * h);
    plan.partition_source += "; host ms per micro-batch by rank [" + ms + "]";
  }
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

std::vector<int> StagePlan::chunks_of(int rank) const {
  OMNIBAL_CHECK(rank >= 0 && rank < stages(), "stage plan: rank ", rank, " of ", stages());
  std::vector<int> out;
  for (int c = 0; c < virtual_stages; ++c)
    out.push_back(
        schedule::virtual_stage(c, rank, stages(), schedule::chunk_layout(this->schedule)));
  return out;
}

std::vector<int> StagePlan::recomputed_per_stage() const {
  std::vector<int> out;
  for (int s = 0; s < partition.stages(); ++s)
    out.push_back(static_cast<int>(recomputed_units(s).size()));
  return out;
}

std::vector<std::string> StagePlan::recomputed_units(int k) const {
  std::vector<std::string> out;
  for (int u = partition.begin(k); u < partition.end(k); ++u)
    if (recompute[u]) out.push_back(unit_names.at(u));
  return out;
}

std::string StagePlan::describe() const {
  std::string rc;
  for (int s = 0; s < partition.stages(); ++s) {
    const auto names = recomputed_units(s);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    rc += fmt::format("{}{} {}: {}", s ? "; " : "", virtual_stages > 1 ? "chunk" : "stage", s,
                      names.empty() ? "none" : list);
    // Memory is per rank: printed with the rank's first chunk.
    if (s < stages() && s < static_cast<int>(predicted_bytes.size()))
      rc += fmt::format(" ({:.1f} MiB predicted{})", predicted_bytes[s] / (1 << 20),
                        virtual_stages > 1 ? fmt::format(" for rank {}", s) : std::string());
  }
  const std::string sched =
      schedule == PipelineSchedule::k1F1B && virtual_stages == 1
          ? std::string()
          : fmt::format(", schedule {}{}", choice_name(schedule),
                        virtual_stages > 1 ? fmt::format(" v {}", virtual_stages) : std::string());
  return fmt::format("split {}{}, recompute {{{}}}", partition.to_string(), sched, rc);
}

std::string StagePlan::describe_stages() const {
  std::string out;
  for (int s = 0; s < chunks(); ++s) {
    const std::string rank =
        virtual_stages > 1
            ? fmt::format(" (rank {})",
                          schedule::stage_of_virtual(s, stages(),
                                                     schedule::chunk_layout(this->schedule)))
            : std::string();
    out += fmt::format("{}{} {}{}: {}..{} ({} units, {} recomputed)", s ? ", " : "",
                       virtual_stages > 1 ? "chunk" : "stage", s, rank, unit_names.at(begin(s)),
                       unit_names.at(end(s) - 1), end(s) - begin(s),
                       recompute.count(begin(s), end(s)));
  }
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
    const bool rc = c.checkpointed(flag);
    const double tp_f = tp_comm ? partition::tp_forward_seconds(c, table.tp, o.tp_link) : 0.0;
    const double tp_b =
        tp_comm ? partition::tp_backward_seconds(c, flag, table.tp, o.tp_link) : 0.0;
    const double forward = rc ? c.checkpointed_forward() : c.forward_s;
    in.unit_seconds.push_back(forward + (rc ? c.checkpointed_backward() : c.backward_s) + tp_f +
                              tp_b);
    in.unit_forward_s.push_back(forward + tp_f);
    in.output_bytes.push_back(c.output_bytes);
    // ZB-V runs a recomputed block's W inside its B (schedule/README.md), as the simulator does.
    const bool w_in_b = rc && o.schedule == PipelineSchedule::kZbV;
    in.unit_weight_s.push_back(w_in_b ? 0.0 : c.weight_backward_s());
  }
  OMNIBAL_CHECK(o.schedule != PipelineSchedule::kAuto,
                "stage plan: search inputs need a concrete schedule, not auto");
  in.link_bandwidth = o.link_bandwidth;
  in.stages = o.stages;
  in.schedule = o.schedule;
  in.virtual_stages = chunks_per_rank(o);
  in.radius = o.radius;
  in.top_k = o.top_k;
  in.micro_batches = o.micro_batches;
  in.rank_micro_batch_s = o.host_micro_batch_s;
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
  plan.pipeline_s =
      partition::pipeline_seconds(plan.partition, search_input(table, plan.recompute, o));
  if (spec.mode == RecomputeMode::kAdaptive) {
    for (int s = 0; s < static_cast<int>(rp.fits.size()); ++s)
      OMNIBAL_CHECK(rp.fits[s], "memory.budget_gb: ", o.budget_bytes / kGiB,
                    " GiB is too small: ", "stage ", s, " of split ", plan.partition.to_string(),
                    " (", choice_name(o.schedule), ")", " needs ", plan.full_bytes[s] / kGiB,
                    " GiB even with every block recomputed (", plan.none_bytes[s] / kGiB,
                    " GiB without); raise memory.budget_gb (omnibal-plan: --budget-gb) or use ",
                    "more pipeline stages");
    plan.recompute_source =
        o.budget_bytes > 0 ? fmt::format(
                                 "adaptive: knapsack per stage, budget {:.3f} GiB, m {}, recompute "
                                 "cost {:.2f} ms per micro-batch",
                                 o.budget_bytes / kGiB, o.micro_batches, 1e3 * rp.recompute_s)
                           : std::string("adaptive: no memory budget, nothing recomputed");
  } else {
    plan.recompute_source =
        "config: " + (spec.mode == RecomputeMode::kPerStage ? std::string("per-stage counts")
                                                            : choice_name(spec.mode));
  }
}

namespace {

/// plan_stages for one concrete schedule (o.schedule != kAuto).
StagePlan plan_one_schedule(const UnitCostTable& table, const PartitionSpec& part,
                            const RecomputeSpec& recompute, const StagePlannerOptions& o,
                            const CandidateJudge& judge,
                            partition::PartitionSearchResult* last_search) {
  const int n = static_cast<int>(table.units.size());
  const int v = chunks_per_rank(o);
  if (o.schedule == PipelineSchedule::kInterleaved) {
    OMNIBAL_CHECK(o.virtual_stages >= 2, "parallel.virtual_stages: interleaved needs at least 2 ",
                  "model chunks per pipeline rank, got ", o.virtual_stages);
    OMNIBAL_CHECK(o.stages * v <= n, "parallel.virtual_stages: interleaved with parallel.pp ",
                  o.stages, " x ", v, " chunks needs ", o.stages * v,
                  " pipeline units, the model has ", n, "; use fewer virtual stages");
    OMNIBAL_CHECK(o.micro_batches % o.stages == 0, "parallel.micro_batches: interleaved 1F1B ",
                  "needs a multiple of parallel.pp (", o.stages, "), got ", o.micro_batches);
  }
  StagePlan plan;
  plan.model = table.model;
  plan.micro_batches = o.micro_batches;
  plan.schedule = o.schedule;
  plan.virtual_stages = v;
  plan.unit_names = o.unit_names;
  plan.budget_bytes = o.budget_bytes;
  if (part.method == PartitionMethod::kBalanced) {
    plan_balanced(table, recompute, o, judge, plan, last_search);
  } else {
    std::vector<double> bytes;
    for (const auto& u : table.units) bytes.push_back(u.parameter_bytes);
    plan.partition = fixed_split(part, bytes, o.stages * v);
    plan.partition_source = "config: " + choice_name(part.method);
  }
  plan_recompute_for(table, recompute, o, plan);
  return plan;
}

bool plan_fits(const StagePlan& p) {
  if (p.budget_bytes <= 0) return true;
  return std::all_of(p.predicted_bytes.begin(), p.predicted_bytes.end(),
                     [&](double b) { return b <= p.budget_bytes; });
}

}  // namespace

std::vector<std::pair<PipelineSchedule, int>> auto_schedule_choices(int stages, int micro_batches,
                                                                    int virtual_stages, int units,
                                                                    bool zb_v) {
  std::vector<std::pair<PipelineSchedule, int>> out = {{PipelineSchedule::k1F1B, 1},
                                                       {PipelineSchedule::kZbH1, 1}};
  const int v = virtual_stages >= 2 ? virtual_stages : 2;
  if (stages > 1 && micro_batches % stages == 0 && stages * v <= units)
    out.push_back({PipelineSchedule::kInterleaved, v});
  if (zb_v && stages > 1 && 2 * stages <= units) out.push_back({PipelineSchedule::kZbV, 2});
  return out;
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
  if (o.schedule != PipelineSchedule::kAuto)
    return plan_one_schedule(table, part, recompute, o, judge, last_search);
  // auto: plan each schedule, keep the fastest predicted step that fits (within the pick
  // margin: the first in auto's order).
  std::vector<StagePlan> fitting;
  std::vector<partition::PartitionSearchResult> searches;
  std::vector<std::string> names;
  std::string compared, refused;
  for (const auto& [kind, v] :
       auto_schedule_choices(o.stages, o.micro_batches, o.virtual_stages, n, o.auto_zb_v)) {
    StagePlannerOptions one = o;
    one.schedule = kind;
    one.virtual_stages = v;
    const std::string name = choice_name(kind) + (v > 1 ? fmt::format(" v {}", v) : std::string());
    partition::PartitionSearchResult search;
    try {
      StagePlan p = plan_one_schedule(table, part, recompute, one, judge, &search);
      if (!plan_fits(p)) {
        refused += fmt::format("{}{}: over the memory budget", refused.empty() ? "" : "; ", name);
        continue;
      }
      compared += fmt::format("{}{} {:.4f} s", compared.empty() ? "" : ", ", name, p.pipeline_s);
      fitting.push_back(std::move(p));
      searches.push_back(search);
      names.push_back(name);
    } catch (const Error& e) {
      refused += fmt::format("{}{}: {}", refused.empty() ? "" : "; ", name, e.what());
    }
  }
  OMNIBAL_CHECK(!fitting.empty(), "parallel.schedule: auto found no schedule that fits (", refused,
                ")");
  std::vector<double> seconds;
  for (const auto& p : fitting) seconds.push_back(p.pipeline_s);
  std::vector<int> order(fitting.size());
  std::iota(order.begin(), order.end(), 0);
  const int pick = partition::pick_within_margin(seconds, order, o.pick_margin);
  const std::string note = partition::margin_note(seconds, names, pick, o.pick_margin);
  StagePlan& best = fitting[pick];
  best.partition_source =
      fmt::format("auto: {} (pipeline_s {}{}{}{}); ", choice_name(best.schedule), compared,
                  note.empty() ? "" : "; pick margin: ", note,
                  refused.empty() ? std::string() : "; not fitting: " + refused) +
      best.partition_source;
  if (last_search && part.method == PartitionMethod::kBalanced) *last_search = searches[pick];
  return best;
}

nlohmann::json stage_plan_json(const StagePlan& p) {
  nlohmann::json rc = nlohmann::json::array(), cands = nlohmann::json::array();
  for (int u = 0; u < p.recompute.units(); ++u)
    if (p.recompute[u]) rc.push_back(p.unit_names.at(u));
  for (const auto& c : p.candidates)
    cands.push_back({{"partition", c.partition.sizes},
                     {"pipeline_s", c.pipeline_s},
                     {"trial_s", c.trial_s},
                     {"schedule", choice_name(c.schedule)},
                     {"virtual_stages", c.virtual_stages}});
  return {{"format", kFormat},
          {"model", p.model},
          {"micro_batches", p.micro_batches},
          {"schedule", choice_name(p.schedule)},
          {"virtual_stages", p.virtual_stages},
          {"pipeline_s", p.pipeline_s},
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
  // Plans written before schedules: 1F1B, one chunk per rank.
  if (j.contains("schedule"))
    p.schedule = parse_choice<PipelineSchedule>(get<std::string>(j, "schedule", origin),
                                                origin + ": schedule");
  OMNIBAL_CHECK(p.schedule != PipelineSchedule::kAuto, origin,
                ": a stage plan records the schedule auto picked, not 'auto'");
  if (j.contains("virtual_stages")) p.virtual_stages = get<int>(j, "virtual_stages", origin);
  OMNIBAL_CHECK(p.virtual_stages == schedule::chunks_per_rank(p.schedule, p.virtual_stages) &&
                    p.virtual_stages >= 1,
                origin, ": virtual_stages ", p.virtual_stages, " under schedule ",
                choice_name(p.schedule), " (expected 1 unless interleaved)");
  if (j.contains("pipeline_s")) p.pipeline_s = get<double>(j, "pipeline_s", origin);
  p.partition = Partition{sizes_of(j.at("partition"), origin + ": partition")};
  OMNIBAL_CHECK(p.partition.stages() % p.virtual_stages == 0, origin, ": the split ",
                p.partition.to_string(), " does not divide into ranks of ", p.virtual_stages,
                " chunks");
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
  for (const auto& c : get<nlohmann::json>(j, "candidates", origin)) {
    PlanCandidate pc{Partition{sizes_of(c.at("partition"), origin + ": candidates")},
                     c.at("pipeline_s").get<double>(), c.at("trial_s").get<std::vector<double>>(),
                     p.schedule, p.virtual_stages};
    if (c.contains("schedule"))
      pc.schedule = parse_choice<PipelineSchedule>(c.at("schedule").get<std::string>(),
                                                   origin + ": candidates: schedule");
    if (c.contains("virtual_stages")) pc.virtual_stages = c.at("virtual_stages").get<int>();
    p.candidates.push_back(std::move(pc));
  }
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
  if (p.schedule != PipelineSchedule::k1F1B || p.virtual_stages != 1) {  // old hashes unchanged
    mix(static_cast<uint64_t>(p.schedule) + 1);
    mix(static_cast<uint64_t>(p.virtual_stages));
  }
  return h;
}

}  // namespace omnibal::memory

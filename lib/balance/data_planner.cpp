#include "balance/data_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <numeric>

#include "balance/baseline_packers.h"
#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {
namespace {

constexpr Method kAllMethods[] = {Method::kIsf,         Method::kIsfRandomPlacement,
                                  Method::kMultiSource, Method::kRandom,
                                  Method::kLengthGroup, Method::kBestFit};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

SearchOptions search_options(const PlannerOptions& o) {
  SearchOptions s;
  s.dp = o.dp;
  s.micro_batches = o.micro_batches;
  s.samples_per_pack = o.samples_per_pack;
  s.iterations = o.iterations;
  s.seed = o.seed;
  s.max_pack_tokens = o.max_seq_len;
  return s;
}

// Resolves the budgets (searching when unset) and records the search in `out`.
IsfBudgets resolve_budgets(const SampleTable& table, const std::vector<uint32_t>& ids,
                           const PlannerOptions& o, MethodResult& out) {
  if (!budgets_unset(o.budgets)) return o.budgets;
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult s = search_budgets(table, ids, search_options(o));
  out.search_seconds += seconds_since(t0);
  const IsfBudgets b = s.budgets();
  if (!out.search) out.search = std::move(s);
  return b;
}

IsfOptions isf_options(const PlannerOptions& o, const IsfBudgets& b) {
  return IsfOptions{b, o.iterations, o.seed, o.on_bad_sample};
}

// ISF per dataset with per-dataset budgets; `pack_source` records each pack's dataset.
void pack_multi_source(const SampleTable& table, const PlannerOptions& o, MethodResult& out,
                       std::vector<uint32_t>& pack_source) {
  std::vector<std::vector<uint32_t>> by_source(table.datasets.size());
  for (uint32_t i = 0; i < table.size(); ++i) by_source[table.dataset[i]].push_back(i);
  for (uint32_t s = 0; s < by_source.size(); ++s) {
    if (by_source[s].empty()) continue;
    const IsfBudgets b = resolve_budgets(table, by_source[s], o, out);
    out.source_budgets.push_back(b);
    PackResult r = IsfPacker(isf_options(o, b)).pack(table, by_source[s]);
    out.packing.packs.append(r.packs);
    pack_source.resize(out.packing.packs.size(), s);
    out.packing.skipped.insert(out.packing.skipped.end(), r.skipped.begin(), r.skipped.end());
    out.packing.unaccepted_packs += r.unaccepted_packs;
  }
}

// Runs the packer of `method` into out.packing (and pack_source for multi-source).
void pack(const SampleTable& table, Method method, const PlannerOptions& o, MethodResult& out,
          std::vector<uint32_t>& pack_source) {
  std::vector<uint32_t> all(table.size());
  std::iota(all.begin(), all.end(), 0u);
  switch (method) {
    case Method::kIsf:
    case Method::kIsfRandomPlacement:
      out.budgets = resolve_budgets(table, all, o, out);
      out.packing = IsfPacker(isf_options(o, out.budgets)).pack(table);
      return;
    case Method::kMultiSource: return pack_multi_source(table, o, out, pack_source);
    case Method::kRandom:
      out.packing =
          random_micro_batches(table, o.samples_per_pack, o.seed, o.max_seq_len, o.on_bad_sample);
      return;
    case Method::kLengthGroup:
      out.packing = length_grouped_micro_batches(table, o.samples_per_pack, o.dp, o.micro_batches,
                                                 o.seed, o.max_seq_len, o.on_bad_sample);
      return;
    case Method::kBestFit:
      out.budgets.q_tok =
          budgets_unset(o.budgets) ? best_fit_budget(table, o.samples_per_pack) : o.budgets.q_tok;
      if (o.max_seq_len > 0) out.budgets.q_tok = std::min(out.budgets.q_tok, o.max_seq_len);
      out.packing = best_fit_packing(table, out.budgets.q_tok, o.on_bad_sample, o.seed);
      return;
  }
}

// Puts the previous epoch's tail in front of this epoch's packs (carried packs run first).
void merge_carry_in(const SampleTable& table, const PackList& carry_in, MethodResult& out,
                    std::vector<uint32_t>& pack_source) {
  if (carry_in.size() == 0) return;
  PackList merged(out.packing.packs.layout());
  merged.append(carry_in);
  merged.append(out.packing.packs);
  out.packing.packs = std::move(merged);
  if (pack_source.empty()) return;
  std::vector<uint32_t> source;
  for (size_t p = 0; p < carry_in.size(); ++p) source.push_back(table.dataset[*carry_in.begin(p)]);
  source.insert(source.end(), pack_source.begin(), pack_source.end());
  pack_source = std::move(source);
}

// Places out.packing.packs with the placement of `method`.
void place(Method method, const PlannerOptions& o, const std::vector<uint32_t>& pack_source,
           MethodResult& out) {
  const PackList& packs = out.packing.packs;
  const PackTimeModel* time = o.place_by == PlaceBy::kTime ? &*o.time_model : nullptr;
  if (method == Method::kIsf) {
    out.plan = place_load_grouped(packs, o.dp, o.micro_batches, o.seed, time, &out.placement);
  } else if (method == Method::kMultiSource) {
    out.plan =
        place_by_source(packs, pack_source, o.dp, o.micro_batches, o.seed, time, &out.placement);
  } else if (method == Method::kIsfRandomPlacement) {  // the reference: random order, cut
    std::vector<uint32_t> order(packs.size());
    std::iota(order.begin(), order.end(), 0u);
    Rng rng(o.seed);
    rng.shuffle(order);
    out.plan = place_in_order(order.size(), o.dp, o.micro_batches);
    for (auto& p : out.plan.slots) p = order[p];
    for (auto& p : out.plan.carried) p = order[p];
  } else {  // baselines carry their own order
    out.plan = place_in_order(packs.size(), o.dp, o.micro_batches);
  }
}

}  // namespace

std::vector<Method> all_methods() { return {std::begin(kAllMethods), std::end(kAllMethods)}; }

Method parse_method(const std::string& name, const std::string& key) {
  for (Method m : kAllMethods)
    if (name == method_name(m)) return m;
  OMNIBAL_FAIL(key, ": expected isf | isf-random-placement | multi-source | random | ",
               "length-group | best-fit, got '", name, "'");
}

int64_t best_fit_budget(const SampleTable& table, int samples_per_pack) {
  const double mean = table.mean_load()[kTokens];
  const auto target =
      static_cast<int64_t>(std::ceil((samples_per_pack + 0.5) * mean / 256.0)) * 256;
  return std::max<int64_t>(target, table.max_load()[kTokens]);
}

PlannerOptions planner_options(const ParallelConfig& parallel, const BalanceConfig& balance,
                               const DataConfig& data) {
  PlannerOptions o;
  o.dp = parallel.dp;
  o.micro_batches = parallel.micro_batches;
  o.samples_per_pack = balance.samples_per_pack;
  o.budgets = {balance.q_vit, balance.q_tok,
               balance.q_tok_thresh ? balance.q_tok_thresh
                                    : (balance.q_tok > 0 ? balance.q_tok - 128 : 0)};
  o.iterations = balance.iterations;
  o.seed = balance.seed;
  o.on_bad_sample = data.on_bad_sample;
  o.place_by = balance.place_by;
  return o;
}

void check_token_cap(const PlannerOptions& o) {
  OMNIBAL_CHECK(o.max_seq_len >= 0, "planner: negative token cap ", o.max_seq_len);
  if (o.max_seq_len == 0 || o.budgets.q_tok <= o.max_seq_len) return;
  OMNIBAL_FAIL("balance.q_tok ", o.budgets.q_tok, " is over the model's llm.max_seq_len ",
               o.max_seq_len, o.max_seq_len_origin.empty() ? "" : " (" + o.max_seq_len_origin + ")",
               ": a pack is one sequence of at most llm.max_seq_len tokens; lower balance.q_tok ",
               "(and balance.q_tok_thresh) or leave them at 0 to search within the cap");
}

bool budgets_unset(const IsfBudgets& b) {
  return b.q_vit == 0 && b.q_tok == 0 && b.q_tok_thresh == 0;
}

PackList carried_packs(const MethodResult& result) {
  PackList tail(result.packing.packs.layout());
  for (uint32_t p : result.plan.carried) {
    const PackList& packs = result.packing.packs;
    tail.push(packs.begin(p), packs.end(p) - packs.begin(p), packs.load(p));
  }
  return tail;
}

MethodResult plan_method(const SampleTable& table, Method method, const PlannerOptions& o,
                         const PackList* carry_in) {
  OMNIBAL_CHECK(table.size() > 0, "plan_method: no samples to plan (all records failed or empty)");
  if (!budgets_unset(o.budgets)) o.budgets.validate();
  check_token_cap(o);
  OMNIBAL_CHECK(o.place_by == PlaceBy::kCount || o.time_model,
                "balance.place_by: time needs a pack time model (omnibal-plan data: --cost-preset ",
                "or --cost-table-in; the trainer does not build one yet, use count)");
  if (o.time_model) o.time_model->validate("plan_method");
  MethodResult out;
  out.method = method;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> pack_source;
  pack(table, method, o, out, pack_source);
  if (carry_in) merge_carry_in(table, *carry_in, out, pack_source);
  out.pack_seconds = seconds_since(t0) - out.search_seconds;
  const auto t1 = std::chrono::steady_clock::now();
  place(method, o, pack_source, out);
  const int64_t skipped = static_cast<int64_t>(out.packing.skipped.size()) + table.failed_stats();
  std::array<int64_t, kLoadDims> budget{out.budgets.q_vit, out.budgets.q_tok};
  if (method == Method::kMultiSource) budget = {0, 0};  // per-source budgets: fill vs largest
  out.metrics = compute_metrics(out.packing.packs, out.plan, budget, skipped,
                                o.time_model ? &*o.time_model : nullptr);
  out.place_seconds = seconds_since(t1);
  out.seconds = out.pack_seconds + out.place_seconds;
  return out;
}

}  // namespace omnibal::balance

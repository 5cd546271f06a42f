// omnibal-plan data: the data-balance planner (lib/balance) on length statistics.
//
//   omnibal-plan data --lengths F.json [F2.json ...] | --meta M.json --dp 8 --samples-per-pack 4
//       --method isf|random|length-group|best-fit|multi-source|isf-random-placement|all
//       [--search] [--q-vit N --q-tok N [--q-tok-thresh N]] [--micro-batches m] [--iterations T]
//       [--seed S] [--on-bad-sample error|skip] [--search-samples N] [--resample N]
//       [--max-seq-len N | --preset NAME] [--json OUT.json] [--plan OUT]
//       [--cost-preset NAME [--cost-device a100-80g|h100|h200] | --cost-table-in T.json ...]
//       [--place-by count|time]
//
// Prints one table row per method (docs/paper.md metrics). Budgets are searched once (with the
// candidate table printed) when --search is given or when a method needs budgets that were not
// given; multi-source searches per dataset. --json writes {"results": [...]}; --plan writes the
// plan of the first method listed (isf for --method all) in plan_json.h's format.
// --max-seq-len (or a preset's llm.max_seq_len) caps the tokens of every pack as the trainer
// does; without it there is no cap. A meta file's repeat_time is expanded with --seed, the
// trainer's balance.seed, so with the same seed both plan the same samples.
// A pack time model (balance/pack_time_model.h) adds the Cost Dist Ratios to every row and
// allows --place-by time. It comes from --cost-preset (the analytic model of a preset on
// --cost-device, fitted over loads spanning twice the target pack: exact, as the analytic costs
// are linear in the model's terms) or --cost-table-in (profiled tables): several tables at
// different loads are fitted by least squares (the attention term only when every table records
// load.token_sq_sum); a single table cannot identify more than a per-tile and a per-token
// coefficient, so it gives the scaled model of `partition --cost-table-in` (ViT units by tiles,
// the rest by tokens) and says so.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>

#include "balance/data_planner.h"
#include "balance/length_reader.h"
#include "balance/plan_json.h"
#include "commands.h"
#include "core/error.h"
#include "core/model_preset.h"
#include "partition/analytic_cost_model.h"
#include "partition/pack_time_fit.h"

namespace omnibal::plan {
namespace {

using namespace omnibal::balance;
using Json = nlohmann::json;

struct DataArgs {
  std::vector<std::string> lengths;
  std::string meta;
  int dp = 8;
  int samples_per_pack = 4;
  int micro_batches = 1;
  std::string method = "isf";
  bool search = false;
  int64_t q_vit = 0, q_tok = 0, q_tok_thresh = 0;
  int iterations = 50;
  uint64_t seed = 1024;
  std::string on_bad_sample = "error";
  std::string json_out, plan_out;
  size_t resample = 0;
  size_t search_samples = SearchOptions{}.max_scored_samples;
  int64_t max_seq_len = 0;  ///< token cap of a pack; 0 = none
  std::string preset;       ///< take max_seq_len from this model preset
  // The pack time model (TimeModel below) and what placement balances.
  std::string cost_preset;                  ///< analytic pack time model of this preset
  std::string cost_device = "a100-80g";     ///< ... on this device
  std::vector<std::string> cost_tables_in;  ///< profiled tables: fitted pack time model
  std::string place_by = "count";           ///< count | time
};

/// The pack time model of --cost-preset / --cost-table-in, with how well it fits.
struct TimeModel {
  PackTimeModel model;
  std::string how;  ///< one line: the fit and its residuals, or why the scaled model is used
  nlohmann::json json;
};

std::vector<Method> methods_of(const std::string& name) {
  if (name != "all") return {parse_method(name, "--method")};
  return omnibal::balance::all_methods();
}

PlannerOptions planner_options(const DataArgs& a) {
  PlannerOptions o;
  o.dp = a.dp;
  o.micro_batches = a.micro_batches;
  o.samples_per_pack = a.samples_per_pack;
  o.iterations = a.iterations;
  o.seed = a.seed;
  o.on_bad_sample = parse_on_bad_sample(a.on_bad_sample, "--on-bad-sample");
  const bool given = a.q_vit || a.q_tok || a.q_tok_thresh;
  OMNIBAL_CHECK(!(given && a.search), "--search searches the budgets: drop --q-vit/--q-tok/",
                "--q-tok-thresh, or drop --search to use them");
  if (given) {
    OMNIBAL_CHECK(a.q_vit > 0 && a.q_tok > 0, "--q-vit and --q-tok must both be given (> 0), ",
                  "got ", a.q_vit, " and ", a.q_tok);
    o.budgets = {a.q_vit, a.q_tok, a.q_tok_thresh ? a.q_tok_thresh : a.q_tok - 128};
    o.budgets.validate();
  }
  OMNIBAL_CHECK(a.max_seq_len >= 0, "--max-seq-len: expected tokens >= 0, got ", a.max_seq_len);
  o.max_seq_len = a.max_seq_len;
  o.max_seq_len_origin = "--max-seq-len";
  if (!a.preset.empty()) {
    o.max_seq_len = load_model_preset(a.preset).llm.max_seq_len;
    o.max_seq_len_origin = "--preset " + a.preset;
  }
  o.place_by = parse_choice<PlaceBy>(a.place_by, "--place-by");
  OMNIBAL_CHECK(o.max_seq_len == 0 || a.q_tok <= o.max_seq_len, "--q-tok ", a.q_tok,
                " is over the model's llm.max_seq_len ", o.max_seq_len, " (", o.max_seq_len_origin,
                "): a pack cannot hold more tokens than the model runs");
  return o;
}

Json model_json(const PackTimeModel& m) {
  return {{"source", m.source},
          {"fixed_s", m.fixed_s},
          {"per_tile_s", m.per_tile_s},
          {"per_token_s", m.per_token_s},
          {"per_token_sq_s", m.per_token_sq_s}};
}

TimeModel fitted(const partition::PackTimeFit& fit) {
  TimeModel t{fit.model, "", model_json(fit.model)};
  t.how = fmt::format("least squares over {} loads, relative residual max {:.2g}, RMS {:.2g}",
                      fit.observations, fit.max_rel_residual, fit.rms_rel_residual);
  t.json["fit"] = {{"loads", fit.observations},
                   {"max_rel_residual", fit.max_rel_residual},
                   {"rms_rel_residual", fit.rms_rel_residual}};
  return t;
}

// The pack time model of the --cost-* options, or none. Design loads of the analytic model span
// up to twice the target pack: (s + 1) mean samples, doubled.
std::optional<TimeModel> time_model(const DataArgs& a, const SampleTable& table) {
  OMNIBAL_CHECK(a.cost_preset.empty() || a.cost_tables_in.empty(),
                "give either --cost-preset or --cost-table-in, not both");
  if (!a.cost_preset.empty()) {
    const partition::AnalyticCostModel model(load_model_preset(a.cost_preset),
                                             partition::device_spec(a.cost_device));
    const auto mean = table.mean_load();
    const double pack = 2.0 * (a.samples_per_pack + 1);
    const auto tiles = std::max<int64_t>(4, static_cast<int64_t>(std::ceil(pack * mean[kTiles])));
    const auto tokens =
        std::max<int64_t>(32, static_cast<int64_t>(std::ceil(pack * mean[kTokens])));
    return fitted(partition::fit_pack_time(model, partition::pack_time_design(tiles, tokens), {},
                                           "analytic:" + a.cost_preset + ":" + a.cost_device));
  }
  if (a.cost_tables_in.empty()) return std::nullopt;
  std::vector<partition::UnitCostTable> tables;
  for (const auto& path : a.cost_tables_in) tables.push_back(partition::read_unit_cost_table(path));
  if (tables.size() == 1) {
    TimeModel t;
    t.model = partition::scaled_pack_time(tables[0], a.cost_tables_in[0]);
    t.how =
        "one table at one load identifies no fixed or attention term: scaled model (ViT "
        "units by tiles, the rest by tokens); profile at several loads to fit them";
    t.json = model_json(t.model);
    return t;
  }
  partition::PackTimeTerms terms;
  for (const auto& t : tables) terms.token_sq = terms.token_sq && t.load.token_sq_sum > 0;
  TimeModel t = fitted(partition::fit_pack_time(tables, a.cost_tables_in, terms));
  if (!terms.token_sq) t.how += " (no attention term: the tables lack load.token_sq_sum)";
  return t;
}

std::string budget_text(const MethodResult& r) {
  if (r.method == Method::kMultiSource) return "per source";
  if (r.budgets.q_vit == 0 && r.budgets.q_tok == 0) return "-";
  if (r.budgets.q_vit == 0) return fmt::format("-/{}", r.budgets.q_tok);
  return fmt::format("{}/{}/{}", r.budgets.q_vit, r.budgets.q_tok, r.budgets.q_tok_thresh);
}

void print_header(bool time) {
  fmt::print(
      "{:<21} {:>15} {:>6} {:>8} {:>8} {:>6} {:>6} {:>7} {:>8} {:>5} {:>6} {:>5} {:>6} {:>7}",
      "method", "Q_v/Q_t/Q'_t", "pad", "dist_vit", "dist_llm", "t_fill", "k_fill", "packs",
      "smp/pack", "max_v", "max_t", "skip", "carry", "sec");
  if (time) fmt::print(" {:>8} {:>8} {:>8}", "cdist_dp", "cdist_mb", "step_s");
  fmt::print("\n");
}

void print_row(const MethodResult& r) {
  const auto& m = r.metrics;
  fmt::print(
      "{:<21} {:>15} {:>6.3f} {:>8.5f} {:>8.5f} {:>6.3f} {:>6.3f} {:>7} {:>8.3f} {:>5} "
      "{:>6} {:>5} {:>6} {:>7.3f}",
      method_name(r.method), budget_text(r), m.pad_ratio, m.dist_ratio_vit, m.dist_ratio_llm,
      m.tile_fill, m.token_fill, m.packs, m.samples_per_pack, m.max_tiles, m.max_tokens, m.skipped,
      m.carried_samples, r.seconds);
  if (m.has_time)
    fmt::print(" {:>8.5f} {:>8.5f} {:>8.3f}", m.cost_dist_ratio_dp, m.cost_dist_ratio_mb,
               m.step_seconds);
  fmt::print("\n");
}

Json result_json(const MethodResult& r, const PlannerOptions& o) {
  Json j = balance::metrics_json(r.metrics);
  j.update(Json{{"method", method_name(r.method)},
                {"seconds", r.seconds},
                {"pack_seconds", r.pack_seconds},
                {"place_seconds", r.place_seconds},
                {"dp", o.dp},
                {"micro_batches", o.micro_batches},
                {"seed", o.seed}});
  if (r.budgets.q_vit || r.budgets.q_tok) {
    j["q_vit"] = r.budgets.q_vit;
    j["q_tok"] = r.budgets.q_tok;
    j["q_tok_thresh"] = r.budgets.q_tok_thresh;
  }
  if (r.method == Method::kMultiSource) {
    Json per = Json::array();
    for (const auto& b : r.source_budgets)
      per.push_back({{"q_vit", b.q_vit}, {"q_tok", b.q_tok}, {"q_tok_thresh", b.q_tok_thresh}});
    j["source_budgets"] = per;
  }
  if (r.search_seconds > 0) j["search_seconds"] = r.search_seconds;
  if (r.method == Method::kIsf || r.method == Method::kMultiSource) {
    j["place_by"] = choice_name(o.place_by);
    j["placement"] = r.placement;
  }
  return j;
}

int run_data(const DataArgs& a) {
  OMNIBAL_CHECK(a.lengths.empty() != a.meta.empty(),
                "give either --lengths F.json ... or --meta M.json");
  SampleTable table =
      a.meta.empty() ? read_length_files(a.lengths) : read_meta_file(a.meta, a.seed);
  if (a.resample > 0) table = resample(table, a.resample, a.seed);
  PlannerOptions o = planner_options(a);
  const std::optional<TimeModel> time = time_model(a, table);
  OMNIBAL_CHECK(o.place_by == PlaceBy::kCount || time, "--place-by time needs a pack time model: ",
                "give --cost-preset NAME or --cost-table-in T.json");
  if (time) o.time_model = time->model;
  fmt::print(
      "data: {} samples from {} datasets ({} failed-statistics records skipped), dp {}, "
      "m {}, target {} samples/pack, seed {}, {}\n",
      table.size(), table.datasets.size(), table.failed_stats(), a.dp, a.micro_batches,
      a.samples_per_pack, a.seed,
      o.max_seq_len ? fmt::format("at most {} tokens per pack", o.max_seq_len)
                    : std::string("no token cap"));
  const auto methods = methods_of(a.method);
  const bool searched = budgets_unset(o.budgets);
  double search_seconds = 0;
  std::optional<SearchResult> search;
  const bool needs_budgets = std::any_of(methods.begin(), methods.end(), [](Method m) {
    return m == Method::kIsf || m == Method::kIsfRandomPlacement;
  });
  if (searched && needs_budgets) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t scored = a.search_samples ? a.search_samples : table.size();
    SearchOptions so{o.dp, o.micro_batches, o.samples_per_pack, o.iterations, o.seed, scored};
    so.max_pack_tokens = o.max_seq_len;
    search = search_budgets(table, so);
    search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}search: {:.3f} s\n\n", format_search_table(*search), search_seconds);
    o.budgets = search->budgets();
  }
  if (time) {
    const auto& m = time->model;
    fmt::print(
        "pack time ({}): {:.4g} s + {:.4g} s/tile + {:.4g} s/token + {:.4g} s/token^2; {}; "
        "placement by {}\n",
        m.source, m.fixed_s, m.per_tile_s, m.per_token_s, m.per_token_sq_s, time->how,
        choice_name(o.place_by));
  }
  print_header(time.has_value());
  Json results = Json::array();
  std::unique_ptr<MethodResult> first;
  for (Method m : methods) {
    PlannerOptions mo = o;
    // Searched budgets are ISF's: multi-source searches per dataset, best-fit sizes its own.
    if ((m == Method::kMultiSource || m == Method::kBestFit) && searched) mo.budgets = IsfBudgets{};
    MethodResult r = plan_method(table, m, mo);
    if (m == Method::kIsf || m == Method::kIsfRandomPlacement) r.search_seconds = search_seconds;
    print_row(r);
    if (mo.place_by == PlaceBy::kTime && !r.placement.empty())
      fmt::print("  placement by {}\n", r.placement);
    results.push_back(result_json(r, mo));
    if (!first) first = std::make_unique<MethodResult>(std::move(r));
  }
  if (!a.json_out.empty()) {
    Json doc = {{"results", results}};
    if (search) doc["search_seconds"] = search_seconds;
    if (time) doc["time_model"] = time->json;
    std::ofstream out(a.json_out);
    OMNIBAL_CHECK(out.good(), a.json_out, ": cannot write --json output");
    out << doc.dump(2) << "\n";
  }
  if (!a.plan_out.empty()) {
    write_plan_json(a.plan_out, table, *first, o);
    fmt::print("plan: {} ({} steps, hash {})\n", a.plan_out, first->plan.steps(),
               format_hash(plan_hash(table, first->packing.packs, first->plan)));
  }
  return 0;
}

}  // namespace

void register_data_command(CLI::App& app, Actions& actions) {
  auto args = std::make_shared<DataArgs>();
  CLI::App* cmd = app.add_subcommand("data", "data balance: ISF packing, budget search, baselines");
  auto* lengths = cmd->add_option("--lengths", args->lengths, "OmniBal length files (JSON arrays)");
  auto* meta = cmd->add_option("--meta", args->meta, "InternVL-style meta file with token_lengths");
  lengths->excludes(meta);
  cmd->add_option("--dp", args->dp, "data-parallel ranks")->capture_default_str();
  cmd->add_option("--samples-per-pack", args->samples_per_pack, "ISF target (old per-device batch)")
      ->capture_default_str();
  cmd->add_option("--method", args->method,
                  "isf|random|length-group|best-fit|multi-source|isf-random-placement|all")
      ->capture_default_str();
  cmd->add_flag("--search", args->search, "search the ISF budgets (Q_v, Q_t, Q'_t)");
  cmd->add_option("--q-vit", args->q_vit, "Q_v: tile budget per pack");
  cmd->add_option("--q-tok", args->q_tok, "Q_t: token budget per pack");
  cmd->add_option("--q-tok-thresh", args->q_tok_thresh,
                  "Q'_t: acceptance threshold (default Q_t-128)");
  cmd->add_option("--micro-batches", args->micro_batches, "m: packs per DP rank per step")
      ->capture_default_str();
  cmd->add_option("--iterations", args->iterations, "T: ISF rounds")->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of packing and placement")->capture_default_str();
  cmd->add_option("--on-bad-sample", args->on_bad_sample, "over-budget samples: error|skip")
      ->capture_default_str();
  cmd->add_option("--search-samples", args->search_samples,
                  "score search candidates on at most N samples (0 = all)")
      ->capture_default_str();
  cmd->add_option("--resample", args->resample,
                  "draw N samples with replacement from the inputs (benchmarks at mixture scale)");
  auto* cap = cmd->add_option("--max-seq-len", args->max_seq_len,
                              "cap of a pack's tokens, the model's llm.max_seq_len (0 = no cap)");
  cmd->add_option("--preset", args->preset, "take --max-seq-len from this model preset")
      ->excludes(cap);
  auto* cost_preset =
      cmd->add_option("--cost-preset", args->cost_preset,
                      "pack time model from this preset's analytic costs: adds the Cost Dist "
                      "Ratios, allows --place-by time");
  cmd->add_option("--cost-device", args->cost_device, "device of --cost-preset")
      ->check(CLI::IsMember(partition::device_names()))
      ->capture_default_str();
  cmd->add_option("--cost-table-in", args->cost_tables_in,
                  "pack time model from profiled cost tables (several loads: least-squares fit; "
                  "one table: scaled model)")
      ->excludes(cost_preset);
  cmd->add_option("--place-by", args->place_by,
                  "what isf / multi-source placement balances: count (tiles, tokens) | time "
                  "(predicted seconds; needs --cost-preset or --cost-table-in)")
      ->capture_default_str();
  cmd->add_option("--json", args->json_out, "write {\"results\": [...]} here");
  cmd->add_option("--plan", args->plan_out, "write the plan (steps x DP ranks x packs) here");
  cmd->callback([args, &actions] { actions.push_back([args] { return run_data(*args); }); });
}

}  // namespace omnibal::plan

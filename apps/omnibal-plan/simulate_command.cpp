// `omnibal-plan simulate`: the DP x PP simulator (partition/training_simulator.h) on one trainer
// configuration, fed with a profiled per-unit cost table and the packs the trainer itself runs.
//
//   omnibal-plan simulate --config configs/demo.yaml [--set key=value ...] --cost-table-in C.json
//       [--first-step 0] [--steps 20] [--mb-overhead-s S | S0,S1,..] [--tile-overhead-s ..]
//       [--token-overhead-s ..] [--sample-overhead-s ..] [--compute-fraction F | ..]
//       [--step-overhead-s S | ..] [--loader-overhead-s S | ..] [--dp-jitter J]
//       [--recompute-units vit_block_0,llm_block_2,..] [--link-gbps 4] [--tp N --tp-link-gbps G --tp-latency-us U] [--json OUT.json]
//       [--schedule 1f1b|interleaved|zb-h1|zb-v] [--virtual-stages V] [--trace OUT.json [--trace-step G]]
//
// Packs: data.meta must list token_lengths files (`omnibal-plan scan --out DIR` writes such a
// meta); the epochs are planned by balance::EpochPlanner from the config's balance.*, dp and m,
// exactly as the trainer plans them, so global step g is simulated with the samples the trainer
// runs at step g (the printed plan hash equals the trainer's start-up log line). Every pack is a
// packed micro-batch: the trainer never pads, also not for random micro-batches. The split and
// the recompute flags follow the trainer's fixed rules (memory/stage_rules.h) on the table's
// units: uniform, parameters (min-max of the table's parameter bytes), manual; none, full,
// per-stage counts of the first blocks; or --recompute-units, the units the trainer's start-up log
// names as recomputed (`stage plan ...: recompute {stage 0: vit_block_0, ...}`: what adaptive
// recomputation picked, which need not be the first blocks). Torch-free. Prints one line per step and the median.
// TP: --tp (default: the config's parallel.tp) must equal the table's tp (a table profiled at
// tp N is per TP rank); the units' TP all-reduce volumes follow from the preset in
// train.precision's dtype (partition/tensor_parallel.h) and cost --tp-latency-us per call plus
// the ring volume at --tp-link-gbps (measured all-reduce bus bandwidth of the host's MPI;
// default: --link-gbps). The step report gives the TP all-reduce seconds per stage.
// Plan: with parallel.plan_from (a run directory, its stage_plan.json) the run's own schedule,
// split and recompute flags are simulated, as its trainer ran them (a balanced split or adaptive
// recomputation is searched, not simulated, so needs either that or a fixed rule).
// Schedule: --schedule / --virtual-stages (default: parallel.schedule / virtual_stages; not
// auto) replay the trainer's packs under that schedule's lists (schedule/schedules.h); under
// interleaved the split has pp x v chunks (a manual split lists pp x v counts) and the per-stage
// overheads and reports are per pipeline rank.
// Host overheads (partition::StageOverheads; one value for every stage or one per stage): per
// micro-batch a fixed part plus parts per tile, real token and sample of the micro-batch, a
// fraction of the table's compute on the stage, and per step a cost that replaces the analytic optimizer; scripts/bench/host_overheads.py fits them
// to calibration runs and prints these flags.
// Trace: --trace writes global step --trace-step (default: --first-step; it must be one of the
// simulated steps) as Chrome trace-event JSON in the trainer's format (schedule/step_trace.h), so
// it opens in Perfetto beside the trainer's <run_dir>/trace/step-N.json of the same step.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <memory>

#include "balance/epoch_planner.h"
#include "balance/length_reader.h"
#include "commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/model_preset.h"
#include "core/units.h"
#include "memory/plan_file.h"
#include "memory/plan_sources.h"
#include "memory/stage_rules.h"
#include "partition/cost_model.h"
#include "partition/tensor_parallel.h"
#include "partition/training_simulator.h"
#include "schedule/schedules.h"
#include "schedule/step_trace.h"

namespace omnibal::plan {
namespace {

using Json = nlohmann::json;

struct SimulateArgs {
  std::string config, cost_table, json_out;
  std::vector<std::string> overrides;
  int64_t first_step = 0;
  int steps = 20;
  std::vector<double> mb_overhead_s, tile_overhead_s, token_overhead_s, sample_overhead_s,
      compute_fraction, checkpoint_fraction, step_overhead_s, loader_overhead_s;
  double link_gbps = 4.0;
  double dp_jitter = 0;                      // relative sd of each DP rank's time to its reduction
  int tp = 0;                                // 0: parallel.tp of the config
  double tp_link_gbps = 0;                   // 0: link_gbps
  double tp_latency_us = 0;                  // per all-reduce call
  std::string schedule;                      // "": parallel.schedule
  int virtual_stages = 0;                    // 0: parallel.virtual_stages
  std::vector<std::string> recompute_units;  // empty: memory.recompute
  std::string trace_out;                     // "": no trace
  int64_t trace_step = -1;                   // -1: first_step
};

/// Per-stage vector from a CLI list: empty -> zeros, one value -> every stage, else one each.
std::vector<double> per_stage(const std::vector<double>& v, int stages, const char* flag) {
  if (v.empty()) return std::vector<double>(stages, 0.0);
  if (v.size() == 1) return std::vector<double>(stages, v[0]);
  OMNIBAL_CHECK(static_cast<int>(v.size()) == stages, flag, ": expected 1 or ", stages,
                " values (one per pipeline stage), got ", v.size());
  return v;
}

/// The trainer's split rule (memory/stage_rules.h) on the cost table's units, `parameters` over
/// the table's parameter bytes, into `chunks` parts (pp x v).
partition::Partition resolve_split(const ParallelConfig& p, const partition::UnitCostTable& t,
                                   int chunks) {
  OMNIBAL_CHECK(
      p.partition.method != PartitionMethod::kBalanced, "simulate: parallel.partition '",
      choice_name(p.partition.method),
      "' is searched, not simulated; give a run's plan (--set parallel.plan_from=RUN_DIR, "
      "its stage_plan.json) or the split as {manual: [...]}");
  std::vector<double> bytes;
  for (const auto& u : t.units) bytes.push_back(u.parameter_bytes);
  return memory::fixed_split(p.partition, bytes, chunks);
}

/// The trainer's packs of global step `step` as simulator loads: [dp rank][micro-batch].
partition::StepLoads step_loads(balance::EpochPlanner& plans, const balance::SampleTable& table,
                                int64_t step) {
  partition::StepLoads loads(plans.dp());
  for (int r = 0; r < plans.dp(); ++r)
    for (int k = 0; k < plans.micro_batches(); ++k) {
      std::vector<int32_t> tiles, tokens;
      for (const uint32_t s : plans.pack(step, r, k)) {
        tiles.push_back(table.load[s].tiles());
        tokens.push_back(table.load[s].tokens());
      }
      loads[r].push_back(partition::MicroBatchLoad::packed(std::move(tiles), std::move(tokens)));
    }
  return loads;
}

/// Index of unit `name` in the table, in either spelling (core/units.h: vit_block_0 or
/// vit_block.0). Throws omnibal::Error for a name the table does not hold.
int unit_index(const partition::UnitCostTable& t, const std::string& name) {
  const auto id = find_unit_id(name);
  for (size_t u = 0; u < t.units.size(); ++u)
    if (t.units[u].name == name || (id && find_unit_id(t.units[u].name) == id))
      return static_cast<int>(u);
  OMNIBAL_FAIL("--recompute-units: no unit '", name, "' in the cost table");
}

/// The simulator setup of a config: split, recompute flags, host device and host terms.
/// parallel.plan_from's plan (a run directory's stage_plan.json) as the setup's schedule, split
/// and recompute flags; --schedule / --virtual-stages must agree with it. Throws omnibal::Error
/// naming the plan file when it does not fit the config as the trainer would refuse it
/// (memory::plan_misfits: model, units, pp, schedule, v).
void use_plan_file(const Config& cfg, const SimulateArgs& a, const ModelPreset& preset,
                   partition::SimulatorSetup& setup) {
  const memory::PlanFile file = memory::read_plan_file(cfg.parallel.plan_from);
  const memory::StagePlan& plan = file.plan;
  memory::StagePlanRequest request;
  request.model = cfg.model.preset;
  request.unit_names = unit_names(preset);
  request.stages = cfg.parallel.pp;
  request.micro_batches = cfg.parallel.micro_batches;
  request.schedule = cfg.parallel.schedule;
  request.virtual_stages = cfg.parallel.virtual_stages;
  request.auto_zb_v = true;  // as the trainer's start-up planner
  std::string misfits;
  for (const auto& m : memory::plan_misfits(plan, request))
    misfits += (misfits.empty() ? "" : "; ") + m;
  OMNIBAL_CHECK(misfits.empty(), "parallel.plan_from: ", file.path, " does not fit this run (",
                misfits, ")");
  OMNIBAL_CHECK(a.schedule.empty() ||
                    parse_choice<PipelineSchedule>(a.schedule, "--schedule") == plan.schedule,
                "--schedule ", a.schedule, ": ", file.path, " is a plan for ",
                choice_name(plan.schedule), "; drop --schedule or parallel.plan_from");
  OMNIBAL_CHECK(a.virtual_stages <= 0 || a.virtual_stages == plan.virtual_stages,
                "--virtual-stages ", a.virtual_stages, ": ", file.path, " is a plan of v ",
                plan.virtual_stages, "; drop --virtual-stages or parallel.plan_from");
  setup.schedule = plan.schedule;
  setup.virtual_stages = plan.virtual_stages;
  setup.partition = plan.partition;
  setup.recompute = plan.recompute.per_unit;
}

partition::SimulatorSetup make_setup(const Config& cfg, const SimulateArgs& a,
                                     const ModelPreset& preset,
                                     const partition::UnitCostTable& table,
                                     const partition::CostModel& model) {
  partition::SimulatorSetup setup;
  setup.model = &model;
  const int stages = cfg.parallel.pp;
  const auto blocks = memory::block_units(table);
  if (!cfg.parallel.plan_from.empty()) {
    use_plan_file(cfg, a, preset, setup);
    OMNIBAL_CHECK(setup.recompute.size() == table.units.size(), "parallel.plan_from ",
                  cfg.parallel.plan_from, ": a plan of ", setup.recompute.size(),
                  " units, but the cost table has ", table.units.size());
  } else {
    setup.schedule = a.schedule.empty() ? cfg.parallel.schedule
                                        : parse_choice<PipelineSchedule>(a.schedule, "--schedule");
    setup.virtual_stages = a.virtual_stages > 0 ? a.virtual_stages : cfg.parallel.virtual_stages;
    OMNIBAL_CHECK(setup.schedule != PipelineSchedule::kAuto, "simulate: schedule 'auto' is the ",
                  "planner's choice; give --schedule 1f1b | interleaved | zb-h1 | zb-v, or a run's "
                  "plan (--set parallel.plan_from=RUN_DIR)");
    setup.virtual_stages = schedule::chunks_per_rank(setup.schedule, setup.virtual_stages);
    setup.partition = resolve_split(cfg.parallel, table, stages * setup.virtual_stages);
    OMNIBAL_CHECK(cfg.memory.recompute.mode != RecomputeMode::kAdaptive ||
                      !a.recompute_units.empty(),
                  "simulate: memory.recompute 'adaptive' is planned, not simulated; give a run's "
                  "plan (--set parallel.plan_from=RUN_DIR), --recompute-units or none | full");
    if (a.recompute_units.empty())
      setup.recompute =
          memory::fixed_recompute(cfg.memory.recompute, setup.partition, blocks).per_unit;
  }
  if (!a.recompute_units.empty()) {
    setup.recompute.assign(table.units.size(), false);
    for (const auto& name : a.recompute_units) {
      const int u = unit_index(table, name);
      OMNIBAL_CHECK(blocks[u], "--recompute-units: ", name,
                    " is not a ViT or LLM block (only blocks are recomputed)");
      setup.recompute[u] = true;
    }
  }
  setup.dp = cfg.parallel.dp;
  setup.tp = table.tp;  // checked against --tp / parallel.tp by run_simulate
  setup.tp_link = partition::TpLink{(a.tp_link_gbps > 0 ? a.tp_link_gbps : a.link_gbps) * 1e9,
                                    a.tp_latency_us * 1e-6};
  setup.shard = ShardMode::kNone;
  setup.static_bytes.assign(stages, 0.0);
  setup.device = partition::host_device(a.link_gbps * 1e9);
  setup.overheads.per_micro_batch_s = per_stage(a.mb_overhead_s, stages, "--mb-overhead-s");
  setup.overheads.per_tile_s = per_stage(a.tile_overhead_s, stages, "--tile-overhead-s");
  setup.overheads.per_token_s = per_stage(a.token_overhead_s, stages, "--token-overhead-s");
  setup.overheads.per_sample_s = per_stage(a.sample_overhead_s, stages, "--sample-overhead-s");
  setup.overheads.compute_fraction = per_stage(a.compute_fraction, stages, "--compute-fraction");
  setup.overheads.checkpoint_fraction =
      per_stage(a.checkpoint_fraction, stages, "--checkpoint-fraction");
  setup.overheads.per_step_s = per_stage(a.step_overhead_s, stages, "--step-overhead-s");
  setup.overheads.loader_per_micro_batch_s =
      per_stage(a.loader_overhead_s, stages, "--loader-overhead-s");
  setup.dp_jitter = a.dp_jitter;
  return setup;
}

/// One simulated step as a printed line and as JSON.
Json report_step(int64_t step, const partition::StepReport& rep) {
  Json stages = Json::array();
  std::string line = fmt::format("step {:>5} {:>9.4f} s  {} samples {} tiles {} tokens", step,
                                 rep.step_s, rep.samples, rep.tiles, rep.tokens);
  for (size_t s = 0; s < rep.stages.size(); ++s) {
    const auto& st = rep.stages[s];
    stages.push_back({{"forward_s", st.forward_s},
                      {"backward_s", st.backward_s},
                      {"idle_s", st.idle_s},
                      {"tp_comm_s", st.tp_comm_s},
                      {"checkpointed_s", st.checkpointed_s}});
    line += fmt::format("  | s{} fwd {:.4f} bwd {:.4f} idle {:.4f}", s, st.forward_s, st.backward_s,
                        st.idle_s);
    if (st.tp_comm_s > 0) line += fmt::format(" tp {:.4f}", st.tp_comm_s);
  }
  fmt::print("{}\n", line);
  Json dp_ranks = Json::array();
  for (double busy : rep.dp_busy_s) dp_ranks.push_back({{"busy_s", busy}});
  return {{"step", step},
          {"step_seconds", rep.step_s},
          {"samples", rep.samples},
          {"tiles", rep.tiles},
          {"tokens", rep.tokens},
          {"bubble_fraction", rep.breakdown.bubble_s / rep.step_s},
          {"tp_comm_seconds", rep.breakdown.tp_comm_s},
          {"stages", stages},
          {"dp_ranks", dp_ranks}};
}

/// The global step --trace writes (--trace-step, default --first-step); throws when the step
/// range is empty or does not hold it.
int64_t checked_trace_step(const SimulateArgs& a) {
  OMNIBAL_CHECK(a.steps >= 1 && a.first_step >= 0, "simulate: --steps must be >= 1 and ",
                "--first-step >= 0");
  const int64_t trace_step = a.trace_step < 0 ? a.first_step : a.trace_step;
  OMNIBAL_CHECK(a.trace_out.empty() ||
                    (trace_step >= a.first_step && trace_step < a.first_step + a.steps),
                "simulate: --trace-step ", trace_step, " is not simulated (steps ", a.first_step,
                "..", a.first_step + a.steps - 1, ")");
  return trace_step;
}

/// The cost table of --cost-table-in and the preset it must belong to.
struct RunCosts {
  partition::UnitCostTable table;  ///< with the preset's TP all-reduces at the run's tp
  ModelPreset preset;
  int tp = 1;  ///< --tp, else parallel.tp
};

/// Reads the cost table and checks it against the config's preset and the run's tp; its TP
/// all-reduce volumes follow from the preset in train.precision's dtype.
RunCosts load_run_costs(const SimulateArgs& a, const Config& cfg) {
  RunCosts rc;
  rc.table = partition::read_unit_cost_table(a.cost_table);
  OMNIBAL_CHECK(rc.table.model == cfg.model.preset, a.cost_table, ": cost table of model '",
                rc.table.model, "', the config's model.preset is '", cfg.model.preset, "'");
  rc.tp = a.tp > 0 ? a.tp : cfg.parallel.tp;
  OMNIBAL_CHECK(rc.table.tp == rc.tp, a.cost_table, ": a table per rank of tp ", rc.table.tp,
                ", but the run has tp ", rc.tp, " (--tp or parallel.tp; profile at the run's tp)");
  rc.preset = load_model_preset(cfg.model.preset);
  check_tensor_parallel(rc.preset, rc.tp);
  partition::set_tp_all_reduces(rc.table, rc.preset,
                                cfg.train.precision == Precision::kBf16 ? 2.0 : 4.0);
  return rc;
}

/// What names a simulated run in its trace and JSON: the plan hash (the trainer's start-up
/// log's) and the split.
struct RunIds {
  std::string hash, split;
};

/// Writes the trace of global step g (--trace) in the trainer's format.
void write_simulated_trace(const SimulateArgs& a, int64_t g, const schedule::StepTrace& trace,
                           double step_s, const RunIds& ids,
                           const partition::SimulatorSetup& setup) {
  schedule::write_trace_file(
      a.trace_out, schedule::trace_event_json(trace, {{"source", "simulated"},
                                                      {"step", g},
                                                      {"step_seconds", step_s},
                                                      {"config", a.config},
                                                      {"cost_table", a.cost_table},
                                                      {"plan_hash", ids.hash},
                                                      {"partition", ids.split},
                                                      {"schedule", choice_name(setup.schedule)},
                                                      {"virtual_stages", setup.virtual_stages}}));
  fmt::print("trace of step {} written to {}\n", g, a.trace_out);
}

/// Writes --json: the run's identifiers, its median step seconds and the per-step reports.
void write_simulation_json(const SimulateArgs& a, const Config& cfg, const RunIds& ids,
                           const partition::SimulatorSetup& setup, double median,
                           const Json& steps) {
  std::ofstream out(a.json_out);
  OMNIBAL_CHECK(out.good(), "cannot write '", a.json_out, "'");
  out << Json{{"format", "omnibal.simulation.v1"},
              {"plan_hash", ids.hash},
              {"partition", ids.split},
              {"schedule", choice_name(setup.schedule)},
              {"virtual_stages", setup.virtual_stages},
              {"dp", cfg.parallel.dp},
              {"pp", cfg.parallel.pp},
              {"micro_batches", cfg.parallel.micro_batches},
              {"median_step_seconds", median},
              {"steps", steps}}
             .dump(1)
      << "\n";
}

int run_simulate(const SimulateArgs& a) {
  const int64_t trace_step = checked_trace_step(a);
  const Config cfg = load_config(a.config, a.overrides);
  const RunCosts costs = load_run_costs(a, cfg);
  const balance::SampleTable samples = balance::read_meta_file(cfg.data.meta, cfg.balance.seed);
  // The trainer's plan: the same seed for repeat_time, the preset's max_seq_len as token cap.
  balance::PlannerOptions options = balance::planner_options(cfg.parallel, cfg.balance, cfg.data);
  options.max_seq_len = costs.preset.llm.max_seq_len;
  options.max_seq_len_origin = "preset " + cfg.model.preset;
  balance::EpochPlanner plans(samples, cfg.balance.method, options);
  const partition::ScaledTableCostModel model(costs.table);
  const partition::SimulatorSetup setup = make_setup(cfg, a, costs.preset, costs.table, model);
  const RunIds ids{fmt::format("{:016x}", plans.plan_hash()), setup.partition.to_string()};
  fmt::print(
      "plan hash {}, partition {}, recompute {}, tp {} x dp {} x pp {}, m {}, schedule {}{}\n",
      ids.hash, ids.split,
      cfg.parallel.plan_from.empty() ? choice_name(cfg.memory.recompute.mode)
                                     : "of parallel.plan_from",
      costs.tp, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.micro_batches,
      choice_name(setup.schedule),
      setup.virtual_stages > 1 ? fmt::format(" v {}", setup.virtual_stages) : "");
  Json steps = Json::array();
  std::vector<double> times;
  for (int64_t g = a.first_step; g < a.first_step + a.steps; ++g) {
    const bool traced = !a.trace_out.empty() && g == trace_step;
    schedule::StepTrace trace;
    const auto rep =
        partition::simulate_step(setup, step_loads(plans, samples, g), traced ? &trace : nullptr);
    steps.push_back(report_step(g, rep));
    if (traced) write_simulated_trace(a, g, trace, rep.step_s, ids, setup);
    times.push_back(rep.step_s);
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  const double median = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  fmt::print("simulated step: median {:.4f} s (min {:.4f}, max {:.4f}) over steps {}..{}\n", median,
             times.front(), times.back(), a.first_step, a.first_step + a.steps - 1);
  if (!a.json_out.empty()) write_simulation_json(a, cfg, ids, setup, median, steps);
  return 0;
}

}  // namespace

void register_simulate_command(CLI::App& app, Actions& actions) {
  auto a = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand(
      "simulate", "simulate a trainer config's steps with a profiled cost table and its packs");
  cmd->add_option("--config", a->config,
                  "trainer config (YAML; a run's config.yaml with --set parallel.plan_from=RUN_DIR "
                  "for its searched plan, and data.meta naming token_lengths: omnibal-plan scan)")
      ->required();
  cmd->add_option("--set", a->overrides, "override a config key: a.b=value (repeatable)");
  cmd->add_option("--cost-table-in", a->cost_table, "per-unit cost table (omnibal-plan profile)")
      ->required();
  cmd->add_option("--first-step", a->first_step, "first global step to simulate (default 0)");
  cmd->add_option("--steps", a->steps, "steps to simulate (default 20)");
  cmd->add_option("--mb-overhead-s", a->mb_overhead_s,
                  "seconds per micro-batch and stage outside the units (one or one per stage)")
      ->delimiter(',');
  cmd->add_option("--tile-overhead-s", a->tile_overhead_s,
                  "seconds per tile of a micro-batch and stage (one or one per stage)")
      ->delimiter(',');
  cmd->add_option("--token-overhead-s", a->token_overhead_s,
                  "seconds per real token of a micro-batch and stage (one or one per stage)")
      ->delimiter(',');
  cmd->add_option("--sample-overhead-s", a->sample_overhead_s,
                  "seconds per sample of a micro-batch and stage (one or one per stage)")
      ->delimiter(',');
  cmd->add_option("--compute-fraction", a->compute_fraction,
                  "extra fraction of the table's forward and backward time per stage (one or one "
                  "per stage; 0.1: 10 % slower than the table)")
      ->delimiter(',');
  cmd->add_option("--checkpoint-fraction", a->checkpoint_fraction,
                  "further fraction of the checkpointed compute per stage (recomputed units' "
                  "forwards and reruns), on top of --compute-fraction (one or one per stage; "
                  "-0.2: 20 % of the table's time faster)")
      ->delimiter(',');
  cmd->add_option("--step-overhead-s", a->step_overhead_s,
                  "seconds per step and stage after the pipeline (optimizer, grad norm; one or "
                  "one per stage)")
      ->delimiter(',');
  cmd->add_option("--loader-overhead-s", a->loader_overhead_s,
                  "seconds per micro-batch of the step of work sharing the stage's core from "
                  "the step's start (the loader building the next packs; one or one per stage)")
      ->delimiter(',');
  cmd->add_option("--dp-jitter", a->dp_jitter,
                  "relative standard deviation of each DP rank's time to its gradient "
                  "reduction per step (host jitter; it waits for the expected slowest; default 0)");
  cmd->add_option("--recompute-units", a->recompute_units,
                  "recomputed units by name, as the trainer's start-up log lists them "
                  "(vit_block_0,...); replaces memory.recompute")
      ->delimiter(',');
  cmd->add_option("--link-gbps", a->link_gbps,
                  "point-to-point bandwidth between stages, GB/s (default 4: MPI over shared "
                  "memory here, lib/comm/README.md)");
  cmd->add_option("--tp", a->tp,
                  "tensor-parallel ranks (default: parallel.tp); the table must be per rank of it");
  cmd->add_option("--tp-link-gbps", a->tp_link_gbps,
                  "TP all-reduce bus bandwidth, GB/s (measured; default: --link-gbps)");
  cmd->add_option("--tp-latency-us", a->tp_latency_us,
                  "fixed microseconds per TP all-reduce call (measured; default 0)");
  cmd->add_option("--json", a->json_out, "write the simulated steps as JSON here");
  cmd->add_option(
      "--schedule", a->schedule,
      "pipeline schedule: 1f1b | interleaved | zb-h1 | zb-v (default: parallel.schedule)");
  cmd->add_option("--virtual-stages", a->virtual_stages,
                  "model chunks per rank under interleaved (default: parallel.virtual_stages)");
  cmd->add_option("--trace", a->trace_out,
                  "write one simulated step as Chrome trace-event JSON here (Perfetto)");
  cmd->add_option("--trace-step", a->trace_step,
                  "global step of --trace (default: --first-step; one of the simulated steps)");
  cmd->callback([a, &actions] { actions.push_back([a] { return run_simulate(*a); }); });
}

}  // namespace omnibal::plan

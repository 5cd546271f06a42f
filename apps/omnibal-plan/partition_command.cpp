// `omnibal-plan partition`: model + memory balance and the pipeline simulator on a preset that
// need not run here, printing and writing the OmniBal ablation (partition_ablation.h).
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "partition/device_spec.h"
#include "partition_ablation.h"
#include "schedule/step_trace.h"

namespace omnibal::plan {
namespace {

/// Writes the trace the ablation kept for options.trace_row (a row of the table or of the
/// ZeRO-3 recipe); throws naming the rows when none matched.
void write_row_trace(const AblationResult& result, const AblationOptions& o,
                     const std::string& path) {
  std::string names;
  std::vector<const AblationRow*> rows;
  for (const auto& row : result.rows) rows.push_back(&row);
  for (const auto& row : result.zero3_rows) rows.push_back(&row);
  for (const AblationRow* row : rows) {
    if (row->trace) {
      const bool zero3 = row->name.rfind("ZeRO-3", 0) == 0;
      schedule::write_trace_file(
          path,
          schedule::trace_event_json(*row->trace, {{"source", "simulated"},
                                                   {"row", row->name},
                                                   {"step", o.trace_step},
                                                   {"model", o.model},
                                                   {"device", o.device},
                                                   {"dp", zero3 ? result.zero3_dp : o.dp},
                                                   {"pp", zero3 ? 1 : o.pp},
                                                   {"tp", zero3 ? 1 : o.tp},
                                                   {"micro_batches", zero3 ? 1 : o.micro_batches},
                                                   {"split", row->partition.to_string()},
                                                   {"schedule", choice_name(row->schedule)}}));
      fmt::print("trace of row '{}', step {} written to {}\n", row->name, o.trace_step, path);
      return;
    }
    names += (names.empty() ? "'" : ", '") + row->name + "'";
  }
  OMNIBAL_FAIL("partition: --trace-row '", o.trace_row, "' names no row; the rows are ", names);
}

/// `partition`'s arguments: the ablation's options and where to write its outputs ("": not).
struct PartitionArgs {
  AblationOptions options;
  std::string json_path, table_path, trace_path;
};

/// The run being planned: model, length files, parallelism, device, batch and memory budget.
void add_setup_options(CLI::App& cmd, AblationOptions& o) {
  cmd.add_option("--model", o.model, "preset name or models/presets/<name>.yaml")->required();
  cmd.add_option("--lengths", o.lengths, "OmniBal length files (JSON)")->required();
  cmd.add_option("--dp", o.dp, "data-parallel ranks")->required();
  cmd.add_option("--pp", o.pp, "pipeline stages")->required();
  cmd.add_option("--tp", o.tp,
                 "tensor-parallel ranks (Megatron TP inside a node: costs and memory per TP "
                 "rank, the TP all-reduces on NVLink)");
  cmd.add_flag("--tp-vit-dummy-heads", o.tp_vit_dummy_heads,
               "pad ViT heads that --tp does not divide with dummy heads (Megatron-LM NVLM; "
               "the trainer refuses such a preset)");
  cmd.add_option("--micro-batches", o.micro_batches, "m: micro-batches per DP rank per step")
      ->required();
  cmd.add_option("--device", o.device, "a100-80g | h100 | h200");
  cmd.add_option("--global-batch", o.global_batch, "samples per baseline step");
  cmd.add_option("--budget-gb", o.budget_gb, "memory budget in GiB (0: device - 8%)");
}

/// The searches (BMP's radius and K, ISF's rounds and seed), the trainer settings they assume
/// (ZeRO-1, a frozen ViT), how candidates are judged and the schedules ranked.
void add_planner_options(CLI::App& cmd, const std::shared_ptr<PartitionArgs>& a) {
  AblationOptions& o = a->options;
  cmd.add_option("--radius", o.radius, "r: boundary moves around the anchors");
  cmd.add_option("--top-k", o.top_k, "K: candidates confirmed by simulation");
  cmd.add_option("--iterations", o.iterations, "ISF rounds T");
  cmd.add_option("--seed", o.seed, "seed of the random baseline and ISF");
  cmd.add_flag(
      "--no-zero1", [a](int64_t) { a->options.zero1 = false; },
      "keep the full optimizer state on every DP rank");
  cmd.add_flag("--freeze-vit", o.freeze_vit, "the ViT is frozen (train.freeze: [vit])");
  cmd.add_flag(
      "--judge-by-pipeline-time", [a](int64_t) { a->options.judge_by_simulation = false; },
      "pick each search round's candidate by predicted 1F1B time (the trainer without "
      "timed trials) instead of by simulating 8 steps of the packs");
  cmd.add_option(
         "--schedule", o.schedules,
         "pipeline schedules: 1f1b (the paper's rows only) | interleaved | zb-h1 | zb-v | all, "
         "or a list; each adds a full-OmniBal row under it and the (schedule, split) "
         "pairs are ranked by simulated step time")
      ->delimiter(',');
  cmd.add_option("--virtual-stages", o.virtual_stages,
                 "v chunks per rank of each interleaved row (a list: 2,3; default 2)")
      ->delimiter(',');
}

/// The rows of issue 40: the 3D rows with DP communication overlapped, the ZeRO-3 recipe.
void add_recipe_options(CLI::App& cmd, AblationOptions& o) {
  cmd.add_flag("--overlap", o.overlap_rows,
               "add the baseline and + adaptive recompute rows with the DP gradient reduction "
               "(and ZeRO-1's parameter all-gather) overlapped with compute (comm.overlap)");
  cmd.add_flag("--zero3", o.zero3,
               "add the ZeRO-3 recipe (InternVL's DeepSpeed run: DP only, shard full, m 1): "
               "length-grouped baseline with full recomputation vs ISF with adaptive "
               "recomputation, beside the paper's 1.54x");
  cmd.add_option("--zero3-dp", o.zero3_dp,
                 "DP ranks of the ZeRO-3 rows (default: dp x pp x tp, the same GPUs)");
}

/// The files it reads (a measured cost table) and writes (JSON, cost table, trace).
void add_file_options(CLI::App& cmd, PartitionArgs& a) {
  cmd.add_option("--json", a.json_path, "write the result as JSON here");
  cmd.add_option("--cost-table-in", a.options.cost_table_in,
                 "measured per-unit cost table (omnibal-plan profile) instead of analytic costs; "
                 "scaled to each micro-batch's tiles and tokens");
  cmd.add_option("--cost-table", a.table_path,
                 "write the analytic per-unit cost table at the mean ISF pack here");
  cmd.add_option("--trace", a.trace_path,
                 "write one simulated step of --trace-row as Chrome trace-event JSON here");
  cmd.add_option("--trace-row", a.options.trace_row,
                 "the row --trace shows: a row name of the table, '+ ' optional (default: "
                 "adaptive recompute, the full OmniBal; baseline for the paper's baseline)");
  cmd.add_option("--trace-step", a.options.trace_step,
                 "which of the row's simulated full steps --trace shows (0-based, default 0)");
}

/// Runs the ablation, prints its summary and table, and writes the files asked for.
int run_partition(PartitionArgs& a) {
  AblationOptions& o = a.options;
  if (!a.trace_path.empty() && o.trace_row.empty()) o.trace_row = "adaptive recompute";
  const auto result = run_partition_ablation(o);
  fmt::print(
      "{} samples, dp {} x pp {} x tp {}, m {}, {} samples per baseline micro-batch, "
      "ISF {}, budget {:.1f} GB\n",
      result.epoch_samples, o.dp, o.pp, o.tp, o.micro_batches, result.samples_per_pack,
      result.isf_budgets, result.budget_bytes / 1e9);
  const double card = partition::device_spec(o.device).memory_bytes;
  if (card > 0 && result.budget_bytes > card)
    fmt::print(
        "note: --budget-gb is over the {}'s {:.1f} GB: a what-if, not a plan that fits the card\n",
        o.device, card / 1e9);
  fmt::print(
      "BMP: exact anchor {}, greedy anchor {}, refined anchor {}, {} candidates ({} "
      "non-empty, {} fit)\n",
      result.search.exact_anchor.to_string(), result.search.greedy_anchor.to_string(),
      result.search.refined_anchor.to_string(), result.search.generated, result.search.non_empty,
      result.search.fitting);
  fmt::print("{}", format_ablation_table(result));
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    OMNIBAL_CHECK(out.good(), "cannot write '", a.json_path, "'");
    out << ablation_json(result, o) << "\n";
  }
  if (!a.table_path.empty()) partition::write_unit_cost_table(result.profile_table, a.table_path);
  if (!a.trace_path.empty()) write_row_trace(result, o, a.trace_path);
  return 0;
}

}  // namespace

void register_partition_command(CLI::App& app, Actions& actions) {
  auto a = std::make_shared<PartitionArgs>();
  CLI::App* cmd =
      app.add_subcommand("partition",
                         "balanced model partition, adaptive recompute and the simulated ablation");
  add_setup_options(*cmd, a->options);
  add_planner_options(*cmd, a);
  add_recipe_options(*cmd, a->options);
  add_file_options(*cmd, *a);
  cmd->callback([a, &actions] { actions.push_back([a] { return run_partition(*a); }); });
}

}  // namespace omnibal::plan

// `omnibal-plan partition`: model + memory balance and the pipeline simulator on a preset that
// need not run here, printing and writing the OmniBal ablation (partition_ablation.h).
#include <fmt/format.h>

#include <fstream>

#include "commands.h"
#include "core/error.h"
#include "partition_ablation.h"
#include "schedule/step_trace.h"

namespace omnibal::plan {
namespace {

/// Writes the trace the ablation kept for options.trace_row; throws naming the rows when none
/// matched.
void write_row_trace(const AblationResult& result, const AblationOptions& o,
                     const std::string& path) {
  std::string names;
  for (const auto& row : result.rows) {
    if (row.trace) {
      schedule::write_trace_file(
          path, schedule::trace_event_json(*row.trace, {{"source", "simulated"},
                                                        {"row", row.name},
                                                        {"step", o.trace_step},
                                                        {"model", o.model},
                                                        {"device", o.device},
                                                        {"dp", o.dp},
                                                        {"pp", o.pp},
                                                        {"tp", o.tp},
                                                        {"micro_batches", o.micro_batches},
                                                        {"split", row.partition.to_string()},
                                                        {"schedule", choice_name(row.schedule)}}));
      fmt::print("trace of row '{}', step {} written to {}\n", row.name, o.trace_step, path);
      return;
    }
    names += (names.empty() ? "'" : ", '") + row.name + "'";
  }
  OMNIBAL_FAIL("partition: --trace-row '", o.trace_row, "' names no row; the rows are ", names);
}

}  // namespace

void register_partition_command(CLI::App& app, Actions& actions) {
  auto opts = std::make_shared<AblationOptions>();
  auto json_path = std::make_shared<std::string>();
  auto table_path = std::make_shared<std::string>();
  auto trace_path = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("partition",
                         "balanced model partition, adaptive recompute and the simulated ablation");
  cmd->add_option("--model", opts->model, "preset name or models/presets/<name>.yaml")->required();
  cmd->add_option("--lengths", opts->lengths, "OmniBal length files (JSON)")->required();
  cmd->add_option("--dp", opts->dp, "data-parallel ranks")->required();
  cmd->add_option("--pp", opts->pp, "pipeline stages")->required();
  cmd->add_option("--tp", opts->tp,
                  "tensor-parallel ranks (Megatron TP inside a node: costs and memory per TP "
                  "rank, the TP all-reduces on NVLink)");
  cmd->add_flag("--tp-vit-dummy-heads", opts->tp_vit_dummy_heads,
                "pad ViT heads that --tp does not divide with dummy heads (Megatron-LM NVLM; "
                "the trainer refuses such a preset)");
  cmd->add_option("--micro-batches", opts->micro_batches, "m: micro-batches per DP rank per step")
      ->required();
  cmd->add_option("--device", opts->device, "a100-80g | h100 | h200");
  cmd->add_option("--global-batch", opts->global_batch, "samples per baseline step");
  cmd->add_option("--budget-gb", opts->budget_gb, "memory budget in GiB (0: device - 8%)");
  cmd->add_option("--radius", opts->radius, "r: boundary moves around the anchors");
  cmd->add_option("--top-k", opts->top_k, "K: candidates confirmed by simulation");
  cmd->add_option("--iterations", opts->iterations, "ISF rounds T");
  cmd->add_option("--seed", opts->seed, "seed of the random baseline and ISF");
  cmd->add_flag(
      "--no-zero1", [opts](int64_t) { opts->zero1 = false; },
      "keep the full optimizer state on every DP rank");
  cmd->add_flag("--freeze-vit", opts->freeze_vit, "the ViT is frozen (train.freeze: [vit])");
  cmd->add_flag(
      "--judge-by-pipeline-time", [opts](int64_t) { opts->judge_by_simulation = false; },
      "pick each search round's candidate by predicted 1F1B time (the trainer without "
      "timed trials) instead of by simulating 8 steps of the packs");
  cmd->add_option("--schedule", opts->schedules,
                  "pipeline schedules: 1f1b (the paper's rows only) | interleaved | zb-h1 | all, "
                  "or a list; each adds a full-OmniBal row under it and the (schedule, split) "
                  "pairs are ranked by simulated step time")
      ->delimiter(',');
  cmd->add_option("--virtual-stages", opts->virtual_stages,
                  "v chunks per rank of each interleaved row (a list: 2,3; default 2)")
      ->delimiter(',');
  cmd->add_option("--json", *json_path, "write the result as JSON here");
  cmd->add_option("--cost-table-in", opts->cost_table_in,
                  "measured per-unit cost table (omnibal-plan profile) instead of analytic costs; "
                  "scaled to each micro-batch's tiles and tokens");
  cmd->add_option("--cost-table", *table_path,
                  "write the analytic per-unit cost table at the mean ISF pack here");
  cmd->add_option("--trace", *trace_path,
                  "write one simulated step of --trace-row as Chrome trace-event JSON here");
  cmd->add_option("--trace-row", opts->trace_row,
                  "the row --trace shows: a row name of the table, '+ ' optional (default: "
                  "adaptive recompute, the full OmniBal; baseline for the paper's baseline)");
  cmd->add_option("--trace-step", opts->trace_step,
                  "which of the row's simulated full steps --trace shows (0-based, default 0)");
  cmd->callback([opts, json_path, table_path, trace_path, &actions] {
    actions.push_back([opts, json_path, table_path, trace_path] {
      if (!trace_path->empty() && opts->trace_row.empty()) opts->trace_row = "adaptive recompute";
      const auto result = run_partition_ablation(*opts);
      fmt::print(
          "{} samples, dp {} x pp {} x tp {}, m {}, {} samples per baseline micro-batch, "
          "ISF {}, budget {:.1f} GB\n",
          result.epoch_samples, opts->dp, opts->pp, opts->tp, opts->micro_batches,
          result.samples_per_pack, result.isf_budgets, result.budget_bytes / 1e9);
      fmt::print(
          "BMP: exact anchor {}, greedy anchor {}, refined anchor {}, {} candidates ({} "
          "non-empty, {} fit)\n",
          result.search.exact_anchor.to_string(), result.search.greedy_anchor.to_string(),
          result.search.refined_anchor.to_string(), result.search.generated,
          result.search.non_empty, result.search.fitting);
      fmt::print("{}", format_ablation_table(result));
      if (!json_path->empty()) {
        std::ofstream out(*json_path);
        OMNIBAL_CHECK(out.good(), "cannot write '", *json_path, "'");
        out << ablation_json(result, *opts) << "\n";
      }
      if (!table_path->empty()) partition::write_unit_cost_table(result.profile_table, *table_path);
      if (!trace_path->empty()) write_row_trace(result, *opts, *trace_path);
      return 0;
    });
  });
}

}  // namespace omnibal::plan

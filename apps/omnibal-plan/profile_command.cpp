// `omnibal-plan profile`: per-unit forward/backward seconds and memory of a preset under one
// balanced pack (lib/profile/unit_profiler.h), written as the per-unit cost table the planners
// read (`omnibal-plan partition --cost-table-in`).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/torch.h>

#include <memory>

#include "commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/host_heap.h"
#include "core/model_preset.h"
#include "partition/unit_cost_table.h"
#include "profile/unit_profiler.h"

namespace omnibal::plan {

namespace {

struct ProfileArgs {
  std::string preset = "tiny", out, device = "cpu";
  profile::ProfileOptions options;
  std::vector<std::string> freeze;  ///< --freeze group names
  int threads = 0;
  int heap_keep_mb = RuntimeConfig{}.heap_keep_mb;  ///< the trainer's default: tables match it
  bool cpu_clock = false;
  std::string statistic = "median";  ///< --statistic
};

void print_table(const profile::ProfileResult& r, const std::string& statistic_name) {
  const auto& t = r.table;
  fmt::print("{} at {} tiles, {} tokens, {} samples ({}; {} of the repeats)\n", t.model,
             t.load.tiles, t.load.tokens, t.load.samples, t.source, statistic_name);
  fmt::print("{:<14} {:>10} {:>17} {:>10} {:>17} {:>12} {:>12} {:>12} {:>5}\n", "unit", "fwd ms",
             "(min-max)", "bwd ms", "(min-max)", "act KiB", "param KiB", "out KiB", "train");
  for (size_t i = 0; i < t.units.size(); ++i) {
    const auto& u = t.units[i];
    fmt::print(
        "{:<14} {:>10.3f} {:>8.3f}-{:<8.3f} {:>10.3f} {:>8.3f}-{:<8.3f} {:>12.1f} {:>12.1f} "
        "{:>12.1f} {:>5}\n",
        u.name, 1e3 * u.forward_s, 1e3 * r.forward_min_s[i], 1e3 * r.forward_max_s[i],
        1e3 * u.backward_s, 1e3 * r.backward_min_s[i], 1e3 * r.backward_max_s[i],
        u.activation_bytes / 1024, u.parameter_bytes / 1024, u.output_bytes / 1024,
        u.trainable ? "yes" : "no");
  }
  double f = 0, b = 0, cf = 0, cb = 0, pf = 0, pb = 0;
  for (const auto& u : t.units) {
    f += u.forward_s, b += u.backward_s;
    if (!u.checkpointed_forward_s) continue;
    cf += u.checkpointed_forward(), cb += u.checkpointed_backward();
    pf += u.forward_s, pb += u.backward_s;
  }
  fmt::print("sum: forward {:.3f} ms, backward {:.3f} ms\n", 1e3 * f, 1e3 * b);
  if (pf > 0)
    fmt::print(
        "checkpointed blocks: forward {:.3f} ms ({:.2f} x plain), backward {:.3f} ms "
        "(plain backward + {:.2f} x plain forward)\n",
        1e3 * cf, cf / pf, 1e3 * cb, (cb - pb) / pf);
}

int run_profile(ProfileArgs& a) {
  if (a.threads > 0) torch::set_num_threads(a.threads);
  fmt::print("{}\n", configure_host_heap(a.heap_keep_mb).describe());
  a.options.device = torch::Device(a.device);
  for (const auto& g : a.freeze) a.options.freeze.push_back(parse_choice<UnitGroup>(g, "--freeze"));
  if (a.cpu_clock) {
    OMNIBAL_CHECK(torch::get_num_threads() == 1,
                  "profile: --cpu-clock times the calling thread only; use it with --threads 1");
    a.options.clock = profile::ProfileClock::kThreadCpu;
  }
  a.options.statistic =
      a.statistic == "mean" ? profile::ProfileStatistic::kMean : profile::ProfileStatistic::kMedian;
  const ModelPreset preset = load_model_preset(a.preset);
  const auto result = profile::profile_units(preset, a.options);
  print_table(result, a.statistic);
  partition::write_unit_cost_table(result.table, a.out);
  fmt::print("wrote {} ({} threads)\n", a.out, torch::get_num_threads());
  return 0;
}

}  // namespace

void register_profile_command(CLI::App& app, Actions& actions) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd =
      app.add_subcommand("profile", "per-unit cost table of a preset under a balanced pack");
  cmd->add_option("--preset", a->preset, "model preset (tiny, base-100m or a .yaml)");
  cmd->add_option("--q-vit", a->options.pack.q_vit, "Q_v: ViT tiles of the profiling pack")
      ->required();
  cmd->add_option("--q-tok", a->options.pack.q_tok, "Q_t: LLM tokens of the profiling pack")
      ->required();
  cmd->add_option("--samples-per-pack", a->options.pack.samples, "samples in the pack (default 4)");
  cmd->add_option("--repeats", a->options.repeats, "timed runs per unit (default 5)");
  cmd->add_option("--statistic", a->statistic,
                  "what a unit's table time is of its repeats: median (default; robust to a few "
                  "outliers) or mean (the expected time on a host whose speed changes)")
      ->check(CLI::IsMember({"median", "mean"}));
  cmd->add_option("--warmup", a->options.warmup, "untimed runs per unit (default 1)");
  cmd->add_option("--tp", a->options.tp,
                  "profile one TP rank's shards at this parallel.tp (compute only; the table "
                  "records tp and the all-reduce volumes, the simulator adds their time)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--split-backward", a->options.split_backward,
                "also time ZB-H1's split backward: W (deferred weight gradients) and its bytes "
                "per unit (backward_weight_s, weight_grad_bytes)");
  cmd->add_flag("!--no-checkpointed", a->options.checkpointed,
                "skip timing the ViT / LLM blocks checkpointed (checkpointed_forward_s, "
                "checkpointed_backward_s: what recomputation costs; they double the blocks' time)");
  cmd->add_option("--freeze", a->freeze, "train.freeze groups: vit, projector, llm");
  cmd->add_option("--seed", a->options.pack.seed, "seed of the pack's lengths and values");
  cmd->add_option("--threads", a->threads, "intra-op threads (default: LibTorch's)");
  cmd->add_option("--heap-keep-mb", a->heap_keep_mb,
                  "MiB of freed memory malloc keeps, as the trainer's runtime.heap_keep_mb "
                  "(0 = allocator defaults)");
  cmd->add_flag("--cpu-clock", a->cpu_clock,
                "time by the thread's CPU clock (with --threads 1; robust to busy shared cores)");
  cmd->add_option("--device", a->device, "cpu or cuda[:i] (CUDA LibTorch builds)");
  cmd->add_option("--out", a->out, "cost table JSON to write")->required();
  cmd->callback([a, &actions] { actions.push_back([a] { return run_profile(*a); }); });
}

}  // namespace omnibal::plan

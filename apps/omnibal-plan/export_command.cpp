// `omnibal-plan export`: a training checkpoint (a step-N directory, or a checkpoint root whose
// newest verified step is taken) as a Hugging Face InternVL checkpoint (lib/checkpoint/hf_export.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <set>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_export.h"
#include "commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/model_preset.h"

namespace omnibal::plan {

namespace {

struct ExportArgs {
  std::string checkpoint, out, preset, style, dtype = "bf16";
  double max_shard_gb = 5.0;
};

int run_export(const ExportArgs& a) {
  std::string dir = a.checkpoint;
  if (!checkpoint::parse_step_dir(dir)) {
    const auto latest = checkpoint::find_latest_checkpoint(dir);
    OMNIBAL_CHECK(latest.has_value(), "export: ", dir, " is neither a step-N checkpoint nor a directory holding one that verifies");
    dir = *latest;
  } else {
    checkpoint::verify_checkpoint(dir);
  }
  // The checkpoint's config carries model.preset and the resolved model.hf_style
  // (checkpoint/hf_style.h); --preset / --style override them.
  const Config saved = load_config(dir + "/config.yaml");
  const ModelPreset preset = load_model_preset(a.preset.empty() ? saved.model.preset : a.preset);
  checkpoint::HfExportOptions options;
  const std::string style = a.style.empty() ? saved.model.hf_style : a.style;
  options.style = style == "auto" ? checkpoint::HfLlmStyle::kInternLm2 : checkpoint::parse_hf_llm_style(style);
  options.max_shard_bytes = static_cast<uint64_t>(a.max_shard_gb * 1e9);
  if (a.dtype == "bf16") options.dtype = torch::kBFloat16;
  else if (a.dtype == "fp16") options.dtype = torch::kHalf;
  else if (a.dtype == "fp32") options.dtype = torch::kFloat;
  else OMNIBAL_CHECK(a.dtype == "keep", "export --dtype: expected bf16, fp16, fp32 or keep, got ", a.dtype);
  // Only parameter names are read; optimizer state stays on disk.
  std::vector<std::string> wanted;
  const auto stored = checkpoint::checkpoint_tensor_names(dir);
  const std::set<std::string> stored_set(stored.begin(), stored.end());
  for (const auto& m : checkpoint::hf_mappings(preset, options.style))
    for (const auto& p : m.parts)
      if (stored_set.count(p)) wanted.push_back(p);
  const auto tensors = checkpoint::load_checkpoint_tensors(dir, wanted);
  const auto report = checkpoint::export_hf(tensors, preset, a.out, options);
  fmt::print("exported {} ({} preset, {} layout): {} tensors, {:.1f} MB in {} shard(s) to {}\n", dir, preset.name,
             checkpoint::hf_llm_style_name(options.style), report.tensors, report.bytes / 1e6, report.files.size(), a.out);
  return 0;
}

}  // namespace

void register_export_command(CLI::App& app, Actions& actions) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "a training checkpoint as a Hugging Face InternVL checkpoint");
  cmd->add_option("--checkpoint", args->checkpoint, "step-N directory, or a root (newest verified step)")
      ->required();
  cmd->add_option("--out", args->out, "output directory (safetensors shards + index + config.json)")->required();
  cmd->add_option("--preset", args->preset, "model preset (default: model.preset of the checkpoint's config)");
  cmd->add_option("--style", args->style,
                  "LLM naming: internlm2 | llama | llama-fused (default: model.hf_style of the checkpoint's "
                  "config, which the trainer resolved from init_from's config.json; internlm2 without one)");
  cmd->add_option("--dtype", args->dtype, "bf16 | fp16 | fp32 | keep")->capture_default_str();
  cmd->add_option("--max-shard-gb", args->max_shard_gb, "largest shard in GB (1e9 bytes)")->capture_default_str();
  cmd->callback([args, &actions] { actions.push_back([args] { return run_export(*args); }); });
}

}  // namespace omnibal::plan

// `omnibal-plan export`: a training checkpoint (a step-N directory, or a checkpoint root whose
// newest verified step is taken) as a Hugging Face InternVL checkpoint (lib/checkpoint/hf_export.h).
// What training used (tiling, thumbnail, chat template, pad id) comes from the checkpoint's config
// through data::sample_options, the function training builds its sample pipeline with, and from
// the tokenizer it names.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <set>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_style.h"
#include "commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/model_preset.h"
#include "data/sample_processor.h"
#include "data/tokenizer.h"

namespace omnibal::plan {

namespace {

struct ExportArgs {
  std::string checkpoint, out, preset, style, tokenizer, dtype = "bf16";
  double max_shard_gb = 5.0;
};

/// config.json's record of training: tiles and template as data::sample_options gives them to
/// training; the pad id of `tokenizer` (default data.tokenizer), or 0 when that file is absent
/// (0 is SentencePiece's unk, the pad omnibal's tokenizer falls back to; packs are never padded).
checkpoint::HfTrainingSettings trained_settings(const Config& saved, const ModelPreset& preset,
                                                const std::string& tokenizer) {
  const data::SampleOptions s = data::sample_options(saved.data, preset);
  checkpoint::HfTrainingSettings t;
  t.with_tiles(s.tiling.min_tiles, s.tiling.max_tiles)
      .with_thumbnail(s.tiling.thumbnail)
      .with_chat_template(s.template_name);
  const std::string path = tokenizer.empty() ? saved.data.tokenizer : tokenizer;
  if (!path.empty() && std::filesystem::exists(path)) {
    const data::Tokenizer tok(path);
    OMNIBAL_CHECK(tok.vocab_size() <= preset.llm.vocab_size, "export: tokenizer ", path, " has ",
                  tok.vocab_size(), " pieces, more than preset ", preset.name, "'s vocab_size ",
                  preset.llm.vocab_size);
    t.with_pad_token_id(tok.special().pad);
  } else {
    OMNIBAL_CHECK(tokenizer.empty(), "export --tokenizer: ", tokenizer, " does not exist");
    fmt::print(
        "export: tokenizer '{}' not found; pad_token_id 0 (give --tokenizer for the model's own)\n",
        path);
  }
  return t;
}

int run_export(const ExportArgs& a) {
  std::string dir = a.checkpoint;
  if (!checkpoint::parse_step_dir(dir)) {
    const auto latest = checkpoint::find_latest_checkpoint(dir);
    OMNIBAL_CHECK(latest.has_value(), "export: ", dir,
                  " is neither a step-N checkpoint nor a directory holding one that verifies");
    dir = *latest;
  } else {
    checkpoint::verify_checkpoint(dir);
  }
  // The checkpoint's config carries model.preset and the resolved model.hf_style
  // (checkpoint/hf_style.h); --preset / --style override them.
  const Config saved = load_config(dir + "/config.yaml");
  const ModelPreset preset = load_model_preset(a.preset.empty() ? saved.model.preset : a.preset);
  checkpoint::HfExportOptions options;
  options.style = a.style.empty() ? checkpoint::resolve_hf_style(saved.model.hf_style, "")
                                  : checkpoint::parse_hf_style(a.style);
  options.max_shard_bytes = static_cast<uint64_t>(a.max_shard_gb * 1e9);
  options.trained = trained_settings(saved, preset, a.tokenizer);
  if (a.dtype == "bf16") options.dtype = torch::kBFloat16;
  else if (a.dtype == "fp16") options.dtype = torch::kHalf;
  else if (a.dtype == "fp32") options.dtype = torch::kFloat;
  else
    OMNIBAL_CHECK(a.dtype == "keep", "export --dtype: expected bf16, fp16, fp32 or keep, got ",
                  a.dtype);
  // Only parameter names are read; optimizer state stays on disk.
  std::vector<std::string> wanted;
  const auto stored = checkpoint::checkpoint_tensor_names(dir);
  const std::set<std::string> stored_set(stored.begin(), stored.end());
  for (const auto& m : checkpoint::hf_mappings(preset, options.style))
    for (const auto& p : m.parts)
      if (stored_set.count(p)) wanted.push_back(p);
  const auto tensors = checkpoint::load_checkpoint_tensors(dir, wanted);
  const auto report = checkpoint::export_hf(tensors, preset, a.out, options);
  fmt::print("exported {} ({} preset, {} layout): {} tensors, {:.1f} MB in {} shard(s) to {}\n",
             dir, preset.name, choice_name(options.style), report.tensors, report.bytes / 1e6,
             report.files.size(), a.out);
  fmt::print("config.json: template {}, tiles {}..{}{}, pad_token_id {}\n",
             checkpoint::internvl_template_name(options.trained.chat_template),
             options.trained.min_dynamic_patch, options.trained.max_dynamic_patch,
             options.trained.use_thumbnail ? " + thumbnail" : "", options.trained.pad_token_id);
  return 0;
}

}  // namespace

void register_export_command(CLI::App& app, Actions& actions) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd =
      app.add_subcommand("export", "a training checkpoint as a Hugging Face InternVL checkpoint");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "step-N directory, or a root (newest verified step)")
      ->required();
  cmd->add_option("--out", args->out, "output directory (safetensors shards + index + config.json)")
      ->required();
  cmd->add_option("--preset", args->preset,
                  "model preset (default: model.preset of the checkpoint's config)");
  cmd->add_option(
      "--style", args->style,
      "LLM naming: internlm2 | llama | llama-fused (default: model.hf_style of the checkpoint's "
      "config, which the trainer resolved from init_from's config.json; internlm2 without one)");
  cmd->add_option(
      "--tokenizer", args->tokenizer,
      "SentencePiece model whose pad id config.json records (default: data.tokenizer of the "
      "checkpoint's config; pad 0 when that file is absent)");
  cmd->add_option("--dtype", args->dtype, "bf16 | fp16 | fp32 | keep")->capture_default_str();
  cmd->add_option("--max-shard-gb", args->max_shard_gb, "largest shard in GB (1e9 bytes)")
      ->capture_default_str();
  cmd->callback([args, &actions] { actions.push_back([args] { return run_export(*args); }); });
}

}  // namespace omnibal::plan

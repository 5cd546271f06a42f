// `omnibal-plan scan`: per-sample tile and token lengths of a meta file's datasets, in the
// OmniBal length format that `omnibal-plan data` packs (lib/data/length_scanner.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <thread>

#include "commands.h"
#include "core/config.h"
#include "core/model_preset.h"
#include "data/input_checks.h"
#include "data/length_scanner.h"

namespace omnibal::plan {

namespace {

struct ScanArgs {
  std::string meta, preset, out, config, tokenizer, on_bad_sample;
  std::vector<std::string> overrides;
  int threads = 0;
};

int run_scan(const ScanArgs& a) {
  std::vector<std::string> overrides = a.overrides;
  if (!a.preset.empty()) overrides.push_back("model.preset=" + a.preset);
  if (!a.tokenizer.empty()) overrides.push_back("data.tokenizer=" + a.tokenizer);
  if (!a.on_bad_sample.empty()) overrides.push_back("data.on_bad_sample=" + a.on_bad_sample);
  const Config config = load_config(a.config, overrides);
  OMNIBAL_CHECK(!config.data.tokenizer.empty(),
                "scan: no tokenizer; pass --tokenizer M.model or set data.tokenizer");
  const ModelPreset preset = load_model_preset(config.model.preset);
  const auto policy = config.data.on_bad_sample;
  const data::Tokenizer tokenizer(config.data.tokenizer);
  data::check_tokenizer_fits(tokenizer, preset, config.model.preset);
  const data::SampleProcessor processor(tokenizer, data::sample_options(config.data, preset));
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const auto dataset = data::ConversationDataset::load(a.meta, policy);
  const auto t1 = Clock::now();
  const int threads = a.threads > 0
                          ? a.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto result = data::scan_lengths(dataset, processor, policy, threads);
  const auto t2 = Clock::now();
  std::vector<data::SampleLengths> flat;
  for (const auto& l : result.lengths) flat.insert(flat.end(), l.begin(), l.end());
  for (const auto& warning :
       data::check_empty_datasets(a.meta, dataset, flat, config.data.allow_empty_datasets))
    fmt::print("{}\n", warning);
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  fmt::print("read {} samples in {:.3f} s; scanned them with {} thread(s) in {:.3f} s\n",
             dataset.size(), seconds(t1 - t0), threads, seconds(t2 - t1));
  for (const auto& file : data::write_scan(a.out, dataset, result)) fmt::print("wrote {}\n", file);
  for (int d = 0; d < dataset.num_datasets(); ++d) {
    int64_t n = 0, tiles = 0, tokens = 0;
    for (const auto& l : result.lengths[d]) {
      if (l.vit_num < 0) continue;
      ++n, tiles += l.vit_num, tokens += l.token_num;
    }
    fmt::print("{}: {} samples, mean {:.2f} tiles, mean {:.1f} tokens\n", dataset.meta(d).name, n,
               n ? static_cast<double>(tiles) / n : 0.0, n ? static_cast<double>(tokens) / n : 0.0);
  }
  fmt::print("{}\n", result.bad.report());
  return 0;
}

}  // namespace

void register_scan_command(CLI::App& app, Actions& actions) {
  auto args = std::make_shared<ScanArgs>();
  auto* cmd = app.add_subcommand("scan", "per-sample vit_num/token_num/image_flags of a meta file");
  cmd->add_option("--meta", args->meta, "InternVL-style meta file")->required();
  cmd->add_option("--out", args->out, "output directory (per dataset + meta.json) or FILE.json")
      ->required();
  cmd->add_option("--preset", args->preset, "model preset (default: model.preset)");
  cmd->add_option("--threads", args->threads, "scan threads (default: all cores)");
  cmd->add_option("--tokenizer", args->tokenizer, "SentencePiece model (default: data.tokenizer)");
  cmd->add_option("--on-bad-sample", args->on_bad_sample, "error | skip (data.on_bad_sample)");
  cmd->add_option("--config", args->config, "YAML config for data.* and model.preset");
  cmd->add_option("--set", args->overrides, "config override a.b=c (repeatable)");
  cmd->callback([args, &actions] { actions.push_back([args] { return run_scan(*args); }); });
}

}  // namespace omnibal::plan

// YAML <-> config structs. One reader visitor and one writer visitor walk every struct's
// visit_fields(), so a key is declared exactly once.
#include "core/config.h"

#include <cmath>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/yaml_struct.h"

namespace omnibal {
namespace {

using yaml_struct::where;

/// Applies "a.b.c=value" to the document tree, creating maps on the way.
void apply_override(YAML::Node& root, const std::string& text) {
  const auto eq = text.find('=');
  OMNIBAL_CHECK(eq != std::string::npos && eq > 0, "--set '", text,
                "': expected key=value, e.g. --set parallel.dp=2");
  const std::string key = text.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    OMNIBAL_FAIL("--set '", text, "': the value is not valid YAML: ", e.msg);
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) {
    OMNIBAL_CHECK(!part.empty(), "--set '", text, "': empty component in key '", key, "'");
    parts.push_back(part);
  }
  // yaml-cpp nodes are handles: walk by reassigning copies of child handles.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = chain.back()[parts[i]];
    if (!child.IsMap()) {
      OMNIBAL_CHECK(!child.IsDefined() || child.IsNull(), "--set '", text, "': '", parts[i],
                    "' is not a section");
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child = chain.back()[parts[i]];
    }
    chain.push_back(child);
  }
  chain.back()[parts.back()] = value;
}

/// The node of dotted `key` ("train.steps") under `root`; an undefined node when it is absent.
YAML::Node find_key(const YAML::Node& root, const std::string& key) {
  YAML::Node node;
  node.reset(root);  // reset rebinds; operator= would assign into the tree
  std::stringstream path(key);
  for (std::string part; std::getline(path, part, '.');) {
    if (!node.IsMap() || !node[part]) return YAML::Node(YAML::NodeType::Undefined);
    node.reset(node[part]);
  }
  return node;
}

/// Whether dotted key `a` is `b` or one holds the other ("parallel.partition" and
/// "parallel.partition.manual").
bool keys_overlap(const std::string& a, const std::string& b) {
  const std::string& shorter = a.size() <= b.size() ? a : b;
  const std::string& longer = a.size() <= b.size() ? b : a;
  return longer.compare(0, shorter.size(), shorter) == 0 &&
         (longer.size() == shorter.size() || longer[shorter.size()] == '.');
}

/// Where the value of dotted `key` ("train.steps") comes from: the last --set that names it or a
/// section around it (--set 'parallel.partition={manual: [5, 5]}' for
/// parallel.partition.manual), or "origin:line" of its node in the file; empty when the key is a
/// default.
std::string source_of(const std::string& key, const YAML::Node& file_root,
                      const std::string& origin, const std::vector<std::string>& overrides) {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
    if (keys_overlap(it->substr(0, it->find('=')), key)) return "--set '" + *it + "'";
  const YAML::Node node = find_key(file_root, key);
  if (!node.IsDefined() || node.Mark().line < 0) return "";
  return origin + ":" + std::to_string(node.Mark().line + 1);
}

/// Old spellings onto their keys: train.zero1 true -> train.shard optimizer (with a warning;
/// refused together with another shard mode). Messages name where train.zero1 was set.
void map_deprecated_keys(Config& config, const YAML::Node& root, const std::string& origin,
                         const std::vector<std::string>& overrides) {
  TrainConfig& t = config.train;
  if (!t.zero1) return;
  std::string where = source_of("train.zero1", root, origin, overrides);
  if (where.empty()) where = origin;
  OMNIBAL_CHECK(t.shard != ShardMode::kFull, where,
                ": train.zero1 true (deprecated: train.shard optimizer) contradicts train.shard "
                "full; set train.shard alone");
  if (t.shard == ShardMode::kNone)
    log_info("{}: train.zero1 is deprecated; read as train.shard: optimizer", where);
  t.shard = ShardMode::kOptimizer;
  t.zero1 = false;
}

/// Config::validate() with its error prefixed by where the offending key was set (the message
/// names the key first: "train.steps: expected >= 0, got -3").
void validate_with_source(const Config& config, const YAML::Node& file_root,
                          const std::string& origin, const std::vector<std::string>& overrides) {
  try {
    config.validate();
  } catch (const Error& e) {
    const std::string what = e.what();
    std::smatch m;
    static const std::regex kKey(R"(([a-z_]+(\.[a-z_]+)+): )");
    if (!std::regex_search(what, m, kKey)) throw;
    const std::string source = source_of(m[1].str(), file_root, origin, overrides);
    if (source.empty()) throw;
    throw Error(source + ": " + what);
  }
}

Config parse_node(YAML::Node root, const std::string& origin,
                  const std::vector<std::string>& overrides) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  OMNIBAL_CHECK(root.IsMap(), origin, ": expected a mapping of config sections at the top level");
  if (!overrides.empty()) {
    // Read the file alone first, then once per override, so that an error names its source:
    // "file:line" for the file, "--set 'key=value'" for an override (configs are small).
    Config check;
    yaml_struct::read_section(root, origin, check);
    for (const auto& o : overrides) {
      apply_override(root, o);
      Config with_override;
      yaml_struct::read_section(root, "--set '" + o + "'", with_override);
    }
  }
  Config config;
  yaml_struct::read_section(root, origin, config);
  map_deprecated_keys(config, root, origin, overrides);
  validate_with_source(config, root, origin, overrides);
  return config;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    OMNIBAL_FAIL(origin, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
  }
  return parse_node(root, origin, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty()) return parse_node(YAML::Node(YAML::NodeType::Map), "<defaults>", overrides);
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), "cannot open config file '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_config(buffer.str(), path, overrides);
}

std::string to_yaml(const Config& config) { return yaml_struct::write_section(config); }

std::vector<std::string> config_differences(const Config& a, const Config& b,
                                            const std::vector<std::string>& keys) {
  return yaml_differences(to_yaml(a), to_yaml(b), keys);
}

std::vector<std::string> yaml_differences(const std::string& a_yaml, const std::string& b_yaml,
                                          const std::vector<std::string>& keys) {
  const YAML::Node ya = YAML::Load(a_yaml), yb = YAML::Load(b_yaml);
  const auto find = [](const YAML::Node& root, const std::string& key) {
    YAML::Node node = find_key(root, key);
    OMNIBAL_CHECK(node.IsDefined(), "config_differences: no key '", key, "'");
    return node;
  };
  const auto text = [](const YAML::Node& node) {
    if (!node.IsDefined()) return std::string("(absent)");
    YAML::Emitter out;
    out << YAML::Flow << node;
    return std::string(out.c_str());
  };
  std::vector<std::string> changed;
  // A section is compared key by key (both configs have the same keys), a value as a whole.
  std::function<void(const std::string&, const YAML::Node&, const YAML::Node&)> compare =
      [&](const std::string& key, const YAML::Node& na, const YAML::Node& nb) {
        if (na.IsMap() && nb.IsMap()) {
          for (const auto& child : na) {
            const std::string name = child.first.as<std::string>();
            compare(key + "." + name, child.second, nb[name]);
          }
          return;
        }
        if (text(na) != text(nb)) changed.push_back(key + ": " + text(na) + " -> " + text(nb));
      };
  for (const auto& key : keys) compare(key, find(ya, key), find(yb, key));
  return changed;
}

// ---- validation: one function per section, each naming the full key ----

namespace {
template <class T> void check_positive(const std::string& key, T value) {
  OMNIBAL_CHECK(value > 0, key, ": expected a positive value, got ", value);
}
}  // namespace

void ParallelConfig::validate(const std::string& w) const {
  check_positive(w + "dp", dp);
  check_positive(w + "pp", pp);
  check_positive(w + "tp", tp);
  check_positive(w + "micro_batches", micro_batches);
  check_positive(w + "virtual_stages", virtual_stages);
  // ZB-V always runs 2 model chunks per rank (a V); virtual_stages 2 says so, 1 is the default.
  const bool zb_v = schedule == PipelineSchedule::kZbV;
  OMNIBAL_CHECK(virtual_stages == 1 || schedule == PipelineSchedule::kInterleaved ||
                    schedule == PipelineSchedule::kAuto || (zb_v && virtual_stages == 2),
                w, "virtual_stages: ", virtual_stages, " model chunks per rank need schedule: ",
                "interleaved (or auto; zb-v runs 2), got schedule: ", choice_name(schedule));
  if (schedule == PipelineSchedule::kInterleaved) {
    OMNIBAL_CHECK(virtual_stages >= 2, w,
                  "virtual_stages: the interleaved schedule needs at least 2 model chunks per "
                  "rank, got ",
                  virtual_stages);
    // Megatron's interleaved 1F1B runs micro-batches in groups of pp per chunk.
    OMNIBAL_CHECK(micro_batches % pp == 0, w, "micro_batches: the interleaved schedule needs a ",
                  "multiple of pp (", pp, ") micro-batches per step, got ", micro_batches);
  }
  const int chunks = pp * (schedule == PipelineSchedule::kInterleaved ? virtual_stages
                           : zb_v                                     ? 2
                                                                      : 1);
  if (partition.method == PartitionMethod::kManual) {
    OMNIBAL_CHECK(static_cast<int>(partition.manual.size()) == chunks, w,
                  "partition.manual: expected one unit count per pipeline stage",
                  chunks == pp ? std::string()
                  : zb_v       ? " and model chunk (2 x pp under zb-v, in model order)"
                               : " and model chunk (pp x virtual_stages)",
                  " (", chunks, "), got ", partition.manual.size());
    for (int n : partition.manual) check_positive(w + "partition.manual[]", n);
  }
  OMNIBAL_CHECK(partition_trials >= -1, w, "partition_trials: expected -1 (top K) or >= 0, got ",
                partition_trials);
  check_positive(w + "partition_trial_steps", partition_trial_steps);
  OMNIBAL_CHECK(partition_trial_rounds >= 3, w,
                "partition_trial_rounds: expected >= 3 (the trials' t test needs a spread of "
                "the rounds), got ",
                partition_trial_rounds);
  OMNIBAL_CHECK(partition_radius >= 0, w, "partition_radius: expected >= 0, got ",
                partition_radius);
  check_positive(w + "partition_top_k", partition_top_k);
}

void BalanceConfig::validate(const std::string& w) const {
  OMNIBAL_CHECK(method != BalanceMethod::kIsfRandomPlacement, w,
                "method: isf-random-placement is an ablation of omnibal-plan data; expected isf | "
                "random | length-group | best-fit | multi-source");
  check_positive(w + "samples_per_pack", samples_per_pack);
  OMNIBAL_CHECK(q_vit >= 0, w, "q_vit: expected a tile count >= 0 (0 = search), got ", q_vit);
  OMNIBAL_CHECK(q_tok >= 0, w, "q_tok: expected a token count >= 0 (0 = search), got ", q_tok);
  OMNIBAL_CHECK(q_tok_thresh >= 0 && (q_tok == 0 || q_tok_thresh <= q_tok), w,
                "q_tok_thresh: expected 0 <= q_tok_thresh <= q_tok (", q_tok, "), got ",
                q_tok_thresh);
  check_positive(w + "iterations", iterations);
}

void MemoryConfig::validate(const std::string& w) const {
  for (int n : recompute.per_stage)
    OMNIBAL_CHECK(n >= 0, w, "recompute: expected unit counts >= 0, got ", n);
  OMNIBAL_CHECK(budget_gb >= 0, w, "budget_gb: expected GiB >= 0 (0 = device memory), got ",
                budget_gb);
}

void DataConfig::validate(const std::string& w) const {
  OMNIBAL_CHECK(min_tiles >= 1, w, "min_tiles: expected >= 1, got ", min_tiles);
  OMNIBAL_CHECK(max_tiles >= min_tiles, w, "max_tiles: expected >= min_tiles (", min_tiles,
                "), got ", max_tiles);
  OMNIBAL_CHECK(workers >= 1, w, "workers: expected >= 1, got ", workers);
  OMNIBAL_CHECK(max_image_pixels >= 0, w,
                "max_image_pixels: expected pixels >= 0 (0 = no limit), got ", max_image_pixels);
}

void TrainConfig::validate(const std::string& w) const {
  OMNIBAL_CHECK(steps >= 0, w, "steps: expected >= 0, got ", steps);
  check_positive(w + "log_every", log_every);
  OMNIBAL_CHECK(lr >= 0, w, "lr: expected >= 0, got ", lr);
  OMNIBAL_CHECK(warmup_steps >= 0, w, "warmup_steps: expected >= 0, got ", warmup_steps);
  OMNIBAL_CHECK(checkpoint_every >= 0, w, "checkpoint_every: expected >= 0, got ",
                checkpoint_every);
  check_positive(w + "keep_checkpoints", keep_checkpoints);
  OMNIBAL_CHECK(eval_every >= 0, w, "eval_every: expected >= 0, got ", eval_every);
  OMNIBAL_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, w, "min_lr_ratio: expected [0, 1], got ",
                min_lr_ratio);
  OMNIBAL_CHECK(weight_decay >= 0, w, "weight_decay: expected >= 0, got ", weight_decay);
  OMNIBAL_CHECK(beta1 >= 0 && beta1 < 1, w, "beta1: expected [0, 1), got ", beta1);
  OMNIBAL_CHECK(beta2 >= 0 && beta2 < 1, w, "beta2: expected [0, 1), got ", beta2);
  OMNIBAL_CHECK(grad_clip >= 0, w, "grad_clip: expected >= 0 (0 = off), got ", grad_clip);
  OMNIBAL_CHECK(exit_after_steps >= 0, w, "exit_after_steps: expected >= 0 (0 = off), got ",
                exit_after_steps);
  OMNIBAL_CHECK(std::isfinite(exit_duration_min) && exit_duration_min >= 0, w,
                "exit_duration_min: expected minutes >= 0 (0 = off), got ", exit_duration_min);
  check_positive(w + "max_nonfinite_skips", max_nonfinite_skips);
}

void DebugConfig::validate(const std::string& w) const {
  OMNIBAL_CHECK(fail_at.step >= 0, w, "fail_at.step: expected >= 0, got ", fail_at.step);
}

void RuntimeConfig::validate(const std::string& w) const {
  OMNIBAL_CHECK(threads >= 0, w, "threads: expected >= 0 (0 = auto), got ", threads);
  OMNIBAL_CHECK(!run_dir.empty(), w, "run_dir: expected a directory path");
  for (const int s : trace_steps)
    OMNIBAL_CHECK(s >= 0, w, "trace_steps: expected global steps >= 0, got ", s);
  OMNIBAL_CHECK(heap_keep_mb >= 0, w,
                "heap_keep_mb: expected MiB >= 0 (0 = allocator defaults), got ", heap_keep_mb);
}

void CommConfig::validate(const std::string& w) const {
  check_positive(w + "timeout_s", timeout_s);
  check_positive(w + "stop_grace_s", stop_grace_s);
}

void ModelConfig::validate(const std::string& w) const {
  OMNIBAL_CHECK(!preset.empty(), w, "preset: expected a preset name (models/presets/<name>.yaml)");
  OMNIBAL_CHECK(dropout >= 0.0 && dropout < 1.0, w,
                "dropout: expected a probability in [0, 1), got ", dropout);
}

void LossConfig::validate(const std::string&) const {}  // the reader accepts only the names

void Config::validate() const {
  model.validate("model.");
  parallel.validate("parallel.");
  balance.validate("balance.");
  memory.validate("memory.");
  data.validate("data.");
  train.validate("train.");
  runtime.validate("runtime.");
  comm.validate("comm.");
  loss.validate("loss.");
  debug.validate("debug.");
  if (train.shard == ShardMode::kFull) {
    // As DeepSpeed, which refuses ZeRO-3 with its pipeline engine: each unit's gather and
    // reduce-scatter would interleave with the point-to-point traffic of the stages.
    OMNIBAL_CHECK(parallel.pp == 1,
                  "train.shard: full (ZeRO-3) shards over data parallelism "
                  "only; expected parallel.pp 1 (pipeline stages with ZeRO-1: train.shard "
                  "optimizer), got parallel.pp ",
                  parallel.pp);
    OMNIBAL_CHECK(parallel.schedule != PipelineSchedule::kZbH1 &&
                      parallel.schedule != PipelineSchedule::kZbV,
                  "train.shard: full (ZeRO-3) frees a unit's weights after its backward, which "
                  "the deferred weight gradients of ZB-H1 and ZB-V need; expected "
                  "parallel.schedule 1f1b, interleaved or auto");
  }
}

}  // namespace omnibal

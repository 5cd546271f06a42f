// The run configuration as plain structs, one per concern, parsed once at the edge from YAML
// (yaml-cpp) plus `--set a.b=c` overrides. Library code takes the narrowest const FooConfig&.
// Keys and accepted values: docs/conventions.md; unknown keys and bad values are errors that name
// the file, line and key and say what was expected.
//
// Adding a key: add the member with its default, list it in the struct's visit_fields(), and
// check it in validate() when it has a range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/choices.h"

namespace omnibal {

/// `parallel.partition`: a named method (balanced | uniform | parameters) or `{manual: [...]}`
/// with the number of pipeline units in each stage.
struct PartitionSpec {
  PartitionMethod method = PartitionMethod::kBalanced;
  std::vector<int> manual;  ///< units per stage; only when method == kManual
};

/// `memory.recompute`: adaptive | full | none, or a list with the number of recomputed units
/// of each pipeline stage.
struct RecomputeSpec {
  RecomputeMode mode = RecomputeMode::kAdaptive;
  std::vector<int> per_stage;  ///< only when mode == kPerStage
};

/// 3D-parallel layout and pipeline schedule.
struct ParallelConfig {
  int dp = 1;             ///< data-parallel ranks
  int pp = 1;             ///< pipeline stages
  int tp = 1;             ///< tensor-parallel ranks (Megatron TP, innermost on the grid)
  int micro_batches = 1;  ///< m: micro-batches (packs) per DP rank per step
  /// Pipeline schedule: 1f1b | interleaved | zb-h1 | auto (lib/schedule/schedules.h).
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  /// v: model chunks per pipeline rank under `interleaved` (virtual stages; 1 otherwise). The
  /// model is split into pp * v chunks; rank s holds chunks s, s + pp, ... (Megatron's layout).
  int virtual_stages = 1;
  PartitionSpec partition;    ///< how pipeline units are split into stages
  int partition_trials = -1;  ///< candidates timed for real; -1 = top K of the search
  /// Timed steps per repeat of a partition trial (each repeat the mean of this many steps after
  /// one untimed step); >= 1.
  int partition_trial_steps = 8;
  /// Rounds of partition trials (each times every candidate once; a candidate replaces the
  /// simulator's pick when a t test over the rounds finds it faster,
  /// lib/train/partition_trials.h); >= 3.
  int partition_trial_rounds = 6;
  int partition_radius = 1;  ///< r: how far each boundary moves around the anchor (units)
  int partition_top_k = 3;   ///< K: candidates kept after ranking
  /// Per-unit cost table (omnibal-plan profile / partition --cost-table) for balanced and
  /// adaptive; empty = profile the model at start-up under the run's largest pack.
  std::string cost_table;
  /// Reuse the stage plan (split, recompute, schedule) of an earlier run: a run directory (its
  /// stage_plan.json) or a stage_plan.json file; empty = plan at start-up. Refused when that plan
  /// does not fit this run's pp, v or model.
  std::string plan_from;
  template <class V> void visit_fields(V& v) {
    v("dp", dp);
    v("pp", pp);
    v("tp", tp);
    v("micro_batches", micro_batches);
    v("schedule", schedule);
    v("virtual_stages", virtual_stages);
    v("partition", partition);
    v("partition_trials", partition_trials);
    v("partition_trial_steps", partition_trial_steps);
    v("partition_trial_rounds", partition_trial_rounds);
    v("partition_radius", partition_radius);
    v("partition_top_k", partition_top_k);
    v("cost_table", cost_table);
    v("plan_from", plan_from);
  }
  void validate(const std::string& where) const;
};

/// Data balance (OmniBal §3.1, ISF). Budgets left at 0 are searched.
struct BalanceConfig {
  BalanceMethod method =
      BalanceMethod::kIsf;   ///< isf | random | length-group | best-fit | multi-source
  int samples_per_pack = 4;  ///< ISF target, stands in for the per-device batch size
  int64_t q_vit = 0;         ///< Q_v: tile budget of one pack (0 = search)
  int64_t q_tok = 0;         ///< Q_t: token budget of one pack (0 = search)
  int64_t q_tok_thresh = 0;  ///< Q'_t: token acceptance threshold (0 = search / Q_t - 128)
  int iterations = 50;       ///< T: ISF sampling-and-filtering rounds
  uint64_t seed = 1024;
  /// count | time: what placement balances (time needs a pack time model; the trainer does not
  /// read this key yet and places by count).
  PlaceBy place_by = PlaceBy::kCount;
  template <class V> void visit_fields(V& v) {
    v("method", method);
    v("samples_per_pack", samples_per_pack);
    v("q_vit", q_vit);
    v("q_tok", q_tok);
    v("q_tok_thresh", q_tok_thresh);
    v("iterations", iterations);
    v("seed", seed);
    v("place_by", place_by);
  }
  void validate(const std::string& where) const;
};

/// Memory balance (OmniBal §3.3, adaptive recomputation).
struct MemoryConfig {
  RecomputeSpec recompute;
  /// Per-device budget in GiB; 0 = default (CPU: 75% of physical memory / ranks on the node,
  /// CUDA: device memory minus 8%), taken as the smallest over all ranks.
  double budget_gb = 0;
  template <class V> void visit_fields(V& v) {
    v("recompute", recompute);
    v("budget_gb", budget_gb);
  }
  void validate(const std::string& where) const;
};

/// Training data (lib/data).
struct DataConfig {
  std::string meta;       ///< InternVL-style meta file (datasets -> annotation, lengths)
  std::string eval_meta;  ///< held-out meta file; empty = no evaluation set
  std::string tokenizer;  ///< SentencePiece .model with the special tokens
  ChatTemplateName template_name =
      ChatTemplateName::kInternLm2Chat;  ///< key `template`: chat template
  int min_tiles = 1;  ///< dynamic tiling: fewest tiles per sample (thumbnail aside)
  int max_tiles = 6;  ///< dynamic tiling: most tiles per sample, split over images
  int workers = 2;    ///< loader threads materialising packs ahead of training
  OnBadSample on_bad_sample = OnBadSample::kError;  ///< error | skip (counted)
  /// Largest width x height of an image, read from its header at the start-up scan (a
  /// decompression bomb guard; PIL's Image.MAX_IMAGE_PIXELS); 0 = no limit.
  int64_t max_image_pixels = 89478485;
  /// A dataset of the meta file with no samples: an error (false) or a warning (true).
  bool allow_empty_datasets = false;
  template <class V> void visit_fields(V& v) {
    v("meta", meta);
    v("eval_meta", eval_meta);
    v("tokenizer", tokenizer);
    v("template", template_name);
    v("min_tiles", min_tiles);
    v("max_tiles", max_tiles);
    v("workers", workers);
    v("on_bad_sample", on_bad_sample);
    v("max_image_pixels", max_image_pixels);
    v("allow_empty_datasets", allow_empty_datasets);
  }
  void validate(const std::string& where) const;
};

/// Optimisation schedule and checkpoints.
struct TrainConfig {
  int steps = 100;
  double lr = 1e-3;
  int warmup_steps = 10;
  std::vector<UnitGroup> freeze;  ///< unit groups to freeze: vit, projector, llm
  int checkpoint_every = 0;       ///< 0 = only at the end
  int keep_checkpoints = 2;
  int eval_every = 0;  ///< 0 = no periodic evaluation
  uint64_t seed = 1234;
  double min_lr_ratio = 0.1;         ///< cosine decay ends at lr * min_lr_ratio
  double weight_decay = 0.05;        ///< AdamW decoupled decay (not on norms, biases, scales)
  double beta1 = 0.9, beta2 = 0.95;  ///< AdamW moment decays
  double grad_clip = 1.0;            ///< global gradient-norm clip; 0 = off
  /// For scheduler time slots (Megatron's --exit-interval / --exit-duration-in-mins): after
  /// this many steps of this process (not the global step), write a checkpoint and exit 0 at
  /// the step boundary; `--resume auto` with the same config continues bitwise. 0 = off.
  int exit_after_steps = 0;
  /// The same after this many minutes since the trainer started (start-up included), agreed
  /// over all ranks at each step boundary. 0 = off.
  double exit_duration_min = 0;
  /// Parameters and activations in fp32 or bf16 (Megatron's --bf16): bf16 keeps fp32 master
  /// weights, AdamW moments and the gradient accumulation buffer (train/distributed_optimizer.h).
  Precision precision = Precision::kFp32;
  /// What DP shards (ShardMode, core/choices.h): none | optimizer (ZeRO-1) | full (ZeRO-3).
  ShardMode shard = ShardMode::kNone;
  /// Deprecated spelling of `shard: optimizer` (true), read for old configs and checkpoints:
  /// load_config maps it onto `shard` with a warning and leaves it false.
  bool zero1 = false;
  /// True when the optimizer state is sharded over DP (train.shard optimizer).
  bool zero1_on() const { return shard == ShardMode::kOptimizer; }
  /// Console progress line every N steps (ETA, samples/s, bubble, Dist Ratio), one updating
  /// line on a terminal; metrics.jsonl keeps every step. The first and last step always print.
  int log_every = 10;
  /// A step whose loss or gradient norm is NaN / Inf on any rank: stop (an error naming the
  /// step, the quantity and the stage / rank) or skip (the update is not applied; counted in
  /// summary.json).
  OnNonFinite on_nonfinite = OnNonFinite::kStop;
  /// Under on_nonfinite skip: the most consecutive skipped steps before the run stops; >= 1.
  int max_nonfinite_skips = 3;
  template <class V> void visit_fields(V& v) {
    v("steps", steps);
    v("lr", lr);
    v("warmup_steps", warmup_steps);
    v("freeze", freeze);
    v("checkpoint_every", checkpoint_every);
    v("keep_checkpoints", keep_checkpoints);
    v("eval_every", eval_every);
    v("seed", seed);
    v("min_lr_ratio", min_lr_ratio);
    v("weight_decay", weight_decay);
    v("beta1", beta1);
    v("beta2", beta2);
    v("grad_clip", grad_clip);
    v("exit_after_steps", exit_after_steps);
    v("exit_duration_min", exit_duration_min);
    v("precision", precision);
    v("shard", shard);
    v("zero1", zero1);
    v("log_every", log_every);
    v("on_nonfinite", on_nonfinite);
    v("max_nonfinite_skips", max_nonfinite_skips);
  }
  void validate(const std::string& where) const;
};

/// Process-level settings.
struct RuntimeConfig {
  int threads = 0;  ///< intra-op threads per rank; 0 = max(1, cores / local ranks)
  std::string run_dir = "runs/default";
  /// Global steps (0-based) written as Chrome trace-event JSON to <run_dir>/trace/step-N.json
  /// (Perfetto, chrome://tracing); default the two steps after a 2-step warm-up; [] = none.
  std::vector<int> trace_steps{2, 3};
  /// MiB of freed host memory glibc's malloc keeps for the next micro-batch instead of
  /// returning it to the kernel (core/host_heap.h); 0 = the allocator's defaults.
  int heap_keep_mb = 1024;
  /// Where each rank computes: cpu, or cuda (device local rank % device count; start-up fails
  /// when CUDA is missing or the node has fewer devices than ranks, train/run_device.h).
  RuntimeDevice device = RuntimeDevice::kCpu;
  /// CUDA: the stage executor waits for the device at the end of each compute instruction, so
  /// step times, the bubble and traces are device time (train::timer_sync); false lets the host
  /// queue kernels ahead. No effect on the CPU.
  bool sync_timers = true;
  template <class V> void visit_fields(V& v) {
    v("threads", threads);
    v("run_dir", run_dir);
    v("trace_steps", trace_steps);
    v("heap_keep_mb", heap_keep_mb);
    v("device", device);
    v("sync_timers", sync_timers);
  }
  void validate(const std::string& where) const;
};

/// Communication.
struct CommConfig {
  double timeout_s = 300;  ///< watchdog: a collective or receive stuck this long aborts the job
  /// After SIGTERM/SIGINT, a wait still blocked this long aborts the job: the peer it waits for
  /// has most likely died (mpirun signals the survivors of an MPI_Abort). Keep it below
  /// mpirun's odls_base_sigkill_timeout and above the slowest checkpoint write.
  double stop_grace_s = 20;
  /// Dtype of the DP gradient reduction (all-reduce or ZeRO-1 reduce-scatter) of the fp32
  /// accumulation buffer: fp32, or bf16 (half the bytes on the wire, summed in bf16).
  Precision grad_reduce_dtype = Precision::kFp32;
  /// Overlap the DP gradient reduction with the backward (each bucket reduced as soon as its
  /// last gradient of the step is produced) and, under train.shard optimizer, the parameter
  /// all-gather with the next step's forward (Megatron's overlap_grad_reduce /
  /// overlap_param_gather, DeepSpeed's overlap_comm). Results equal false within float
  /// reordering.
  bool overlap = true;
  template <class V> void visit_fields(V& v) {
    v("timeout_s", timeout_s);
    v("stop_grace_s", stop_grace_s);
    v("grad_reduce_dtype", grad_reduce_dtype);
    v("overlap", overlap);
  }
  void validate(const std::string& where) const;
};

/// `debug.fail_at`: throw an injected error on `rank` at `step` (tests of job failure).
struct FailAtConfig {
  int rank = -1;                          ///< world rank; -1 = never
  int step = 0;                           ///< 0-based training step
  FailWhere where = FailWhere::kForward;  ///< forward | backward | loader | step
  template <class V> void visit_fields(V& v) {
    v("rank", rank);
    v("step", step);
    v("where", where);
  }
};

/// Fault injection and diagnostics.
struct DebugConfig {
  FailAtConfig fail_at;
  template <class V> void visit_fields(V& v) { v("fail_at", fail_at); }
  void validate(const std::string& where) const;
};

/// Which architecture to build (models/presets/<preset>.yaml).
struct ModelConfig {
  std::string preset = "tiny";
  std::string init_from;  ///< Hugging Face InternVL directory to start from ("" = none)
  std::vector<std::string> allow_missing;  ///< glob patterns of tensors init_from may lack
  /// Residual dropout of every ViT and LLM block during training, in [0, 1) (models/dropout.h:
  /// counter-based masks; evaluation runs without). 0 = off.
  double dropout = 0.0;
  /// Hugging Face LLM naming: auto | internlm2 | llama | llama-fused (checkpoint/hf_style.h).
  /// auto is settled before training (train/run_config.h: the resumed checkpoint's value, else
  /// init_from's config.json, else internlm2); the run saves the resolved value, export uses it.
  HfStyle hf_style = HfStyle::kAuto;
  template <class V> void visit_fields(V& v) {
    v("preset", preset);
    v("init_from", init_from);
    v("allow_missing", allow_missing);
    v("dropout", dropout);
    v("hf_style", hf_style);
  }
  void validate(const std::string& where) const;
};

/// How per-token losses are reduced (models/loss_reduction.h has the formulas).
struct LossConfig {
  LossReduction reduction =
      LossReduction::kToken;  ///< token | sample | square (InternVL's len2weight)
  template <class V> void visit_fields(V& v) { v("reduction", reduction); }
  void validate(const std::string& where) const;
};

/// The whole run configuration.
struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  BalanceConfig balance;
  MemoryConfig memory;
  DataConfig data;
  TrainConfig train;
  RuntimeConfig runtime;
  CommConfig comm;
  LossConfig loss;
  DebugConfig debug;
  template <class V> void visit_fields(V& v) {
    v("model", model);
    v("parallel", parallel);
    v("balance", balance);
    v("memory", memory);
    v("data", data);
    v("train", train);
    v("runtime", runtime);
    v("comm", comm);
    v("loss", loss);
    v("debug", debug);
  }
  /// Checks every section; throws omnibal::Error naming the key.
  void validate() const;
};

/// Loads `path` (may be empty: defaults only), applies `overrides` ("a.b=c", values parsed as
/// YAML so lists work: "parallel.partition={manual: [3, 5]}"), parses and validates.
/// Throws omnibal::Error with "<file>:<line>: <key>: expected ..., got ..." on any problem,
/// including unknown keys.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Parses YAML text (for tests and embedded configs); `origin` names it in errors.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

/// The resolved config as YAML, every key present (written to run directories and checkpoints).
std::string to_yaml(const Config& config);

/// "key: <a's value> -> <b's value>" for each dotted key of `keys` ("parallel.dp",
/// "balance.q_tok") whose YAML value differs between `a` and `b`, in the order of `keys`; a
/// section ("balance") contributes each of its keys that differs ("balance.seed: 1024 -> 7").
/// Throws omnibal::Error naming a key that is not in the config.
std::vector<std::string> config_differences(const Config& a, const Config& b,
                                            const std::vector<std::string>& keys);
/// The same over two YAML documents (a config's, a preset's); a key missing from either
/// document counts as differing.
std::vector<std::string> yaml_differences(const std::string& a_yaml, const std::string& b_yaml,
                                          const std::vector<std::string>& keys);

}  // namespace omnibal

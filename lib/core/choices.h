// Every named choice of the config as an enum, each with one name table: parse (the config and
// command lines), print (to_yaml, logs, summaries) and the error that lists the choices all read
// the same table, so a choice is spelled in exactly one place. Code below the config switches
// over these enums (-Werror=switch: a new value is an error where it is not handled).
//
//   auto m = parse_choice<RecomputeMode>("full", "memory.recompute");   // RecomputeMode::kFull
//   choice_name(m);                                                    // "full"
//   parse_choice<RecomputeMode>("ful", "memory.recompute");
//     -> omnibal::Error "memory.recompute: expected adaptive | full | none, got 'ful'"
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace omnibal {

/// `parallel.partition`: how pipeline units are split into stages. kManual comes from the
/// mapping form `{manual: [units per stage]}`, never from a name.
enum class PartitionMethod { kBalanced, kUniform, kParameters, kManual };

/// `memory.recompute`: which units recompute their activations in the backward pass. kPerStage
/// comes from the list form `[recomputed units per stage]`, never from a name.
enum class RecomputeMode { kAdaptive, kFull, kNone, kPerStage };

/// `balance.method`: the data-balance method (kIsfRandomPlacement: ISF packs dealt out in random
/// order, an ablation of `omnibal-plan data` only).
enum class BalanceMethod {
  kIsf,
  kIsfRandomPlacement,
  kMultiSource,
  kRandom,
  kLengthGroup,
  kBestFit
};

/// `balance.place_by`: what placement balances when it deals packs into steps, DP ranks and
/// micro-batches (lib/balance/step_plan.h). kCount: tiles, then tokens; kTime: predicted seconds
/// of a pack time model (lib/balance/pack_time_model.h), tiles first.
enum class PlaceBy { kCount, kTime };

/// `data.on_bad_sample`: a sample that cannot be read, tokenized or packed stops the run (kError)
/// or is left out and counted (kSkip).
enum class OnBadSample { kError, kSkip };

/// `train.on_nonfinite`: a step whose loss or gradient norm is not finite (NaN / Inf, agreed over
/// every rank) stops the run with an error (kStop) or is not applied and counted (kSkip, at most
/// `train.max_nonfinite_skips` in a row).
enum class OnNonFinite { kStop, kSkip };

/// `train.shard`: what data parallelism shards over the DP ranks (DeepSpeed's ZeRO stages).
/// kNone: every DP rank holds everything (ZeRO-0; gradients all-reduced); kOptimizer: ZeRO-1
/// (Megatron's distributed optimizer: fp32 master weights and moments sharded, gradients
/// reduce-scattered, parameters all-gathered after the step); kFull: ZeRO-3 / FSDP (parameters,
/// gradients and optimizer state sharded per unit, gathered around each unit's compute).
enum class ShardMode { kNone, kOptimizer, kFull };

/// `runtime.device`: where each rank's stage computes: the CPU, or CUDA device
/// (local rank % device count) with NCCL carrying the CUDA tensors (train/run_device.h).
enum class RuntimeDevice { kCpu, kCuda };

/// `model.hf_style`: the Hugging Face LLM naming of init_from / export. kAuto is settled once at
/// start-up (train/run_config.h: the resumed checkpoint's, else init_from's config.json, else
/// internlm2).
enum class HfStyle { kAuto, kInternLm2, kLlama, kLlamaFused };

/// `vit.norm` (model presets): the ViT blocks' normalisation, as InternViT's norm_type: LayerNorm
/// (weight and bias) or RMSNorm (weight only; InternViT-6B).
enum class VitNorm { kLayerNorm, kRmsNorm };

/// `loss.reduction`: how per-token losses are weighted (models/loss_reduction.h has the formulas).
enum class LossReduction { kToken, kSample, kSquare };

/// `data.template`: the chat template that renders conversations into tokens.
enum class ChatTemplateName { kInternLm2Chat };

/// `train.freeze` entries: a group of pipeline units whose parameters get no gradients.
enum class UnitGroup { kVit, kProjector, kLlm };

/// `debug.fail_at.where`: where an injected failure is thrown (tests of job failure).
enum class FailWhere { kForward, kBackward, kLoader, kStep };

/// `train.precision` (parameters and activations; master weights and moments are fp32 in both)
/// and `comm.grad_reduce_dtype` (the DP gradient reduction): fp32 or bf16.
enum class Precision { kFp32, kBf16 };

/// `parallel.schedule`: the pipeline schedule (lib/schedule/schedules.h). k1F1B: non-interleaved
/// 1F1B; kInterleaved: Megatron's interleaved 1F1B over `parallel.virtual_stages` chunks per rank;
/// kZbH1: zero-bubble ZB-H1 (Qi et al., ICLR 2024: backward split into B and W, W in the bubble);
/// kZbV: ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): 2 chunks per
/// rank in a V (rank s holds virtual stages s and 2P-1-s), B/W split, W placed into the bubbles;
/// kAuto: the start-up planner simulates each and picks the fastest that fits memory.
enum class PipelineSchedule { k1F1B, kInterleaved, kZbH1, kZbV, kAuto };

/// The name table of enum E: `names` lists (value, name) for every value that has a name, in the
/// order error messages list them; `unnamed` values (the mapping / list forms) are printed with
/// their own spelling but never parsed.
template <class E> struct Choices;

template <> struct Choices<PartitionMethod> {
  static constexpr std::array<std::pair<PartitionMethod, std::string_view>, 4> names{
      {{PartitionMethod::kBalanced, "balanced"},
       {PartitionMethod::kUniform, "uniform"},
       {PartitionMethod::kParameters, "parameters"},
       {PartitionMethod::kManual, "manual"}}};
  static constexpr std::size_t parsed = 3;  ///< the first `parsed` names are accepted as text
};
template <> struct Choices<RecomputeMode> {
  static constexpr std::array<std::pair<RecomputeMode, std::string_view>, 4> names{
      {{RecomputeMode::kAdaptive, "adaptive"},
       {RecomputeMode::kFull, "full"},
       {RecomputeMode::kNone, "none"},
       {RecomputeMode::kPerStage, "per_stage"}}};
  static constexpr std::size_t parsed = 3;
};
template <> struct Choices<BalanceMethod> {
  static constexpr std::array<std::pair<BalanceMethod, std::string_view>, 6> names{
      {{BalanceMethod::kIsf, "isf"},
       {BalanceMethod::kRandom, "random"},
       {BalanceMethod::kLengthGroup, "length-group"},
       {BalanceMethod::kBestFit, "best-fit"},
       {BalanceMethod::kMultiSource, "multi-source"},
       {BalanceMethod::kIsfRandomPlacement, "isf-random-placement"}}};
  static constexpr std::size_t parsed = 5;  ///< isf-random-placement: omnibal-plan data only
};
template <> struct Choices<PlaceBy> {
  static constexpr std::array<std::pair<PlaceBy, std::string_view>, 2> names{
      {{PlaceBy::kCount, "count"}, {PlaceBy::kTime, "time"}}};
  static constexpr std::size_t parsed = 2;
};
template <> struct Choices<OnBadSample> {
  static constexpr std::array<std::pair<OnBadSample, std::string_view>, 2> names{
      {{OnBadSample::kError, "error"}, {OnBadSample::kSkip, "skip"}}};
  static constexpr std::size_t parsed = 2;
};
template <> struct Choices<OnNonFinite> {
  static constexpr std::array<std::pair<OnNonFinite, std::string_view>, 2> names{
      {{OnNonFinite::kStop, "stop"}, {OnNonFinite::kSkip, "skip"}}};
  static constexpr std::size_t parsed = 2;
};
template <> struct Choices<ShardMode> {
  static constexpr std::array<std::pair<ShardMode, std::string_view>, 3> names{
      {{ShardMode::kNone, "none"},
       {ShardMode::kOptimizer, "optimizer"},
       {ShardMode::kFull, "full"}}};
  static constexpr std::size_t parsed = 3;
};
template <> struct Choices<RuntimeDevice> {
  static constexpr std::array<std::pair<RuntimeDevice, std::string_view>, 2> names{
      {{RuntimeDevice::kCpu, "cpu"}, {RuntimeDevice::kCuda, "cuda"}}};
  static constexpr std::size_t parsed = 2;
};
template <> struct Choices<HfStyle> {
  static constexpr std::array<std::pair<HfStyle, std::string_view>, 4> names{
      {{HfStyle::kAuto, "auto"},
       {HfStyle::kInternLm2, "internlm2"},
       {HfStyle::kLlama, "llama"},
       {HfStyle::kLlamaFused, "llama-fused"}}};
  static constexpr std::size_t parsed = 4;
};
template <> struct Choices<VitNorm> {
  static constexpr std::array<std::pair<VitNorm, std::string_view>, 2> names{
      {{VitNorm::kLayerNorm, "layernorm"}, {VitNorm::kRmsNorm, "rmsnorm"}}};
  static constexpr std::size_t parsed = 2;
};
template <> struct Choices<LossReduction> {
  static constexpr std::array<std::pair<LossReduction, std::string_view>, 3> names{
      {{LossReduction::kToken, "token"},
       {LossReduction::kSample, "sample"},
       {LossReduction::kSquare, "square"}}};
  static constexpr std::size_t parsed = 3;
};
template <> struct Choices<ChatTemplateName> {
  static constexpr std::array<std::pair<ChatTemplateName, std::string_view>, 1> names{
      {{ChatTemplateName::kInternLm2Chat, "internlm2-chat"}}};
  static constexpr std::size_t parsed = 1;
};
template <> struct Choices<UnitGroup> {
  static constexpr std::array<std::pair<UnitGroup, std::string_view>, 3> names{
      {{UnitGroup::kVit, "vit"}, {UnitGroup::kProjector, "projector"}, {UnitGroup::kLlm, "llm"}}};
  static constexpr std::size_t parsed = 3;
};
template <> struct Choices<FailWhere> {
  static constexpr std::array<std::pair<FailWhere, std::string_view>, 4> names{
      {{FailWhere::kForward, "forward"},
       {FailWhere::kBackward, "backward"},
       {FailWhere::kLoader, "loader"},
       {FailWhere::kStep, "step"}}};
  static constexpr std::size_t parsed = 4;
};

template <> struct Choices<Precision> {
  static constexpr std::array<std::pair<Precision, std::string_view>, 2> names{
      {{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}}};
  static constexpr std::size_t parsed = 2;
};

template <> struct Choices<PipelineSchedule> {
  static constexpr std::array<std::pair<PipelineSchedule, std::string_view>, 5> names{
      {{PipelineSchedule::k1F1B, "1f1b"},
       {PipelineSchedule::kInterleaved, "interleaved"},
       {PipelineSchedule::kZbH1, "zb-h1"},
       {PipelineSchedule::kZbV, "zb-v"},
       {PipelineSchedule::kAuto, "auto"}}};
  static constexpr std::size_t parsed = 5;
};

/// True for the enums that have a Choices table (the config reader and writer use it).
template <class E, class = void> struct HasChoices : std::false_type {};
template <class E> struct HasChoices<E, std::void_t<decltype(Choices<E>::names)>> : std::true_type {
};

/// The name of `value` ("adaptive"); every value has one.
template <class E> std::string choice_name(E value) {
  for (const auto& [v, name] : Choices<E>::names)
    if (v == value) return std::string(name);
  return "?";  // unreachable for a valid enum value: every value is in its table
}

/// "a | b | c": the names accepted as text, for error messages and --help.
template <class E> std::string choice_list() {
  std::string out;
  for (std::size_t i = 0; i < Choices<E>::parsed; ++i)
    out += (i ? " | " : "") + std::string(Choices<E>::names[i].second);
  return out;
}

/// The value named `text` among E's parsed names, or nullopt.
template <class E> std::optional<E> find_choice(std::string_view text) {
  for (std::size_t i = 0; i < Choices<E>::parsed; ++i)
    if (Choices<E>::names[i].second == text) return Choices<E>::names[i].first;
  return std::nullopt;
}

/// Parses `text` as one of E's names. Throws omnibal::Error
/// "<key>: expected a | b | c, got '<text>'" otherwise (`key` names the config key or flag).
template <class E> E parse_choice(std::string_view text, const std::string& key) {
  if (const auto value = find_choice<E>(text)) return *value;
  OMNIBAL_FAIL(key, ": expected ", choice_list<E>(), ", got '", std::string(text), "'");
}

}  // namespace omnibal

#include "models/vlm.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "models/llm.h"
#include "models/projector.h"
#include "models/recompute.h"
#include "models/torch_compat.h"
#include "models/vit.h"

namespace omnibal::models {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Fills `param` from a generator seeded by (seed, name): the value depends on nothing else.
void init_tensor(torch::Tensor& param, const std::string& name, uint64_t seed, double std) {
  torch::NoGradGuard no_grad;
  uint64_t state = seed ^ fnv1a(name);
  const uint64_t stream = splitmix64(state);
  torch::Tensor value;
  const bool is_norm = name.find("norm") != std::string::npos;
  if (ends_with(name, "bias")) {
    value = torch::zeros(param.sizes());
  } else if (is_norm && ends_with(name, "weight")) {
    value = torch::ones(param.sizes());
  } else if (ends_with(name, ".ls1") || ends_with(name, ".ls2")) {
    value = torch::full(param.sizes(), 0.1);
  } else {
    auto gen = compat::cpu_generator(stream);
    value = torch::normal(0.0, std, param.sizes(), gen, torch::kFloat32);
  }
  param.copy_(value);
}

int64_t vit_block_params(const VitPreset& v) {
  const int64_t d = v.width, norm = v.norm == VitNorm::kLayerNorm ? 2 * d : d;
  int64_t n = 2 * norm + 3 * d * d + (v.qkv_bias ? 3 * d : 0) + d * d + d;
  n += (v.qk_norm ? 2 * d : 0) + (v.layer_scale ? 2 * d : 0);
  return n + 2 * static_cast<int64_t>(v.mlp_dim) * d + v.mlp_dim + d;
}

int64_t llm_block_params(const LlmPreset& l) {
  const int64_t d = l.width, hd = d / l.heads;
  return 2 * d + 2 * d * d + 2 * d * l.kv_heads * hd + 3 * d * static_cast<int64_t>(l.mlp_dim);
}

/// The unit `id` of `preset` at full size (before TP sharding), parameters not yet initialised.
/// `own_head`: the head holds its own output weight (not tied to an embedding of its list).
UnitPtr build_unit(const ModelPreset& preset, const VlmOptions& options, UnitId id, bool own_head) {
  const TensorParallel& tp = options.tp;
  switch (id.kind) {
    case UnitKind::kVitEmbed: return std::make_shared<VitEmbedUnit>(preset.vit);
    case UnitKind::kVitBlock: return std::make_shared<VitBlockUnit>(preset.vit, id.index, tp);
    case UnitKind::kProjector: return std::make_shared<ProjectorUnit>(preset.vit, preset.llm);
    case UnitKind::kLlmEmbed:
      return std::make_shared<LlmEmbedUnit>(preset.llm, options.img_context_id, tp);
    case UnitKind::kLlmBlock: return std::make_shared<LlmBlockUnit>(preset.llm, id.index, tp);
    case UnitKind::kLlmHead: return std::make_shared<LlmHeadUnit>(preset.llm, own_head, tp);
  }
  OMNIBAL_FAIL("invalid UnitKind ", static_cast<int>(id.kind));
}

}  // namespace

std::vector<int64_t> unit_parameter_counts(const ModelPreset& preset) {
  const VitPreset& v = preset.vit;
  const LlmPreset& l = preset.llm;
  const int64_t dv = v.width, dl = l.width, side = v.tile_size / v.patch_size;
  std::vector<int64_t> counts{dv * 3 * v.patch_size * v.patch_size + dv + dv +
                              (side * side + 1) * dv};
  for (int i = 0; i < v.depth; ++i) counts.push_back(vit_block_params(v));
  counts.push_back(2 * 4 * dv + 4 * dv * dl + dl + dl * dl + dl);
  counts.push_back(static_cast<int64_t>(l.vocab_size) * dl);
  for (int i = 0; i < l.depth; ++i) counts.push_back(llm_block_params(l));
  counts.push_back(dl + (l.tie_embeddings ? 0 : static_cast<int64_t>(l.vocab_size) * dl));
  return counts;
}

void init_unit_parameters(PipelineUnit& unit, uint64_t seed, double std) {
  for (auto& item : unit.named_parameters()) {
    torch::Tensor p = item.value();
    init_tensor(p, unit.unit_name() + "." + item.key(), seed, std);
  }
}

std::vector<std::vector<UnitPtr>> make_chunk_units(
    const ModelPreset& preset, const VlmOptions& options, const std::vector<UnitRange>& ranges,
    const std::function<void(const UnitPtr&)>& on_unit) {
  const int64_t total = unit_count(preset);
  std::vector<int64_t> indices;
  for (const auto& [begin, end] : ranges) {
    OMNIBAL_CHECK(0 <= begin && begin < end && end <= total &&
                      (indices.empty() || indices.back() < begin),
                  "make_units: expected ascending ranges 0 <= begin < end <= ", total,
                  " of preset '", preset.name, "', got [", begin, ", ", end, ")");
    for (int64_t i = begin; i < end; ++i) indices.push_back(i);
  }
  const int64_t embed = preset.vit.depth + 2, head = total - 1;
  const auto embed_at = std::find(indices.begin(), indices.end(), embed);
  const bool tied_here =
      preset.llm.tie_embeddings && embed_at != indices.end() && indices.back() == head;
  const TensorParallel& tp = options.tp;
  check_tensor_parallel(preset, tp.size);
  OMNIBAL_CHECK(tp.rank >= 0 && tp.rank < tp.size, "make_units: TP rank ", tp.rank, " outside [0, ",
                tp.size, ")");
  const torch::Dtype dtype = options.dtype.value_or(compat::default_dtype(options.device));
  std::vector<UnitPtr> units;
  for (const int64_t i : indices) {
    UnitPtr unit = build_unit(preset, options, unit_at(preset, static_cast<int>(i)), !tied_here);
    init_unit_parameters(*unit, options.seed, options.init_std);
    unit->set_dropout(options.dropout);
    auto* head_unit =
        unit->kind() == UnitKind::kLlmHead ? static_cast<LlmHeadUnit*>(unit.get()) : nullptr;
    if (head_unit && !tied_here && preset.llm.tie_embeddings) {
      // Head on another stage than the embedding: start from the same values (see vlm.h).
      torch::Tensor w = head_unit->output->weight;
      torch::Tensor fresh = torch::empty(w.sizes());
      init_tensor(fresh, "llm_embed.tok_embeddings.weight", options.seed, options.init_std);
      torch::NoGradGuard no_grad;
      w.copy_(fresh);
    }
    // TP: the unit was built and initialised whole on the CPU (the values of TP 1); keep this
    // rank's slices before it moves to the device, so a device holds only its shards.
    unit->shard_parameters();
    unit->to(options.device, dtype);
    if (head_unit && tied_here)  // shares the embedding's tensor (and so its shard)
      head_unit->tie_to(static_cast<LlmEmbedUnit*>(units[embed_at - indices.begin()].get())
                            ->tok_embeddings->weight);
    if (on_unit) on_unit(unit);
    units.push_back(std::move(unit));
  }
  std::vector<std::vector<UnitPtr>> chunks;
  size_t next = 0;
  for (const auto& [begin, end] : ranges) {
    chunks.emplace_back(units.begin() + next, units.begin() + next + (end - begin));
    next += end - begin;
  }
  return chunks;
}

std::vector<UnitPtr> make_units(const ModelPreset& preset, const VlmOptions& options, int64_t begin,
                                int64_t end) {
  return make_chunk_units(preset, options, {{begin, end}}).front();
}

UnitState empty_output(const PipelineUnit& last, const UnitState& state) {
  OMNIBAL_CHECK(state.empty(), "empty_output: the state of ", last.unit_name(), " holds ",
                state.num_samples(), " samples, expected an empty micro-batch");
  const auto params = last.parameters();
  const torch::TensorOptions opt =
      params.empty() ? torch::TensorOptions(torch::kFloat32)
                     : torch::TensorOptions(params.front().dtype()).device(params.front().device());
  const Phase phase = last.output_phase();
  if (phase != Phase::kLoss)  // no rows, in the rank the next unit expects
    return state.with_hidden(torch::zeros(std::vector<int64_t>(hidden_rank(phase), 0), opt), phase);
  UnitState out = state.with_hidden(torch::Tensor(), Phase::kLoss);
  out.loss_sum = torch::zeros({}, opt.dtype(torch::kFloat32));
  out.label_count = 0;
  out.token_loss = torch::zeros({0}, opt.dtype(torch::kFloat32));
  out.label_positions = torch::zeros({0}, opt.dtype(torch::kInt64));
  out.logits = torch::zeros({0, 0}, opt.dtype(torch::kFloat32));
  out.predictions = torch::zeros({0}, opt.dtype(torch::kInt64));
  return out;
}

UnitState run_units(const std::vector<UnitPtr>& units, UnitState state) {
  if (state.empty() && !units.empty()) {
    // ZeRO-3 matches its gathers and reduce-scatters over DP by order: a rank that skipped its
    // units would pair its next collective with another rank's gather of a different unit.
    OMNIBAL_CHECK(units.front()->param_hooks() == nullptr,
                  "a micro-batch with no samples (every sample of its pack left out under "
                  "data.on_bad_sample: skip) under train.shard full: ZeRO-3 needs every DP rank "
                  "to run every unit; fix or remove the bad samples, or use train.shard none | "
                  "optimizer");
    return empty_output(*units.back(), state);
  }
  for (const auto& unit : units) state = run_unit(*unit, state);
  return state;
}

void save_unit(const PipelineUnit& unit, const std::string& path) {
  torch::serialize::OutputArchive archive;
  unit.save(archive);
  archive.save_to(path);
}

void load_unit(PipelineUnit& unit, const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
    unit.load(archive);
  } catch (const c10::Error& e) {
    OMNIBAL_FAIL("load_unit ", unit.unit_name(), ": cannot load '", path,
                 "': ", e.what_without_backtrace());
  }
}

VlmImpl::VlmImpl(const ModelPreset& preset, const VlmOptions& options)
    : preset_(preset), options_(options) {
  units_ = make_units(preset, options, 0, unit_count(preset));
  for (auto& unit : units_) register_module(unit->unit_name(), unit);
}

UnitState VlmImpl::forward(const UnitState& state, int64_t begin, int64_t end) {
  OMNIBAL_CHECK(0 <= begin && begin <= end && end <= num_units(), "Vlm::forward: unit range [",
                begin, ", ", end, ") outside [0, ", num_units(), "]");
  if (state.empty() && begin < end) return empty_output(*units_[end - 1], state);
  UnitState s = state;
  for (int64_t i = begin; i < end; ++i) s = run_unit(*units_[i], s);
  return s;
}

UnitState VlmImpl::forward(const PackBatch& pack) {
  return forward(UnitState::from_pack(pack, options_.device, options_.dtype), 0, num_units());
}

}  // namespace omnibal::models

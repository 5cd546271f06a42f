#include "core/units.h"

#include <cctype>

#include "core/error.h"
#include "core/model_preset.h"

namespace omnibal {
namespace {

/// Every kind with its two spellings: the one table both directions read.
struct KindNames {
  UnitKind kind;
  const char* model;  ///< unit_kind_name; the unit name itself for the kinds that are no blocks
  const char* table;  ///< cost_table_kind_name
};
constexpr KindNames kKinds[] = {{UnitKind::kVitEmbed, "vit_embed", "vit_embed"},
                                {UnitKind::kVitBlock, "vit_block", "vit_block"},
                                {UnitKind::kProjector, "projector", "projector"},
                                {UnitKind::kLlmEmbed, "llm_embed", "llm_embed"},
                                {UnitKind::kLlmBlock, "llm_block", "llm_block"},
                                {UnitKind::kLlmHead, "llm_head", "head"}};

const KindNames& names_of(UnitKind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k;
  OMNIBAL_FAIL("invalid UnitKind ", static_cast<int>(kind));
}

/// The block index after `prefix` and one separator ('_' or '.'), or nullopt.
std::optional<int> block_index(std::string_view name, std::string_view prefix) {
  if (name.size() < prefix.size() + 2 || name.substr(0, prefix.size()) != prefix) return {};
  const char separator = name[prefix.size()];
  if (separator != '_' && separator != '.') return {};
  int index = 0;
  for (const char c : name.substr(prefix.size() + 1)) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || index > 100000000) return {};
    index = 10 * index + (c - '0');
  }
  return index;
}

}  // namespace

const char* unit_kind_name(UnitKind kind) { return names_of(kind).model; }

const char* cost_table_kind_name(UnitKind kind) { return names_of(kind).table; }

UnitKind parse_cost_table_kind(const std::string& name, const std::string& where) {
  for (const auto& k : kKinds)
    if (name == k.table) return k.kind;
  OMNIBAL_FAIL(where, ": unknown unit kind '", name,
               "', expected vit_embed | vit_block | projector | llm_embed | llm_block | head");
}

std::string unit_name(UnitId id) {
  if (!is_block(id.kind)) return names_of(id.kind).model;
  return std::string(names_of(id.kind).model) + "_" + std::to_string(id.index);
}

std::string cost_table_name(UnitId id) {
  if (!is_block(id.kind)) return names_of(id.kind).table;
  return std::string(names_of(id.kind).table) + "." + std::to_string(id.index);
}

std::optional<UnitId> find_unit_id(std::string_view name) {
  for (const auto& k : kKinds) {
    if (is_block(k.kind)) {
      if (const auto index = block_index(name, k.model)) return UnitId{k.kind, *index};
    } else if (name == k.model || name == k.table) {
      return UnitId{k.kind, 0};
    }
  }
  return std::nullopt;
}

UnitId parse_unit_id(std::string_view name, const std::string& where) {
  if (const auto id = find_unit_id(name)) return *id;
  OMNIBAL_FAIL(where, ": unknown unit '", std::string(name),
               "' (expected vit_embed, vit_block_<i>, projector, llm_embed, llm_block_<i> or "
               "llm_head; cost-table spellings vit_block.<i>, llm_block.<i>, head)");
}

int unit_count(const ModelPreset& preset) { return preset.vit.depth + preset.llm.depth + 4; }

UnitId unit_at(const ModelPreset& preset, int position) {
  const int lv = preset.vit.depth, lt = preset.llm.depth;
  OMNIBAL_CHECK(position >= 0 && position < unit_count(preset), "unit index ", position,
                " out of range [0, ", unit_count(preset), ")");
  if (position == 0) return {UnitKind::kVitEmbed, 0};
  if (position <= lv) return {UnitKind::kVitBlock, position - 1};
  if (position == lv + 1) return {UnitKind::kProjector, 0};
  if (position == lv + 2) return {UnitKind::kLlmEmbed, 0};
  if (position <= lv + 2 + lt) return {UnitKind::kLlmBlock, position - lv - 3};
  return {UnitKind::kLlmHead, 0};
}

std::vector<UnitId> unit_chain(const ModelPreset& preset) {
  std::vector<UnitId> chain;
  for (int u = 0; u < unit_count(preset); ++u) chain.push_back(unit_at(preset, u));
  return chain;
}

std::vector<std::string> unit_names(const ModelPreset& preset) {
  std::vector<std::string> names;
  for (const UnitId& id : unit_chain(preset)) names.push_back(unit_name(id));
  return names;
}

UnitGroup freeze_group(UnitKind kind) {
  switch (kind) {
    case UnitKind::kVitEmbed:
    case UnitKind::kVitBlock: return UnitGroup::kVit;
    case UnitKind::kProjector: return UnitGroup::kProjector;
    case UnitKind::kLlmEmbed:
    case UnitKind::kLlmBlock:
    case UnitKind::kLlmHead: return UnitGroup::kLlm;
  }
  OMNIBAL_FAIL("invalid UnitKind ", static_cast<int>(kind));
}

bool is_vision(UnitKind kind) { return freeze_group(kind) != UnitGroup::kLlm; }

bool is_block(UnitKind kind) { return kind == UnitKind::kVitBlock || kind == UnitKind::kLlmBlock; }

bool is_recomputable(UnitKind kind) { return is_block(kind); }

}  // namespace omnibal

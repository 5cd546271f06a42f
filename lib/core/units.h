// One vocabulary for pipeline units (OmniBal §2: the model is cut into pipeline stages at unit
// boundaries). The model is one chain of units in a fixed order:
//   vit_embed, vit_block_0 .. vit_block_{Lv-1}, projector, llm_embed (+ merge of image features),
//   llm_block_0 .. llm_block_{Ll-1}, llm_head (final norm, LM head, loss)
// Everything about a unit that needs no tensor lives here, once: its kind, its name in the model
// ("vit_block_3", the prefix of its parameter names in checkpoints), its name in cost tables
// ("vit_block.3", "head": docs/conventions.md, partition/unit_cost_table.h), its train.freeze
// group, whether it is a block, and whether activation recomputation may checkpoint it.
// Torch-free, so the planners (partition, memory) read the same facts as models, profile,
// pipeline, checkpoint and train.
//
//   unit_name({UnitKind::kVitBlock, 3});        // "vit_block_3"
//   cost_table_name({UnitKind::kLlmHead, 0});   // "head"
//   find_unit_id("llm_block.2");                // {kLlmBlock, 2}: either spelling is read
// Not here: a unit's modules and forward (models/pipeline_unit.h), its costs
// (partition/unit_cost_table.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/choices.h"

namespace omnibal {

struct ModelPreset;

/// What a pipeline unit is. Switches over it are checked by -Werror=switch.
enum class UnitKind {
  kVitEmbed,
  kVitBlock,
  kProjector,
  kLlmEmbed,
  kLlmBlock,
  kLlmHead,
};

/// One unit of the chain: its kind and, for blocks, its index among its tower's blocks.
struct UnitId {
  UnitKind kind = UnitKind::kVitEmbed;
  int index = 0;  ///< vit_block_3 / llm_block_3: 3; always 0 for the other kinds
  bool operator==(const UnitId& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const UnitId& o) const { return !(*this == o); }
};

/// The model's name of a kind: "vit_embed", "vit_block", "projector", "llm_embed", "llm_block",
/// "llm_head".
const char* unit_kind_name(UnitKind kind);
/// The cost table's name of a kind (its "kind" field): as unit_kind_name but "head" for kLlmHead.
const char* cost_table_kind_name(UnitKind kind);
/// Inverse of cost_table_kind_name. Throws omnibal::Error naming `where` and the six names.
UnitKind parse_cost_table_kind(const std::string& name, const std::string& where);

/// The model's name of a unit ("vit_embed", "vit_block_3", ..., "llm_head"): its parameters are
/// "<unit name>.<local name>" in the whole model and in checkpoints.
std::string unit_name(UnitId id);
/// The cost table's name of a unit ("vit_embed", "vit_block.3", ..., "llm_block.0", "head").
std::string cost_table_name(UnitId id);
/// The unit named `name` in either spelling (unit_name or cost_table_name), or nullopt for
/// any other text (a negative or non-numeric block index included).
std::optional<UnitId> find_unit_id(std::string_view name);
/// find_unit_id, throwing omnibal::Error "<where>: unknown unit '<name>' (...)" when it is none.
UnitId parse_unit_id(std::string_view name, const std::string& where);

/// Units of `preset`'s chain: vit.depth + llm.depth + 4.
int unit_count(const ModelPreset& preset);
/// The unit at chain position `position` (0 = vit_embed). Throws omnibal::Error when
/// `position` is outside [0, unit_count(preset)).
UnitId unit_at(const ModelPreset& preset, int position);
/// Every unit of `preset` in chain order.
std::vector<UnitId> unit_chain(const ModelPreset& preset);
/// unit_name of every unit of `preset` in chain order.
std::vector<std::string> unit_names(const ModelPreset& preset);

/// The train.freeze group of a kind: ViT embedding and blocks -> vit, the projector ->
/// projector, LLM embedding, blocks and head -> llm.
UnitGroup freeze_group(UnitKind kind);
/// True for the units before the LLM (ViT embedding and blocks, projector): their work scales
/// with a pack's tiles, the LLM units' with its tokens.
bool is_vision(UnitKind kind);
/// True for ViT and LLM blocks (the repeated transformer layers).
bool is_block(UnitKind kind);
/// True for the kinds activation recomputation may checkpoint (memory.recompute flags count
/// only for them): the blocks. A frozen block is never checkpointed (nothing to backpropagate).
bool is_recomputable(UnitKind kind);

}  // namespace omnibal

#include "partition/tensor_parallel.h"

#include "core/error.h"

namespace omnibal::partition {
namespace {

constexpr double kFp32 = 4.0;
constexpr double kNcclAllReduceEfficiency = 0.8;  // bus bandwidth over link bandwidth, NVLink

}  // namespace

TpLink tp_link(const DeviceSpec& device, int tp) {
  OMNIBAL_CHECK(tp >= 1, "tp link: tp must be >= 1, got ", tp);
  const double link =
      tp <= device.gpus_per_node ? device.intra_node_bandwidth : device.inter_node_bandwidth;
  return {kNcclAllReduceEfficiency * link, device.collective_latency_s};
}

double all_reduce_seconds(double bytes, int calls, int ranks, const TpLink& link) {
  OMNIBAL_CHECK(ranks >= 1, "all-reduce: ranks must be >= 1, got ", ranks);
  if (ranks == 1 || (bytes <= 0 && calls <= 0)) return 0.0;
  OMNIBAL_CHECK(bytes <= 0 || link.bandwidth > 0, "all-reduce of ", bytes, " bytes over ", ranks,
                " ranks on a link without bandwidth (", link.bandwidth,
                " bytes/s); give the TP link's bandwidth");
  const double wire = bytes > 0 ? 2.0 * (ranks - 1) / ranks * bytes / link.bandwidth : 0.0;
  return calls * link.latency_s + wire;
}

double tp_forward_seconds(const UnitCost& unit, int tp, const TpLink& link) {
  return all_reduce_seconds(unit.tp_all_reduce.forward_bytes, unit.tp_all_reduce.forward_calls, tp,
                            link);
}

double tp_backward_seconds(const UnitCost& unit, bool recomputed, int tp, const TpLink& link) {
  const auto& ar = unit.tp_all_reduce;
  const bool again = unit.checkpointed(recomputed);
  return all_reduce_seconds(ar.backward_bytes + (again ? ar.forward_bytes : 0.0),
                            ar.backward_calls + (again ? ar.forward_calls : 0), tp, link);
}

int64_t padded_heads(int64_t heads, int tp) {
  OMNIBAL_CHECK(tp >= 1, "padded heads: tp must be >= 1, got ", tp);
  return (heads + tp - 1) / tp * tp;
}

TpAllReduces unit_tp_all_reduces(const ModelPreset& preset, UnitKind kind, int64_t tiles,
                                 int64_t tokens, int tp, double dtype_bytes, bool trainable) {
  OMNIBAL_CHECK(tp >= 1, "TP all-reduces: tp must be >= 1, got ", tp);
  TpAllReduces ar;
  if (tp == 1) return ar;
  const double vit_tokens = static_cast<double>(tiles) * preset.vit_tokens_per_tile();
  const double n = static_cast<double>(tokens);
  switch (kind) {
    case UnitKind::kVitEmbed:
    case UnitKind::kProjector: break;  // replicated
    case UnitKind::kVitBlock: {
      const double act = dtype_bytes * vit_tokens * preset.vit.width;
      const int norm_calls = preset.vit.qk_norm ? 2 : 0;  // sum of squares of q and of k
      const double norm_bytes = norm_calls * kFp32 * vit_tokens;
      ar.forward_bytes = 2 * act + norm_bytes;
      ar.forward_calls = 2 + norm_calls;
      if (trainable) {
        ar.backward_bytes = 2 * act + norm_bytes;
        ar.backward_calls = 2 + norm_calls;
      }
      break;
    }
    case UnitKind::kLlmEmbed:
      ar.forward_bytes = dtype_bytes * n * preset.llm.width;  // vocab-parallel lookup
      ar.forward_calls = 1;
      break;
    case UnitKind::kLlmBlock: {
      const double act = dtype_bytes * n * preset.llm.width;
      ar.forward_bytes = 2 * act;
      ar.forward_calls = 2;
      if (trainable) {
        ar.backward_bytes = 2 * act;
        ar.backward_calls = 2;
      }
      break;
    }
    case UnitKind::kLlmHead:
      ar.forward_bytes = 3 * kFp32 * n;  // vocab-parallel cross-entropy: max, sum exp, target
      ar.forward_calls = 3;
      if (trainable) {
        ar.backward_bytes = dtype_bytes * n * preset.llm.width;  // input gradient of the head
        ar.backward_calls = 1;
      }
      break;
  }
  return ar;
}

void set_tp_all_reduces(UnitCostTable& table, const ModelPreset& preset, double dtype_bytes) {
  const size_t units = static_cast<size_t>(unit_count(preset));
  OMNIBAL_CHECK(table.units.size() == units, "TP all-reduces: the cost table of '", table.model,
                "' has ", table.units.size(), " units, preset '", preset.name, "' ", units);
  for (auto& u : table.units)
    u.tp_all_reduce = unit_tp_all_reduces(preset, u.kind, table.load.tiles, table.load.tokens,
                                          table.tp, dtype_bytes, u.trainable);
}

}  // namespace omnibal::partition

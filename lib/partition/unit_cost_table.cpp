#include "partition/unit_cost_table.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace omnibal::partition {
namespace {

constexpr const char* kFormat = "omnibal.unit_costs.v1";

template <class T> T field(const nlohmann::json& obj, const char* key, const std::string& where) {
  OMNIBAL_CHECK(obj.is_object() && obj.contains(key), where, ": missing key '", key, "'");
  try {
    return obj.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(where, ": key '", key, "' has the wrong type (", e.what(), ")");
  }
}

double non_negative(const nlohmann::json& obj, const char* key, const std::string& where) {
  const double v = field<double>(obj, key, where);
  OMNIBAL_CHECK(v >= 0, where, ": key '", key, "': expected a non-negative number, got ", v);
  return v;
}

}  // namespace

double UnitCost::weight_backward_s() const {
  if (!trainable) return 0.0;
  return backward_weight_s ? *backward_weight_s : kWeightShareEstimate * backward_s;
}

double UnitCost::checkpointed_forward() const { return checkpointed_forward_s.value_or(forward_s); }

double UnitCost::checkpointed_backward() const {
  return checkpointed_backward_s ? std::max(*checkpointed_backward_s, backward_s)
                                 : forward_s + backward_s;
}

double UnitCost::rerun_seconds() const { return checkpointed_backward() - backward_s; }

double UnitCost::recompute_cost() const {
  return std::max(0.0, checkpointed_forward() + checkpointed_backward() - forward_s - backward_s);
}

double UnitCost::deferred_weight_bytes() const {
  if (!trainable) return 0.0;
  return weight_grad_bytes ? *weight_grad_bytes : activation_bytes;
}

double UnitCostTable::checkpoint_bytes(size_t unit) const {
  return unit == 0 ? 0.0 : units.at(unit - 1).output_bytes;
}

std::string unit_cost_table_json(const UnitCostTable& table) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["model"] = table.model;
  j["source"] = table.source;
  j["tp"] = table.tp;
  j["load"] = {{"tiles", table.load.tiles},
               {"tokens", table.load.tokens},
               {"samples", table.load.samples}};
  if (table.load.token_sq_sum > 0) j["load"]["token_sq_sum"] = table.load.token_sq_sum;
  j["units"] = nlohmann::json::array();
  for (const auto& u : table.units) {
    nlohmann::json unit = {{"name", u.name},
                           {"kind", cost_table_kind_name(u.kind)},
                           {"forward_s", u.forward_s},
                           {"backward_s", u.backward_s},
                           {"activation_bytes", u.activation_bytes},
                           {"parameter_bytes", u.parameter_bytes},
                           {"trainable", u.trainable},
                           {"output_bytes", u.output_bytes}};
    if (u.backward_weight_s) unit["backward_weight_s"] = *u.backward_weight_s;
    if (u.weight_grad_bytes) unit["weight_grad_bytes"] = *u.weight_grad_bytes;
    if (u.checkpointed_forward_s) unit["checkpointed_forward_s"] = *u.checkpointed_forward_s;
    if (u.checkpointed_backward_s) unit["checkpointed_backward_s"] = *u.checkpointed_backward_s;
    const auto& ar = u.tp_all_reduce;
    if (ar.forward_calls > 0 || ar.backward_calls > 0)
      unit["tp_all_reduce"] = {{"forward_bytes", ar.forward_bytes},
                               {"forward_calls", ar.forward_calls},
                               {"backward_bytes", ar.backward_bytes},
                               {"backward_calls", ar.backward_calls}};
    j["units"].push_back(std::move(unit));
  }
  return j.dump(2);
}

UnitCostTable parse_unit_cost_table(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    OMNIBAL_FAIL(origin, ": not valid JSON (", e.what(), ")");
  }
  const auto format = field<std::string>(j, "format", origin);
  OMNIBAL_CHECK(format == kFormat, origin, ": format '", format, "', expected '", kFormat, "'");
  UnitCostTable t;
  t.model = field<std::string>(j, "model", origin);
  t.source = field<std::string>(j, "source", origin);
  t.tp = j.contains("tp") ? field<int>(j, "tp", origin) : 1;  // tables from before TP: tp 1
  OMNIBAL_CHECK(t.tp >= 1, origin, ": key 'tp': expected >= 1, got ", t.tp);
  const auto& load = j.at("load");
  t.load.tiles = field<int64_t>(load, "tiles", origin + ": load");
  t.load.tokens = field<int64_t>(load, "tokens", origin + ": load");
  t.load.samples = field<int64_t>(load, "samples", origin + ": load");
  if (load.contains("token_sq_sum"))
    t.load.token_sq_sum = non_negative(load, "token_sq_sum", origin + ": load");
  const auto units = field<nlohmann::json>(j, "units", origin);
  OMNIBAL_CHECK(units.is_array() && !units.empty(), origin, ": 'units' must be a non-empty array");
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string where = origin + ": units[" + std::to_string(i) + "]";
    UnitCost u;
    u.name = field<std::string>(units[i], "name", where);
    u.kind = parse_cost_table_kind(field<std::string>(units[i], "kind", where), where);
    u.forward_s = non_negative(units[i], "forward_s", where);
    u.backward_s = non_negative(units[i], "backward_s", where);
    u.activation_bytes = non_negative(units[i], "activation_bytes", where);
    u.parameter_bytes = non_negative(units[i], "parameter_bytes", where);
    u.trainable = field<bool>(units[i], "trainable", where);
    u.output_bytes = non_negative(units[i], "output_bytes", where);
    // Optional (tables without the split backward: UnitCost's estimates).
    if (units[i].contains("backward_weight_s")) {
      u.backward_weight_s = non_negative(units[i], "backward_weight_s", where);
      OMNIBAL_CHECK(*u.backward_weight_s <= u.backward_s, where, ": backward_weight_s ",
                    *u.backward_weight_s, " exceeds backward_s ", u.backward_s);
    }
    if (units[i].contains("weight_grad_bytes"))
      u.weight_grad_bytes = non_negative(units[i], "weight_grad_bytes", where);
    // Optional (tables without profiled recomputation: one more forward_s in the backward).
    const bool cf = units[i].contains("checkpointed_forward_s");
    OMNIBAL_CHECK(cf == units[i].contains("checkpointed_backward_s"), where,
                  ": checkpointed_forward_s and checkpointed_backward_s come together (one "
                  "checkpointed run), got only ",
                  cf ? "checkpointed_forward_s" : "checkpointed_backward_s");
    if (cf) {
      u.checkpointed_forward_s = non_negative(units[i], "checkpointed_forward_s", where);
      u.checkpointed_backward_s = non_negative(units[i], "checkpointed_backward_s", where);
    }
    if (units[i].contains("tp_all_reduce")) {
      const auto& ar = units[i].at("tp_all_reduce");
      const std::string w = where + ": tp_all_reduce";
      u.tp_all_reduce.forward_bytes = non_negative(ar, "forward_bytes", w);
      u.tp_all_reduce.backward_bytes = non_negative(ar, "backward_bytes", w);
      u.tp_all_reduce.forward_calls = static_cast<int>(non_negative(ar, "forward_calls", w));
      u.tp_all_reduce.backward_calls = static_cast<int>(non_negative(ar, "backward_calls", w));
    }
    t.units.push_back(u);
  }
  return t;
}

void write_unit_cost_table(const UnitCostTable& table, const std::string& path) {
  std::ofstream out(path);
  OMNIBAL_CHECK(out.good(), "cannot write the unit cost table to '", path, "'");
  out << unit_cost_table_json(table) << "\n";
  OMNIBAL_CHECK(out.good(), "error while writing '", path, "'");
}

UnitCostTable read_unit_cost_table(const std::string& path) {
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), "cannot read the unit cost table '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_unit_cost_table(ss.str(), path);
}

}  // namespace omnibal::partition

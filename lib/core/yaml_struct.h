// Reading and writing config-like structs from YAML. A struct takes part by listing its fields
// in `template <class V> void visit_fields(V& v)`; Reader checks types and unknown keys and names
// "<file>:<line>: <key>" in every error, Writer emits every field. Used by core/config.cpp and
// core/model_preset.cpp; other code should not need it.
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/choices.h"
#include "core/config.h"
#include "core/error.h"

namespace omnibal::yaml_struct {

template <class T, class = void> struct IsSection : std::false_type {};
template <class T> struct IsSection<T, std::void_t<decltype(&T::template visit_fields<int>)>>
    : std::true_type {};

/// Where a node came from: "file:line" (1-based), or the origin alone for nodes without a
/// position and for an origin that is a command-line override ("--set 'key=value'").
inline std::string where(const std::string& origin, const YAML::Node& node) {
  const auto mark = node.Mark();
  if (mark.line < 0 || origin.rfind("--set", 0) == 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1);
}

inline std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  std::ostringstream os;
  os << YAML::Dump(node);
  return os.str();
}

class Reader {
 public:
  Reader(std::string origin, std::string prefix, const YAML::Node& node)
      : origin_(std::move(origin)), prefix_(std::move(prefix)), node_(node) {}

  template <class T> void operator()(const char* name, T& value) {
    known_.insert(name);
    const YAML::Node child = node_[name];
    if (!child.IsDefined() || child.IsNull()) return;
    read(child, prefix_ + name, value);
  }

  /// After visiting: every key of the node must be a known field.
  void reject_unknown() const {
    for (const auto& kv : node_) {
      const auto key = kv.first.as<std::string>();
      if (known_.count(key)) continue;
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      OMNIBAL_FAIL(where(origin_, kv.first), ": unknown key '", prefix_, key, "' (known keys of ",
                   prefix_.empty() ? std::string("the config")
                                   : prefix_.substr(0, prefix_.size() - 1),
                   ": ", list, ")");
    }
  }

 private:
  [[noreturn]] void bad(const YAML::Node& n, const std::string& key, const char* expected) const {
    OMNIBAL_FAIL(where(origin_, n), ": ", key, ": expected ", expected, ", got ", scalar_text(n));
  }

  template <class T> void read(const YAML::Node& n, const std::string& key, T& out) {
    if constexpr (IsSection<T>::value) {
      if (!n.IsMap()) bad(n, key, "a mapping of keys");
      Reader sub(origin_, key + ".", n);
      out.visit_fields(sub);
      sub.reject_unknown();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!n.IsScalar()) bad(n, key, "true or false");
      try {
        out = n.as<bool>();
      } catch (const YAML::Exception&) {
        bad(n, key, "true or false");
      }
    } else if constexpr (std::is_integral_v<T>) {
      if (!n.IsScalar()) bad(n, key, "an integer");
      try {
        out = n.as<T>();
      } catch (const YAML::Exception&) {
        bad(n, key, "an integer");
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!n.IsScalar()) bad(n, key, "a number");
      try {
        out = n.as<T>();
      } catch (const YAML::Exception&) {
        bad(n, key, "a number");
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!n.IsScalar()) bad(n, key, "a string");
      out = n.Scalar();
    } else if constexpr (HasChoices<T>::value) {
      if (!n.IsScalar()) bad(n, key, choice_list<T>().c_str());
      out = choice(n, key, n.Scalar(), out);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                         std::is_same_v<T, std::vector<int>> ||
                         std::is_same_v<T, std::vector<double>> ||
                         std::is_same_v<T, std::vector<UnitGroup>>) {
      if (!n.IsSequence()) bad(n, key, "a list");
      out.clear();
      for (size_t i = 0; i < n.size(); ++i) {
        typename T::value_type item{};
        read(n[i], key + "[" + std::to_string(i) + "]", item);
        out.push_back(item);
      }
    } else if constexpr (std::is_same_v<T, PartitionSpec>) {
      if (n.IsScalar()) {
        out.method = choice(n, key, n.Scalar(), out.method, "{manual: [units per stage]}");
        out.manual.clear();
      } else if (n.IsMap() && n.size() == 1 && n["manual"].IsDefined()) {
        out.method = PartitionMethod::kManual;
        read(n["manual"], key + ".manual", out.manual);
      } else {
        bad(n, key, "balanced | uniform | parameters | {manual: [units per stage]}");
      }
    } else if constexpr (std::is_same_v<T, RecomputeSpec>) {
      if (n.IsScalar()) {
        out.mode = choice(n, key, n.Scalar(), out.mode, "[recomputed units per stage]");
        out.per_stage.clear();
      } else if (n.IsSequence()) {
        out.mode = RecomputeMode::kPerStage;
        read(n, key, out.per_stage);
      } else {
        bad(n, key, "adaptive | full | none | [recomputed units per stage]");
      }
    } else {
      static_assert(sizeof(T) == 0, "config field type without a reader");
    }
  }

  /// One of E's names, else "<file>:<line>: <key>: expected a | b | c, got 'x'" (`form`: the
  /// other spelling the key accepts, appended to the choices).
  template <class E> E choice(const YAML::Node& n, const std::string& key, const std::string& text,
                              E, const char* form = nullptr) const {
    if (const auto value = find_choice<E>(text)) return *value;
    const std::string expected = choice_list<E>() + (form ? std::string(" | ") + form : "");
    bad(n, key, expected.c_str());
  }

  std::string origin_;
  std::string prefix_;
  YAML::Node node_;
  std::set<std::string> known_;
};

class Writer {
 public:
  explicit Writer(YAML::Emitter& out) : out_(out) {}
  template <class T> void operator()(const char* name, const T& value) {
    out_ << YAML::Key << name << YAML::Value;
    write(value);
  }

 private:
  template <class T> void write(const T& v) {
    if constexpr (IsSection<T>::value) {
      out_ << YAML::BeginMap;
      const_cast<T&>(v).visit_fields(*this);
      out_ << YAML::EndMap;
    } else if constexpr (std::is_same_v<T, PartitionSpec>) {
      if (v.method == PartitionMethod::kManual) {
        out_ << YAML::BeginMap << YAML::Key << "manual" << YAML::Value << YAML::Flow << v.manual
             << YAML::EndMap;
      } else {
        out_ << choice_name(v.method);
      }
    } else if constexpr (std::is_same_v<T, RecomputeSpec>) {
      if (v.mode == RecomputeMode::kPerStage) out_ << YAML::Flow << v.per_stage;
      else out_ << choice_name(v.mode);
    } else if constexpr (HasChoices<T>::value) {
      out_ << choice_name(v);
    } else if constexpr (std::is_same_v<T, std::vector<UnitGroup>>) {
      out_ << YAML::Flow << YAML::BeginSeq;
      for (UnitGroup g : v) out_ << choice_name(g);
      out_ << YAML::EndSeq;
    } else if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                         std::is_same_v<T, std::vector<int>> ||
                         std::is_same_v<T, std::vector<double>>) {
      out_ << YAML::Flow << v;
    } else {
      out_ << v;
    }
  }
  YAML::Emitter& out_;
};

/// Reads a whole section struct from `node`; `origin` names the file in errors.
template <class T> void read_section(const YAML::Node& node, const std::string& origin, T& out) {
  Reader reader(origin, "", node);
  out.visit_fields(reader);
  reader.reject_unknown();
}

/// Emits every field of a section struct as a YAML mapping.
template <class T> std::string write_section(const T& value) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  Writer writer(out);
  const_cast<T&>(value).visit_fields(writer);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace omnibal::yaml_struct

#include "checkpoint/hf_import.h"

#include "checkpoint/hf_checkpoint_dir.h"
#include "core/error.h"
#include "core/log.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace omnibal::checkpoint {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool allowed(const std::vector<std::string>& patterns, const std::vector<std::string>& names) {
  for (const auto& p : patterns)
    for (const auto& n : names)
      if (::fnmatch(p.c_str(), n.c_str(), 0) == 0) return true;
  return false;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

/// One planned copy: the HF tensor, the parameters it fills.
struct Assignment {
  HfTensorMapping mapping;
  std::vector<torch::Tensor> params;
};

/// A problem, with the names allow patterns are matched against.
struct Problem {
  std::string text;
  std::vector<std::string> names;
};

/// What load_pretrained found wrong, by kind.
struct Problems {
  std::vector<Problem> missing, unexpected, mismatched;
};

/// The LLM naming to read `ckpt` with: `style` unless kAuto, else the one its tensor names show
/// (internlm2 without any LLM attention tensor: every LLM tensor is then missing). Throws
/// omnibal::Error when `style` contradicts the names.
HfStyle settle_style(const HfCheckpointDir& ckpt, const std::string& dir, HfStyle style) {
  std::optional<HfStyle> named;
  try {
    named = detect_hf_style(ckpt.names());
  } catch (const Error&) {
    // no LLM attention tensors at all: every LLM tensor is missing
  }
  const bool given = style != HfStyle::kAuto;
  OMNIBAL_CHECK(!given || !named || style == *named, "model.init_from ", dir,
                ": the LLM layout is ", choice_name(style),
                " (config.json or model.hf_style) but the tensor names are ",
                named ? choice_name(*named) : "",
                "'s; fix config.json or set model.hf_style: ", named ? choice_name(*named) : "");
  return given ? style : named ? *named : HfStyle::kInternLm2;
}

/// Checkpoint tensors no unit of `preset` reads (rotary buffers of older exports aside). A tied
/// preset reads its head from the embedding; the head tensor an export writes for transformers
/// (hf_export.h) must equal it, or its values would silently be dropped.
std::vector<Problem> unexpected_tensors(const HfCheckpointDir& ckpt, const ModelPreset& preset,
                                        HfStyle style, bool reads_embedding) {
  std::set<std::string> known;
  for (const auto& m : hf_mappings(preset, style)) known.insert(m.hf_name);
  std::vector<Problem> unexpected;
  const std::string head = hf_lm_head_name(style), embedding = hf_embedding_name(style);
  if (preset.llm.tie_embeddings && ckpt.contains(head)) {
    known.insert(head);
    if (reads_embedding && ckpt.contains(embedding) &&
        !torch::equal(ckpt.tensor(head), ckpt.tensor(embedding)))
      unexpected.push_back({head + ": differs from " + embedding + ", but preset " + preset.name +
                                " ties the head to the embedding (llm.tie_embeddings)",
                            {head, "llm_head.output.weight"}});
  }
  for (const auto& name : ckpt.names()) {
    static const std::string kRotaryBuffer = "rotary_emb.inv_freq";  // a buffer older exports carry
    const bool buffer =
        name.size() >= kRotaryBuffer.size() &&
        name.compare(name.size() - kRotaryBuffer.size(), kRotaryBuffer.size(), kRotaryBuffer) == 0;
    if (!known.count(name) && !buffer) unexpected.push_back({name, {name}});
  }
  return unexpected;
}

/// Plans the copies into `unit`'s parameters (appended to `plan`), recording the tensors
/// `ckpt` lacks or holds in another shape. Throws omnibal::Error when the name map and the
/// unit's parameters disagree (a bug, not a checkpoint problem).
void plan_unit(const models::PipelineUnit& unit, const ModelPreset& preset, HfStyle style,
               const HfCheckpointDir& ckpt, std::vector<Assignment>& plan, Problems& problems) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : unit.named_parameters(true))
    params[unit.unit_name() + "." + p.key()] = p.value();
  std::set<std::string> covered;
  for (const auto& m : hf_mappings_for_unit(preset, unit.id(), style)) {
    Assignment a{m, {}};
    for (const auto& part : m.parts) {
      const auto it = params.find(part);
      if (it != params.end()) a.params.push_back(it->second), covered.insert(part);
    }
    // A head tied to the embedding in the same process has no output weight of its own.
    if (a.params.empty() && preset.llm.tie_embeddings && m.parts[0] == "llm_head.output.weight")
      continue;
    OMNIBAL_CHECK(a.params.size() == m.parts.size(), "name map: unit ", unit.unit_name(),
                  " lacks parameters ", join(m.parts, ", "), " that ", m.hf_name, " needs");
    std::vector<std::string> names = m.parts;
    names.push_back(m.hf_name);
    if (!ckpt.contains(m.hf_name)) {
      problems.missing.push_back({join(m.parts, ", ") + " (" + m.hf_name + ")", names});
      continue;
    }
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& p : a.params) shapes.push_back(p.sizes().vec());
    const std::vector<int64_t> want = fused_shape(m, shapes);
    const auto& have = ckpt.entry(m.hf_name).shape;
    if (have != want) {
      problems.mismatched.push_back({m.hf_name + ": checkpoint " + shape_text(have) + ", model " +
                                         shape_text(want) + " (" + join(m.parts, ", ") + ")",
                                     names});
      continue;
    }
    plan.push_back(std::move(a));
  }
  for (const auto& [name, p] : params)
    OMNIBAL_CHECK(covered.count(name), "name map: parameter ", name, " has no Hugging Face name");
}

/// Moves the problems `allow_missing` covers into `report`; throws omnibal::Error listing the
/// others, if any.
void refuse_problems(const Problems& problems, const std::vector<std::string>& allow_missing,
                     const std::string& dir, const ModelPreset& preset,
                     PretrainedLoadReport& report) {
  std::string refused;
  auto sort_out = [&](const std::vector<Problem>& list, const char* title,
                      std::vector<std::string>& kept) {
    std::vector<std::string> bad;
    for (const auto& p : list) (allowed(allow_missing, p.names) ? kept : bad).push_back(p.text);
    if (!bad.empty())
      refused += "\n" + std::string(title) + " (" + std::to_string(bad.size()) + "):\n  - " +
                 join(bad, "\n  - ");
  };
  sort_out(problems.missing, "missing from the checkpoint", report.missing);
  sort_out(problems.unexpected, "unexpected in the checkpoint", report.unexpected);
  sort_out(problems.mismatched, "shape mismatches", report.mismatched);
  OMNIBAL_CHECK(
      refused.empty(), "model.init_from ", dir, " (", choice_name(report.style),
      " layout) does not match preset ", preset.name, ":", refused,
      "\nallow these with model.allow_missing: [glob patterns of omnibal or Hugging Face names]");
}

}  // namespace

PretrainedLoadReport load_pretrained(const std::vector<models::UnitPtr>& units,
                                     const ModelPreset& preset, const std::string& dir,
                                     const std::vector<std::string>& allow_missing, HfStyle style) {
  const HfCheckpointDir ckpt(dir);
  PretrainedLoadReport report;
  report.style = settle_style(ckpt, dir, style);
  const bool reads_embedding =
      std::any_of(units.begin(), units.end(), [](const models::UnitPtr& u) {
        return u->kind() == UnitKind::kLlmEmbed || u->kind() == UnitKind::kLlmHead;
      });
  Problems problems;
  problems.unexpected = unexpected_tensors(ckpt, preset, report.style, reads_embedding);
  std::vector<Assignment> plan;
  for (const auto& unit : units) plan_unit(*unit, preset, report.style, ckpt, plan, problems);
  refuse_problems(problems, allow_missing, dir, preset, report);

  torch::NoGradGuard no_grad;
  for (const auto& a : plan) {
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& p : a.params) shapes.push_back(p.sizes().vec());
    const auto parts = split_from_hf(a.mapping, ckpt.tensor(a.mapping.hf_name), shapes, preset.llm);
    for (size_t i = 0; i < parts.size(); ++i) a.params[i].copy_(parts[i]);
    report.loaded += static_cast<int64_t>(parts.size());
  }
  for (const auto& f : ckpt.opened_files()) report.opened_files.push_back(f);
  log_info(
      "init_from {}: {} parameters loaded ({} layout, {} shard file(s) read); allowed: {} missing, "
      "{} unexpected, {} mismatched",
      dir, report.loaded, choice_name(report.style), report.opened_files.size(),
      report.missing.size(), report.unexpected.size(), report.mismatched.size());
  return report;
}

}  // namespace omnibal::checkpoint

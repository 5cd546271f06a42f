#include "checkpoint/hf_import.h"

#include "checkpoint/hf_checkpoint_dir.h"
#include "core/error.h"
#include "core/log.h"

#include <fnmatch.h>

#include <algorithm>
#include <set>

namespace omnibal::checkpoint {
namespace {

std::string shape_string(c10::IntArrayRef shape) {
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

}  // namespace

PretrainedLoadReport load_pretrained(const std::vector<models::UnitPtr>& units,
                                     const ModelPreset& preset, const std::string& dir,
                                     const std::vector<std::string>& allow_missing,
                                     std::optional<HfLlmStyle> style) {
  const HfCheckpointDir ckpt(dir);
  PretrainedLoadReport report;
  std::optional<HfLlmStyle> named;
  try {
    named = detect_hf_llm_style(ckpt.names());
  } catch (const Error&) {
    // no LLM attention tensors at all: every LLM tensor is missing
  }
  OMNIBAL_CHECK(!style || !named || *style == *named, "model.init_from ", dir,
                ": the LLM layout is ", hf_llm_style_name(*style),
                " (config.json or model.hf_style) but the tensor names are ",
                named ? hf_llm_style_name(*named) : "",
                "'s; fix config.json or set model.hf_style: ",
                named ? hf_llm_style_name(*named) : "");
  report.style = style ? *style : named ? *named : HfLlmStyle::kInternLm2;
  std::set<std::string> known;
  for (const auto& m : hf_mappings(preset, report.style)) known.insert(m.hf_name);
  std::vector<Problem> missing, unexpected, mismatched;
  // A tied preset reads its head from the embedding; the head tensor an export writes for
  // transformers (hf_export.h) must equal it, or its values would silently be dropped.
  const std::string head = hf_lm_head_name(report.style),
                    embedding = hf_embedding_name(report.style);
  const bool reads_embedding =
      std::any_of(units.begin(), units.end(), [](const models::UnitPtr& u) {
        return u->unit_name() == "llm_embed" || u->unit_name() == "llm_head";
      });
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
  std::vector<Assignment> plan;
  for (const auto& unit : units) {
    std::map<std::string, torch::Tensor> params;
    for (const auto& p : unit->named_parameters(true))
      params[unit->unit_name() + "." + p.key()] = p.value();
    std::set<std::string> covered;
    for (const auto& m : hf_mappings_for_unit(preset, unit->unit_name(), report.style)) {
      Assignment a{m, {}};
      for (const auto& part : m.parts) {
        const auto it = params.find(part);
        if (it != params.end()) a.params.push_back(it->second), covered.insert(part);
      }
      // A head tied to the embedding in the same process has no output weight of its own.
      if (a.params.empty() && preset.llm.tie_embeddings && m.parts[0] == "llm_head.output.weight")
        continue;
      OMNIBAL_CHECK(a.params.size() == m.parts.size(), "name map: unit ", unit->unit_name(),
                    " lacks parameters ", join(m.parts, ", "), " that ", m.hf_name, " needs");
      std::vector<std::string> names = m.parts;
      names.push_back(m.hf_name);
      if (!ckpt.contains(m.hf_name)) {
        missing.push_back({join(m.parts, ", ") + " (" + m.hf_name + ")", names});
        continue;
      }
      std::vector<std::vector<int64_t>> shapes;
      for (const auto& p : a.params) shapes.push_back(p.sizes().vec());
      const std::vector<int64_t> want = fused_shape(m, shapes);
      const auto& have = ckpt.entry(m.hf_name).shape;
      if (have != want) {
        mismatched.push_back({m.hf_name + ": checkpoint " + shape_string(have) + ", model " +
                                  shape_string(want) + " (" + join(m.parts, ", ") + ")",
                              names});
        continue;
      }
      plan.push_back(std::move(a));
    }
    for (const auto& [name, p] : params)
      OMNIBAL_CHECK(covered.count(name), "name map: parameter ", name, " has no Hugging Face name");
  }

  std::string refused;
  auto sort_out = [&](const std::vector<Problem>& problems, const char* title,
                      std::vector<std::string>& kept) {
    std::vector<std::string> bad;
    for (const auto& p : problems) (allowed(allow_missing, p.names) ? kept : bad).push_back(p.text);
    if (!bad.empty())
      refused += "\n" + std::string(title) + " (" + std::to_string(bad.size()) + "):\n  - " +
                 join(bad, "\n  - ");
  };
  sort_out(missing, "missing from the checkpoint", report.missing);
  sort_out(unexpected, "unexpected in the checkpoint", report.unexpected);
  sort_out(mismatched, "shape mismatches", report.mismatched);
  OMNIBAL_CHECK(
      refused.empty(), "model.init_from ", dir, " (", hf_llm_style_name(report.style),
      " layout) does not match preset ", preset.name, ":", refused,
      "\nallow these with model.allow_missing: [glob patterns of omnibal or Hugging Face names]");

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
      dir, report.loaded, hf_llm_style_name(report.style), report.opened_files.size(),
      report.missing.size(), report.unexpected.size(), report.mismatched.size());
  return report;
}

}  // namespace omnibal::checkpoint

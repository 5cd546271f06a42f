#include "checkpoint/hf_style.h"

#include "core/error.h"

#include <fstream>

namespace omnibal::checkpoint {

HfStyle hf_style_from_config(const nlohmann::json& config, const std::string& where) {
  OMNIBAL_CHECK(config.is_object(), where, ": expected a JSON object");
  if (config.contains("omnibal") && config["omnibal"].is_object() &&
      config["omnibal"].contains("llm_style")) {
    const auto& s = config["omnibal"]["llm_style"];
    OMNIBAL_CHECK(s.is_string(), where, ": omnibal.llm_style: expected a string");
    return parse_hf_style(s.get<std::string>());
  }
  std::string arch;
  if (config.contains("llm_config") && config["llm_config"].is_object()) {
    const auto& a = config["llm_config"].value("architectures", nlohmann::json::array());
    if (a.is_array() && !a.empty() && a[0].is_string()) arch = a[0].get<std::string>();
  }
  if (arch == "InternLM2ForCausalLM") return HfStyle::kInternLm2;
  if (arch == "LlamaForCausalLM") return HfStyle::kLlama;
  if (arch == "Phi3ForCausalLM") return HfStyle::kLlamaFused;
  OMNIBAL_FAIL(
      where, ": llm_config.architectures[0] is ", arch.empty() ? "absent" : "\"" + arch + "\"",
      "; omnibal reads InternLM2ForCausalLM (internlm2), LlamaForCausalLM (llama) and ",
      "Phi3ForCausalLM (llama-fused). Set model.hf_style: internlm2 | llama | llama-fused if the ",
      "tensors follow one of these layouts");
}

HfStyle hf_style_of_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), path,
                ": cannot open (model.init_from needs the checkpoint's config.json to tell ",
                "the LLM layout; or set model.hf_style)");
  nlohmann::json config;
  try {
    in >> config;
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(path, ": not valid JSON: ", e.what());
  }
  return hf_style_from_config(config, path);
}

HfStyle resolve_hf_style(HfStyle value, const std::string& init_from) {
  if (value != HfStyle::kAuto) return value;
  return init_from.empty() ? HfStyle::kInternLm2 : hf_style_of_dir(init_from);
}

HfStyle resolve_hf_style(const std::string& value, const std::string& init_from) {
  return resolve_hf_style(parse_choice<HfStyle>(value, "model.hf_style"), init_from);
}

}  // namespace omnibal::checkpoint

// Which Hugging Face LLM naming (HfStyle, model.hf_style) a checkpoint directory uses, and the one rule that
// makes import (model.init_from) and export (omnibal-plan export) agree:
//   import: model.hf_style if set, else the directory's config.json:
//     1. "omnibal": {"llm_style": ...}, written by export_hf, wins;
//     2. else llm_config.architectures[0]: InternLM2ForCausalLM -> internlm2,
//        LlamaForCausalLM -> llama, Phi3ForCausalLM -> llama-fused (qkv_proj / gate_up_proj,
//        as in Mini-InternVL-Chat-4B-V1-5); anything else is refused naming the architecture.
//   the trainer stores the resolved style as model.hf_style in the config it saves with every
//   checkpoint; export uses that (internlm2 for runs started without init_from, or from
//   checkpoints older than the key) unless --style is given.
// So a model imported from a LLaMA-style InternVL exports in LLaMA style, and an export always
// imports again under the style it was written with.
// Not here: the names themselves (hf_name_map.h); the consistency check of a style against a
// checkpoint's tensor names (load_pretrained does it).
#pragma once

#include "checkpoint/hf_name_map.h"
#include "core/choices.h"

#include <nlohmann/json.hpp>

#include <string>

namespace omnibal::checkpoint {

/// The style an InternVL-Chat config.json (parsed) declares; `where` names the file in errors.
/// Never kAuto. Throws omnibal::Error when it has neither an omnibal.llm_style nor a known
/// llm_config.architectures[0].
HfStyle hf_style_from_config(const nlohmann::json& config, const std::string& where);

/// hf_style_from_config of `dir`/config.json. Throws omnibal::Error naming the file when it is
/// missing or not JSON.
HfStyle hf_style_of_dir(const std::string& dir);

/// model.hf_style resolved (never kAuto): kAuto -> hf_style_of_dir(init_from), or internlm2 when
/// init_from is empty; otherwise `value`.
HfStyle resolve_hf_style(HfStyle value, const std::string& init_from);
/// The same from the key's text ("auto", "llama", ...); errors name model.hf_style and the choices.
HfStyle resolve_hf_style(const std::string& value, const std::string& init_from);

}  // namespace omnibal::checkpoint

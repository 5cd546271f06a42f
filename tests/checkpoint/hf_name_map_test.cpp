// The Hugging Face InternVL name map: export then import gives identical tensors in all three
// LLM styles (fused/unfused QKV and gate/up), a fixture written by python3-torch from the
// published InternLM2 layout (fixtures/make_hf_fixture.py) loads into the omnibal names, a
// pipeline stage reads only its shards, and missing/unexpected/mismatched tensors are listed
// all at once.
#include "checkpoint/hf_checkpoint_dir.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/hf_name_map.h"
#include "checkpoint/hf_style.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "models/vlm.h"
#include "tests/checkpoint/test_dirs.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

namespace fs = std::filesystem;
namespace ckpt = omnibal::checkpoint;
namespace models = omnibal::models;
using ckpt::testing::ScratchDir;

namespace {

const std::string kFixtures = std::string(OMNIBAL_SOURCE_DIR) + "/tests/checkpoint/fixtures/";

std::vector<models::UnitPtr> build(const omnibal::ModelPreset& preset, uint64_t seed,
                                   int64_t begin = 0, int64_t end = -1) {
  const auto opt = models::VlmOptions{}.with_img_context_id(3).with_seed(seed);
  const int64_t n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  return models::make_units(preset, opt, begin, end < 0 ? n : end);
}

std::map<std::string, torch::Tensor> named(const std::vector<models::UnitPtr>& units) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& u : units)
    for (const auto& p : u->named_parameters(true))
      out[u->unit_name() + "." + p.key()] = p.value().detach().clone();
  return out;
}

}  // namespace

TEST_CASE("every parameter of every preset has exactly one Hugging Face name", "[hf]") {
  const auto preset_name = GENERATE(as<std::string>{}, "tiny", "base-100m", "internvl-1.5-6b-20b");
  const auto style = GENERATE(omnibal::HfStyle::kInternLm2, omnibal::HfStyle::kLlama,
                              omnibal::HfStyle::kLlamaFused);
  const auto preset = omnibal::load_model_preset(preset_name);
  std::set<std::string> hf, parts;
  int64_t elements = 0;
  for (const auto& m : ckpt::hf_mappings(preset, style)) {
    CHECK(hf.insert(m.hf_name).second ==
          !(preset.llm.tie_embeddings && m.parts[0] == "llm_head.output.weight"));
    for (const auto& p : m.parts) CHECK(parts.insert(p).second);
  }
  if (preset_name == "tiny") {
    // The mapped names are exactly the model's parameter names.
    std::set<std::string> model_names;
    for (const auto& [name, t] : named(build(preset, 1)))
      model_names.insert(name), elements += t.numel();
    CHECK(parts == model_names);
    const auto counts = models::unit_parameter_counts(preset);
    CHECK(elements == std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  }
  const size_t llm_tensors_per_block = style == omnibal::HfStyle::kInternLm2 ? 7
                                       : style == omnibal::HfStyle::kLlama   ? 9
                                                                             : 6;
  size_t block0 = 0;
  for (const auto& name : hf) block0 += name.rfind("language_model.model.layers.0.", 0) == 0;
  CHECK(block0 == llm_tensors_per_block);
}

TEST_CASE("InternLM2 wqkv interleaves q heads, k and v per KV group", "[hf]") {
  omnibal::LlmPreset llm;
  llm.width = 8, llm.heads = 4, llm.kv_heads = 2;  // head_dim 2, 2 query heads per group
  const auto q = torch::arange(8 * 8, torch::kFloat).reshape({8, 8});
  const auto k = 1000 + torch::arange(4 * 8, torch::kFloat).reshape({4, 8});
  const auto v = 2000 + torch::arange(4 * 8, torch::kFloat).reshape({4, 8});
  const ckpt::HfTensorMapping m{"x.wqkv.weight", {"q", "k", "v"}, ckpt::HfFusion::kInternLm2Qkv};
  const auto fused = ckpt::fuse_for_hf(m, {q, k, v}, llm);
  REQUIRE(fused.sizes() == std::vector<int64_t>{16, 8});
  // Rows (hand-written): group 0 = q heads 0,1 (q rows 0-3), k head 0 (k rows 0-1), v head 0;
  // group 1 = q heads 2,3 (q rows 4-7), k rows 2-3, v rows 2-3.
  const auto expected = torch::cat({q.narrow(0, 0, 4), k.narrow(0, 0, 2), v.narrow(0, 0, 2),
                                    q.narrow(0, 4, 4), k.narrow(0, 2, 2), v.narrow(0, 2, 2)});
  CHECK(torch::equal(fused, expected));
  const auto parts = ckpt::split_from_hf(m, fused, {{8, 8}, {4, 8}, {4, 8}}, llm);
  CHECK(torch::equal(parts[0], q));
  CHECK(torch::equal(parts[1], k));
  CHECK(torch::equal(parts[2], v));
  CHECK_THROWS_WITH(ckpt::split_from_hf(m, fused.narrow(0, 0, 12), {{8, 8}, {4, 8}, {4, 8}}, llm),
                    Catch::Contains("x.wqkv.weight: shape [12, 8], the model expects [16, 8]"));
}

TEST_CASE("export then import gives identical tensors in every LLM style", "[hf]") {
  const auto style = GENERATE(omnibal::HfStyle::kInternLm2, omnibal::HfStyle::kLlama,
                              omnibal::HfStyle::kLlamaFused);
  const bool tied = GENERATE(false, true);
  auto preset = omnibal::load_model_preset("tiny");
  preset.llm.tie_embeddings = tied;
  ScratchDir dir("hf_roundtrip");
  const auto source = named(build(preset, 7));
  // Small shards so the export has several files; extra names (optimizer state) are skipped.
  auto with_extra = source;
  with_extra["optim.llm_head.norm.weight.exp_avg"] = torch::zeros({4});
  const auto report =
      ckpt::export_hf(with_extra, preset, dir.str(),
                      ckpt::HfExportOptions{}.with_style(style).with_max_shard_bytes(1 << 20));
  CHECK(report.files.size() >= 3);
  CHECK(report.ignored == std::vector<std::string>{"optim.llm_head.norm.weight.exp_avg"});
  CHECK(fs::exists(dir.file("config.json")));
  CHECK(ckpt::HfCheckpointDir(dir.str()).names().size() == static_cast<size_t>(report.tensors));
  // What import reads back as the naming: omnibal.llm_style, and the architecture alone.
  CHECK(ckpt::hf_style_of_dir(dir.str()) == style);
  auto config = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
  config.erase("omnibal");
  CHECK(ckpt::hf_style_from_config(config, "config.json") == style);

  auto target = build(preset, 99);
  CHECK_FALSE(torch::equal(named(target).at("llm_block_1.attention.wk.weight"),
                           source.at("llm_block_1.attention.wk.weight")));
  const auto loaded = ckpt::load_pretrained(target, preset, dir.str(), {});
  CHECK(loaded.style == style);
  CHECK(loaded.missing.empty());
  CHECK(loaded.unexpected.empty());
  for (const auto& [name, t] : named(target)) {
    INFO(name);
    CHECK(torch::equal(t, source.at(name)));
  }
}

TEST_CASE("bf16 export loads into fp32 parameters as the rounded values", "[hf]") {
  const auto preset = omnibal::load_model_preset("tiny");
  ScratchDir dir("hf_bf16");
  const auto source = named(build(preset, 3));
  ckpt::export_hf(source, preset, dir.str(), ckpt::HfExportOptions{}.with_dtype(torch::kBFloat16));
  const auto config = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
  CHECK(config["torch_dtype"] == "bfloat16");
  CHECK(config["llm_config"]["num_key_value_heads"] == preset.llm.kv_heads);
  auto target = build(preset, 4);
  ckpt::load_pretrained(target, preset, dir.str(), {});
  const auto got = named(target);
  for (const auto& name : {"vit_block_1.attn.qkv.weight", "llm_block_2.attention.wq.weight"})
    CHECK(torch::equal(got.at(name), source.at(name).to(torch::kBFloat16).to(torch::kFloat)));
}

TEST_CASE("a Hugging Face InternLM2 checkpoint written by python3-torch loads into omnibal names",
          "[hf]") {
  const auto preset = omnibal::load_model_preset(kFixtures + "micro.yaml");
  auto units = build(preset, 5);
  const auto report = ckpt::load_pretrained(units, preset, kFixtures + "hf_micro_internlm2", {});
  CHECK(report.style == omnibal::HfStyle::kInternLm2);
  CHECK(report.opened_files.size() == 2);
  const ckpt::SafetensorsFile expected(kFixtures + "expected_micro.safetensors");
  const auto got = named(units);
  CHECK(got.size() == expected.names().size());
  for (const auto& name : expected.names()) {
    INFO(name);
    REQUIRE(got.count(name));
    CHECK(torch::equal(got.at(name), expected.tensor(name)));
  }
}

TEST_CASE("a pipeline stage reads only the shards holding its units", "[hf]") {
  const auto preset = omnibal::load_model_preset(kFixtures + "micro.yaml");
  const auto names = omnibal::unit_names(preset);
  const auto first_llm = std::find(names.begin(), names.end(), "llm_block_0") - names.begin();
  ScratchDir copy("hf_stage");
  fs::copy(kFixtures + "hf_micro_internlm2", copy.str(), fs::copy_options::recursive);
  // The vision shard is gone: an LLM-only stage does not notice, a ViT stage does.
  fs::remove(copy.file("model-00001-of-00002.safetensors"));
  auto llm_stage = build(preset, 5, first_llm);
  const auto report = ckpt::load_pretrained(llm_stage, preset, copy.str(), {});
  CHECK(report.opened_files == std::vector<std::string>{"model-00002-of-00002.safetensors"});
  const ckpt::SafetensorsFile expected(kFixtures + "expected_micro.safetensors");
  CHECK(torch::equal(named(llm_stage).at("llm_block_1.attention.wv.weight"),
                     expected.tensor("llm_block_1.attention.wv.weight")));
  auto vit_stage = build(preset, 5, 0, 2);
  CHECK_THROWS_WITH(ckpt::load_pretrained(vit_stage, preset, copy.str(), {}),
                    Catch::Contains("model-00001-of-00002.safetensors"));
}

TEST_CASE("missing, unexpected and mismatched tensors are listed together, then refused or allowed",
          "[hf]") {
  const auto preset = omnibal::load_model_preset("tiny");
  ScratchDir dir("hf_problems");
  auto source = named(build(preset, 7));
  ckpt::export_hf(source, preset, dir.str());
  // Rewrite the export into one file: drop the projector's fc1, add a stray tensor, and give
  // one ViT bias the wrong shape.
  const ckpt::HfCheckpointDir exported(dir.str());
  std::map<std::string, torch::Tensor> hf;
  for (const auto& name : exported.names()) hf[name] = exported.tensor(name).clone();
  hf.erase("mlp1.1.weight");
  hf.erase("mlp1.1.bias");
  hf["language_model.model.extra_adapter.weight"] = torch::zeros({2, 2});
  hf["language_model.model.layers.0.rotary_emb.inv_freq"] = torch::zeros({16});
  hf["vision_model.encoder.layers.0.mlp.fc1.bias"] = torch::zeros({3});
  ScratchDir bad("hf_problems_single");
  ckpt::write_safetensors(bad.file("model.safetensors"), hf);

  auto units = build(preset, 11);
  const auto before = named(units);
  try {
    ckpt::load_pretrained(units, preset, bad.str(), {});
    FAIL("no error");
  } catch (const omnibal::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("missing from the checkpoint (2)") != std::string::npos);
    CHECK(msg.find("projector.fc1.weight (mlp1.1.weight)") != std::string::npos);
    CHECK(msg.find("projector.fc1.bias (mlp1.1.bias)") != std::string::npos);
    CHECK(msg.find("unexpected in the checkpoint (1)") != std::string::npos);
    CHECK(msg.find("language_model.model.extra_adapter.weight") != std::string::npos);
    CHECK(msg.find("shape mismatches (1)") != std::string::npos);
    CHECK(msg.find("vision_model.encoder.layers.0.mlp.fc1.bias: checkpoint [3], model [256]") !=
          std::string::npos);
  }
  // Refused means untouched.
  for (const auto& [name, t] : named(units)) CHECK(torch::equal(t, before.at(name)));

  const auto report =
      ckpt::load_pretrained(units, preset, bad.str(),
                            {"projector.fc1.*", "*.extra_adapter.*", "vit_block_0.mlp.fc1.bias"});
  CHECK(report.missing.size() == 2);
  CHECK(report.unexpected.size() == 1);
  CHECK(report.mismatched.size() == 1);
  const auto got = named(units);
  CHECK(torch::equal(got.at("projector.fc1.weight"),
                     before.at("projector.fc1.weight")));  // kept init
  CHECK(torch::equal(got.at("vit_block_0.mlp.fc1.bias"), before.at("vit_block_0.mlp.fc1.bias")));
  CHECK(torch::equal(got.at("projector.fc2.weight"), source.at("projector.fc2.weight")));  // loaded
  CHECK(torch::equal(got.at("llm_head.output.weight"), source.at("llm_head.output.weight")));
}

TEST_CASE("export lists every missing parameter before writing", "[hf]") {
  const auto preset = omnibal::load_model_preset("tiny");
  ScratchDir dir("hf_export_missing");
  auto source = named(build(preset, 7));
  source.erase("llm_block_2.attention.wk.weight");
  source.erase("vit_embed.class_embedding");
  CHECK_THROWS_WITH(ckpt::export_hf(source, preset, dir.file("out")),
                    Catch::Contains("2 parameters of preset tiny are missing") &&
                        Catch::Contains("llm_block_2.attention.wk.weight (for "
                                        "language_model.model.layers.2.attention.wqkv.weight)") &&
                        Catch::Contains("vit_embed.class_embedding"));
  CHECK_FALSE(fs::exists(dir.file("out")));
  CHECK(ckpt::detect_hf_style({"language_model.model.layers.0.self_attn.qkv_proj.weight"}) ==
        omnibal::HfStyle::kLlamaFused);
  CHECK_THROWS_WITH(ckpt::detect_hf_style({"mlp1.0.weight"}),
                    Catch::Contains("cannot tell the LLM layout"));
  CHECK(ckpt::parse_hf_style("llama-fused") == omnibal::HfStyle::kLlamaFused);
  CHECK_THROWS_WITH(ckpt::parse_hf_style("qwen"),
                    Catch::Contains("expected internlm2, llama or llama-fused"));
}

TEST_CASE(
    "config.json decides the LLM naming; unknown architectures and contradicting names are refused",
    "[hf]") {
  const auto preset = omnibal::load_model_preset("tiny");
  auto config = ckpt::hf_config_json(preset, omnibal::HfStyle::kLlama, "float32");
  config.erase("omnibal");
  config["llm_config"]["architectures"] = {"Qwen2ForCausalLM"};
  CHECK_THROWS_WITH(ckpt::hf_style_from_config(config, "q/config.json"),
                    Catch::Contains(
                        "q/config.json: llm_config.architectures[0] is \"Qwen2ForCausalLM\"") &&
                        Catch::Contains("model.hf_style"));
  config.erase("llm_config");
  CHECK_THROWS_WITH(ckpt::hf_style_from_config(config, "q/config.json"),
                    Catch::Contains("is absent"));
  config["omnibal"] = {{"llm_style", "llama-fused"}};
  CHECK(ckpt::hf_style_from_config(config, "q/config.json") == omnibal::HfStyle::kLlamaFused);

  CHECK(ckpt::resolve_hf_style("auto", "") == omnibal::HfStyle::kInternLm2);
  CHECK(ckpt::resolve_hf_style("llama", "/nonexistent") ==
        omnibal::HfStyle::kLlama);  // the override reads nothing
  CHECK_THROWS_WITH(ckpt::resolve_hf_style("qwen", ""),
                    Catch::Contains("model.hf_style: expected auto"));
  CHECK_THROWS_WITH(ckpt::resolve_hf_style("auto", "/nonexistent"),
                    Catch::Contains("/nonexistent/config.json"));

  // An InternLM2 export loaded as LLaMA (a wrong config.json or override) is refused before any copy.
  ScratchDir dir("hf_style_conflict");
  ckpt::export_hf(named(build(preset, 7)), preset, dir.str());
  auto units = build(preset, 8);
  const auto before = named(units);
  CHECK_THROWS_WITH(ckpt::load_pretrained(units, preset, dir.str(), {}, omnibal::HfStyle::kLlama),
                    Catch::Contains("the LLM layout is llama") &&
                        Catch::Contains("tensor names are internlm2's"));
  CHECK(torch::equal(named(units).at("llm_block_0.attention.wq.weight"),
                     before.at("llm_block_0.attention.wq.weight")));
  CHECK(ckpt::load_pretrained(units, preset, dir.str(), {}, omnibal::HfStyle::kInternLm2).loaded ==
        static_cast<int64_t>(before.size()));
}

TEST_CASE("a tied head is exported as its own tensor; config.json records what training used",
          "[hf]") {
  const auto style = GENERATE(omnibal::HfStyle::kInternLm2, omnibal::HfStyle::kLlama,
                              omnibal::HfStyle::kLlamaFused);
  auto preset = omnibal::load_model_preset("tiny");
  preset.llm.tie_embeddings = true;
  ScratchDir dir("hf_tied_head");
  const auto source = named(build(preset, 7));
  REQUIRE_FALSE(
      source.count("llm_head.output.weight"));  // one process: the head shares the embedding
  const auto trained = ckpt::HfTrainingSettings{}.with_tiles(2, 9).with_pad_token_id(5);
  ckpt::export_hf(source, preset, dir.str(),
                  ckpt::HfExportOptions{}.with_style(style).with_trained(trained));
  const ckpt::HfCheckpointDir exported(dir.str());
  const auto head = ckpt::hf_lm_head_name(style);
  REQUIRE(exported.contains(head));
  CHECK(torch::equal(exported.tensor(head), source.at("llm_embed.tok_embeddings.weight")));
  const auto config = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
  // InternVLChatConfig forces tie_word_embeddings = False, so the head must be a tensor.
  CHECK(config["tie_word_embeddings"] == false);
  CHECK(config["llm_config"]["tie_word_embeddings"] == false);
  CHECK(config["omnibal"]["tie_embeddings"] == true);
  CHECK(config["llm_config"]["pad_token_id"] == 5);
  CHECK(config["dynamic_image_size"] == true);
  CHECK(config["use_thumbnail"] == true);
  CHECK(config["min_dynamic_patch"] == 2);
  CHECK(config["max_dynamic_patch"] == 9);
  CHECK(config["template"] == "internlm2-chat");  // the <|im_start|> format in every style
  CHECK(config["system_message"] == "");

  // It imports again (the head copy is known), under any split of the head and the embedding.
  auto target = build(preset, 99);
  const auto loaded = ckpt::load_pretrained(target, preset, dir.str(), {});
  CHECK(loaded.unexpected.empty());
  CHECK(torch::equal(named(target).at("llm_embed.tok_embeddings.weight"),
                     source.at("llm_embed.tok_embeddings.weight")));
  const auto names = omnibal::unit_names(preset);
  auto head_stage = build(preset, 98, static_cast<int64_t>(names.size()) - 1);
  ckpt::load_pretrained(head_stage, preset, dir.str(), {});
  CHECK(torch::equal(named(head_stage).at("llm_head.output.weight"),
                     source.at("llm_embed.tok_embeddings.weight")));

  // A head that differs from the embedding would be lost in a tied preset: refused unless allowed.
  std::map<std::string, torch::Tensor> hf;
  for (const auto& name : exported.names()) hf[name] = exported.tensor(name).clone();
  hf[head] = hf[head] + 1;
  ScratchDir other("hf_tied_head_differs");
  ckpt::write_safetensors(other.file("model.safetensors"), hf);
  fs::copy_file(dir.file("config.json"), other.file("config.json"));
  auto units = build(preset, 97);
  CHECK_THROWS_WITH(ckpt::load_pretrained(units, preset, other.str(), {}),
                    Catch::Contains(head + ": differs from " + ckpt::hf_embedding_name(style)));
  CHECK(ckpt::load_pretrained(units, preset, other.str(), {head}).unexpected.size() == 1);
}

TEST_CASE("config.json refuses a pad id outside the vocabulary, bad tiles and unknown templates",
          "[hf]") {
  const auto preset = omnibal::load_model_preset("tiny");
  const auto style = omnibal::HfStyle::kLlamaFused;
  CHECK(ckpt::hf_config_json(preset, style, "float32")["llm_config"]["pad_token_id"] == 0);
  CHECK_THROWS_WITH(ckpt::hf_config_json(preset, style, "float32",
                                         ckpt::HfTrainingSettings{}.with_pad_token_id(1024)),
                    Catch::Contains(
                        "pad_token_id 1024 is not a token of preset tiny (vocab_size 1024)"));
  CHECK_THROWS_WITH(ckpt::hf_config_json(preset, style, "float32",
                                         ckpt::HfTrainingSettings{}.with_tiles(3, 2)),
                    Catch::Contains("min_dynamic_patch <= max_dynamic_patch") &&
                        Catch::Contains("got 3 and 2"));
  CHECK_THROWS_WITH(ckpt::hf_config_json(preset, style, "float32",
                                         ckpt::HfTrainingSettings{}.with_chat_template("vicuna")),
                    Catch::Contains("data.template \"vicuna\""));
  // Nothing is written when a setting is bad.
  ScratchDir dir("hf_bad_settings");
  CHECK_THROWS(ckpt::export_hf(named(build(preset, 7)), preset, dir.file("out"),
                               ckpt::HfExportOptions{}.with_trained(
                                   ckpt::HfTrainingSettings{}.with_pad_token_id(-1))));
  CHECK_FALSE(fs::exists(dir.file("out")));
}

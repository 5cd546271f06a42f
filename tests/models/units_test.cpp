// Pipeline units: stages built separately and run in sequence (state serialised at every stage
// boundary) equal the monolithic forward and backward; per-unit save/load; parameter counts.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>

#include "core/rng.h"
#include "model_test_util.h"

using namespace omnibal::models;
using namespace omnibal::models::testing;

namespace {

/// Random strictly increasing cut points in (0, n), from Rng(seed): 1 to 4 cuts.
std::vector<int64_t> random_cuts(int64_t n, uint64_t seed) {
  omnibal::Rng rng(seed);
  std::vector<int64_t> all;
  for (int64_t i = 1; i < n; ++i) all.push_back(i);
  rng.shuffle(all);
  const auto count = static_cast<size_t>(1 + rng.below(4));
  std::vector<int64_t> cuts(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

}  // namespace

TEST_CASE("units split into stages at random points equal the monolithic forward and backward",
          "[models][units]") {
  const uint64_t seed = GENERATE(range(1, 7));
  const auto& preset = tiny_preset();
  const auto options = VlmOptions{}.with_img_context_id(kImgContextId).with_seed(42);
  const PackBatch pack = make_pack(preset, {{2, 20, 6}, {0, 9, 3}, {1, 15, 5}}, seed);

  Vlm whole(preset, options);
  UnitState ref = whole->forward(pack);
  ref.loss_sum.backward();

  const int64_t n = whole->num_units();
  std::vector<int64_t> bounds{0};
  for (auto c : random_cuts(n, seed)) bounds.push_back(c);
  bounds.push_back(n);
  INFO("stage bounds: " << torch::tensor(bounds));

  // Forward stage by stage; at each boundary only hidden + side_tensor() cross, like a send.
  std::vector<std::vector<UnitPtr>> stages;
  std::vector<torch::Tensor> inputs, outputs;
  UnitState state = UnitState::from_pack(pack);
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    stages.push_back(make_units(preset, options, bounds[s], bounds[s + 1]));
    if (s > 0) {
      torch::Tensor received = state.hidden.detach().clone();
      if (received.is_floating_point()) received.requires_grad_(true);
      state = UnitState::from_wire(received, state.side_tensor());
      inputs.push_back(received);
    }
    state = run_units(stages.back(), state);
    outputs.push_back(s + 2 < bounds.size() ? state.hidden : state.loss_sum);
  }
  CHECK(state.label_count == ref.label_count);
  CHECK(state.loss_sum.item<double>() == Approx(ref.loss_sum.item<double>()).epsilon(1e-6));

  // Backward from the last stage to the first, passing the input gradient like a recv-grad.
  torch::Tensor grad;
  for (size_t s = stages.size(); s-- > 0;) {
    if (s + 1 == stages.size()) outputs[s].backward();
    else outputs[s].backward(grad);
    if (s > 0) grad = inputs[s - 1].grad();
  }
  const auto ref_grads = grads_of(*whole);
  int64_t compared = 0;
  for (auto& stage : stages)
    for (auto& unit : stage)
      for (const auto& item : unit->named_parameters()) {
        const std::string name = unit->unit_name() + "." + item.key();
        INFO(name);
        const torch::Tensor g = item.value().grad();
        REQUIRE(g.defined());
        CHECK(rel_err(g, ref_grads.at(name)) < 1e-5);
        ++compared;
      }
  CHECK(compared == static_cast<int64_t>(ref_grads.size()));
}

TEST_CASE("recomputing a random subset of units gives the plain loss and gradients",
          "[models][units][recompute]") {
  const uint64_t seed = GENERATE(range(1, 5));
  const auto& preset = tiny_preset();
  const auto options = VlmOptions{}.with_img_context_id(kImgContextId).with_seed(3);
  const PackBatch pack = make_pack(preset, {{2, 12, 5}, {0, 7, 3}, {1, 9, 4}}, seed);
  Vlm plain(preset, options), recomputed(preset, options);
  omnibal::Rng rng(seed);
  int64_t flagged = 0;
  for (auto& unit : recomputed->units()) {
    const bool on = seed == 1 || rng.below(2) == 1;  // seed 1: every unit
    unit->set_recompute(on);
    flagged += on;
  }
  INFO("units recomputed: " << flagged);
  UnitState a = plain->forward(pack);
  UnitState b = recomputed->forward(pack);
  CHECK(b.loss_sum.item<double>() == Approx(a.loss_sum.item<double>()).epsilon(1e-6));
  a.loss_sum.backward();
  b.loss_sum.backward();
  const auto ga = grads_of(*plain), gb = grads_of(*recomputed);
  for (const auto& [name, g] : ga) {
    INFO(name);
    CHECK(rel_err(gb.at(name), g) < 1e-5);
  }
  // A recomputed unit keeps no graph of its own: its output hangs off one custom node.
  if (seed == 1) {
    UnitState s = recomputed->forward(UnitState::from_pack(pack), 0, 2);
    CHECK(std::string(s.hidden.grad_fn()->name()).find("RecomputeFunction") != std::string::npos);
  }
}

TEST_CASE("unit names, kinds and analytic parameter counts match the built model",
          "[models][units]") {
  const std::string name = GENERATE(as<std::string>{}, "tiny", "base-100m");
  const auto preset = omnibal::load_model_preset(name);
  const auto names = unit_names(preset);
  const auto counts = unit_parameter_counts(preset);
  REQUIRE(names.size() == static_cast<size_t>(preset.vit.depth + preset.llm.depth + 4));
  Vlm model(preset, VlmOptions{}.with_img_context_id(5));
  REQUIRE(model->num_units() == static_cast<int64_t>(names.size()));
  int64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    CHECK(model->units()[i]->unit_name() == names[i]);
    CHECK(model->units()[i]->id() == omnibal::unit_at(preset, static_cast<int>(i)));
    // Each unit consumes the phase its predecessor produces (the executor's expected shapes).
    if (i > 0) CHECK(model->units()[i]->input_phase() == model->units()[i - 1]->output_phase());
    CHECK(model->units()[i]->num_parameters() == counts[i]);
    total += counts[i];
  }
  int64_t built = 0;
  for (const auto& p : model->parameters()) built += p.numel();
  CHECK(built == total);
  // Totals computed by hand from the YAML (tiny: also the Python golden script's count).
  CHECK(total == (name == "tiny" ? 1189568 : 99587712));
  CHECK(model->units().front()->kind() == omnibal::UnitKind::kVitEmbed);
  CHECK(model->units().back()->kind() == omnibal::UnitKind::kLlmHead);
  CHECK(model->named_parameters().contains("llm_block_0.attention.wq.weight"));
  CHECK(model->named_parameters().contains("vit_block_0.attn.qkv.weight"));
}

TEST_CASE("the planning presets have their published sizes", "[models][units]") {
  // InternViT-6B-448px-V1-5 (45 blocks of width 3200) + InternLM2-chat-20B / Nous-Hermes-2-Yi-34B.
  const auto counts20 = unit_parameter_counts(omnibal::load_model_preset("internvl-1.5-6b-20b"));
  const auto counts34 = unit_parameter_counts(omnibal::load_model_preset("internvl-1.5-6b-34b"));
  // Units 0..45 are the ViT, 46 the projector, 47.. the LLM (embedding, blocks, head).
  auto sum = [](const std::vector<int64_t>& c, size_t a, size_t b) {
    int64_t t = 0;
    for (size_t i = a; i < b; ++i) t += c[i];
    return static_cast<double>(t);
  };
  REQUIRE(counts20.size() == 46 + 1 + 50);
  REQUIRE(counts34.size() == 46 + 1 + 62);
  // Hugging Face model cards: InternViT-6B-448px-V1-5 5.54B, InternLM2-chat-20B 19.9B
  // (vocabulary 92544 there, 92553 with InternVL's added tokens), Nous-Hermes-2-Yi-34B 34.4B.
  CHECK(sum(counts20, 0, 46) == Approx(5.54e9).epsilon(0.005));
  CHECK(sum(counts34, 0, 46) == sum(counts20, 0, 46));
  CHECK(sum(counts20, 47, counts20.size()) == Approx(19.86e9).epsilon(0.005));
  CHECK(sum(counts34, 47, counts34.size()) == Approx(34.39e9).epsilon(0.005));
}

TEST_CASE("initialisation depends only on seed and parameter name", "[models][units]") {
  const auto& preset = tiny_preset();
  const auto options = VlmOptions{}.with_img_context_id(kImgContextId).with_seed(9);
  Vlm whole(preset, options);
  const auto stage = make_units(preset, options, 3, 6);  // projector, llm_embed, llm_block_0
  for (const auto& unit : stage)
    for (const auto& item : unit->named_parameters())
      CHECK(torch::equal(item.value(),
                         whole->named_parameters()[unit->unit_name() + "." + item.key()]));
  Vlm other(preset, VlmOptions{options}.with_seed(10));
  CHECK_FALSE(torch::equal(other->named_parameters()["llm_block_0.attention.wq.weight"],
                           whole->named_parameters()["llm_block_0.attention.wq.weight"]));
  CHECK(whole->named_parameters()["llm_block_0.attention_norm.weight"].eq(1).all().item<bool>());
  CHECK(whole->named_parameters()["vit_block_1.ls2"].eq(0.1f).all().item<bool>());
  const double std =
      whole->named_parameters()["llm_embed.tok_embeddings.weight"].std().item<double>();
  CHECK(std == Approx(0.02).epsilon(0.02));
}

TEST_CASE("a unit's parameters round-trip through save_unit / load_unit", "[models][units]") {
  const auto& preset = tiny_preset();
  auto a = make_units(preset, VlmOptions{}.with_img_context_id(kImgContextId).with_seed(1), 4, 6);
  auto b = make_units(preset, VlmOptions{}.with_img_context_id(kImgContextId).with_seed(2), 4, 6);
  const auto dir = std::filesystem::temp_directory_path() / "omnibal_units_test";
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string path = (dir / (a[i]->unit_name() + ".pt")).string();
    save_unit(*a[i], path);
    load_unit(*b[i], path);
    for (const auto& item : a[i]->named_parameters())
      CHECK(torch::equal(item.value(), b[i]->named_parameters()[item.key()]));
  }
  // Loading another unit's file is an error that names the unit and the file.
  const std::string wrong = (dir / (a[0]->unit_name() + ".pt")).string();
  CHECK_THROWS_WITH(load_unit(*b[1], wrong),
                    Catch::Contains(b[1]->unit_name()) && Catch::Contains(wrong));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the side tensor round-trips every field", "[models][units]") {
  const PackBatch pack = make_pack(tiny_preset(), {{1, 5, 2}, {0, 4, 1}}, 3);
  const UnitState s = UnitState::from_pack(pack);
  const UnitState r = UnitState::from_wire(s.hidden, s.side_tensor());
  CHECK(r.phase == Phase::kPixels);
  CHECK(torch::equal(r.input_ids, s.input_ids));
  CHECK(torch::equal(r.position_ids, s.position_ids));
  CHECK(torch::equal(r.labels, s.labels));
  CHECK(torch::equal(r.cu_seqlens, s.cu_seqlens));
  CHECK(torch::equal(r.image_flags, s.image_flags));
  CHECK(s.side_tensor().size(0) == 5 + 3 * s.num_tokens() + 3 + 2);
  CHECK_THROWS_WITH(UnitState::from_wire(s.hidden, s.side_tensor().slice(0, 0, -1)),
                    Catch::Contains("implies"));
}

TEST_CASE("tied embeddings: shared in one process, summed across stages", "[models][units]") {
  omnibal::ModelPreset preset = tiny_preset();
  preset.llm.tie_embeddings = true;
  const auto options = VlmOptions{}.with_img_context_id(kImgContextId).with_seed(4);
  const PackBatch pack = make_pack(preset, {{1, 10, 4}, {0, 8, 3}}, 4);
  Vlm whole(preset, options);
  const torch::Tensor embed = whole->named_parameters()["llm_embed.tok_embeddings.weight"];
  CHECK_FALSE(whole->named_parameters().contains("llm_head.output.weight"));
  CHECK(unit_parameter_counts(preset).back() == preset.llm.width);
  whole->forward(pack).loss_sum.backward();

  // Two stages: [0, head) and [head]; the head holds an identically initialised copy.
  const int64_t head = whole->num_units() - 1;
  auto first = make_units(preset, options, 0, head);
  auto last = make_units(preset, options, head, head + 1);
  const torch::Tensor copy = last[0]->named_parameters()["output.weight"];
  CHECK(torch::equal(copy, embed));
  UnitState s = run_units(first, UnitState::from_pack(pack));
  torch::Tensor received = s.hidden.detach().requires_grad_(true);
  UnitState out = run_units(last, s.with_hidden(received, Phase::kLlm));
  out.loss_sum.backward();
  s.hidden.backward(received.grad());
  const auto embed_unit = first[static_cast<size_t>(preset.vit.depth + 2)];
  REQUIRE(embed_unit->unit_name() == "llm_embed");
  const torch::Tensor summed =
      embed_unit->named_parameters()["tok_embeddings.weight"].grad() + copy.grad();
  CHECK(rel_err(summed, embed.grad()) < 1e-5);
}

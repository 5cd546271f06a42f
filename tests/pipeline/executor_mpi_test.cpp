// The 1F1B stage executor on 2 ranks (mpiexec -n 2) against the whole model in one process:
// same loss and the same gradients for every parameter of each stage, with micro-batches of
// different shapes and a stage-boundary activation of >= 8 MiB (ViT tokens of 1,936 tiles).
#include <catch2/catch.hpp>

#include <map>

#include "comm/parallel_comms.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "schedule/one_f_one_b.h"

using namespace omnibal;

namespace {

constexpr int64_t kImgContext = 1;

ModelPreset small_wide_vit() {
  ModelPreset p = load_model_preset("tiny");
  p.vit.depth = 1;
  p.vit.mlp_dim = 64;
  p.llm.width = 32;
  p.llm.heads = 2;
  p.llm.kv_heads = 1;
  p.llm.mlp_dim = 64;
  p.llm.depth = 1;
  p.llm.max_seq_len = 16384;
  return p;
}

// `samples` samples of `tiles` real tiles each: 4 image tokens per tile, then 6 text tokens
// (labels on the last 4).
models::PackBatch make_pack(int samples, int tiles, uint64_t seed) {
  torch::manual_seed(seed);
  models::PackBatch b;
  const int64_t img = 4 * tiles, text = 6, len = img + text;
  b.pixel_values = torch::randn({samples * tiles, 3, 56, 56});
  b.image_flags = torch::ones({samples * tiles}, torch::kInt64);
  std::vector<torch::Tensor> ids, labels, pos;
  std::vector<int64_t> cu{0};
  for (int s = 0; s < samples; ++s) {
    const auto t = torch::randint(2, 1000, {text}, torch::kInt64);
    ids.push_back(torch::cat({torch::full({img}, kImgContext, torch::kInt64), t}));
    auto l = torch::full({len}, -100, torch::kInt64);
    l.slice(0, len - 4) = t.slice(0, 2);
    labels.push_back(l);
    pos.push_back(torch::arange(len, torch::kInt64));
    cu.push_back(cu.back() + len);
    b.sample_ids.push_back(s);
  }
  b.input_ids = torch::cat(ids);
  b.labels = torch::cat(labels);
  b.position_ids = torch::cat(pos);
  b.cu_seqlens = torch::tensor(cu, torch::kInt64);
  return b;
}

}  // namespace

TEST_CASE("1F1B executor on 2 stages equals the whole model (>= 8 MiB activations)", "[pipeline][mpi]") {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE(world == 2);
  const ModelPreset preset = small_wide_vit();
  const auto names = models::unit_names(preset);
  const int cut = 2;  // vit_embed, vit_block_0 | projector, llm_embed, llm_block_0, llm_head
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> packs = {make_pack(242, 8, 1), make_pack(30, 3, 2),
                                                make_pack(61, 5, 3)};
  // Reference: every unit in one process, loss normalised by all label tokens.
  auto all = models::make_units(preset, opt, 0, static_cast<int64_t>(names.size()));
  int64_t labels = 0;
  std::vector<models::UnitState> outs;
  for (const auto& p : packs) {
    outs.push_back(models::run_units(all, models::UnitState::from_pack(p)));
    labels += outs.back().label_count;
  }
  double ref_loss = 0;
  for (auto& o : outs) {
    ref_loss += o.loss_sum.item<double>();
    (o.loss_sum / static_cast<double>(labels)).backward();
  }
  std::map<std::string, torch::Tensor> ref_grads;
  for (const auto& u : all)
    for (const auto& np : u->named_parameters()) ref_grads[u->unit_name() + "." + np.key()] = np.value().grad();

  comm::ParallelComms comms(comm::ProcessGrid({1, 2, 1}, 2), comm::WaitPolicy{120, nullptr});
  const int s = comms.coord().pp;
  comm::TensorMessenger pipe(comms.pipeline());
  auto units = models::make_units(preset, opt, s == 0 ? 0 : cut, s == 0 ? cut : static_cast<int64_t>(names.size()));
  pipeline::StageExecutor stage(units, s, 2, &pipe);
  const auto program = schedule::build_1f1b_schedule(2, 3)[s];
  const auto r = stage.run_step(program, packs, 1.0 / static_cast<double>(labels));
  if (s == 1) {
    CHECK(r.label_count == labels);
    CHECK(r.loss_sum == Approx(ref_loss).epsilon(1e-5));
    REQUIRE(r.micro_batches.size() == 3);
  } else {
    // The first micro-batch's boundary activation: [1936 tiles, 17, 64] float32.
    CHECK(1936LL * 17 * 64 * 4 >= 8LL << 20);
  }
  int checked = 0;
  for (const auto& u : units) {
    for (const auto& np : u->named_parameters()) {
      const std::string name = u->unit_name() + "." + np.key();
      INFO(name);
      REQUIRE(np.value().grad().defined());
      CHECK(torch::allclose(np.value().grad(), ref_grads.at(name), 1e-4, 1e-6));
      ++checked;
    }
  }
  CHECK(checked > 0);
}

// Tensor parallelism at TP 2 (mpiexec -n 2) against one process, below the trainer: the
// vocab-parallel cross-entropy and argmax against the full ones on random logits with a padded
// vocabulary row, shard_of / gather_full round trips (fused q/k/v, padding), and the whole VLM
// (InternViT-style qk-norm + RMSNorm ViT, GQA LLM, an odd vocabulary) on a profiling pack: the
// loss and every parameter's gradient, gathered, equal the unsharded model's.
#include <catch2/catch.hpp>

#include "../comm/mpi_test_support.h"
#include "core/model_preset.h"
#include "models/tensor_parallel.h"
#include "models/vlm.h"
#include "profile/profiling_pack.h"
#include "train/tp_group.h"

namespace F = torch::nn::functional;
using omnibal::models::ShardSpec;
using omnibal::models::TensorParallel;

namespace {

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace

TEST_CASE("TP 2: vocab-parallel cross-entropy and argmax equal the full ones, padding excluded",
          "[train][tp][mpi]") {
  auto world = omnibal::comm::testing::world_comm();
  REQUIRE(world->size() == 2);
  const TensorParallel tp = omnibal::train::tensor_parallel_over(*world);
  const int64_t vocab = 1001, k = 13, per = omnibal::models::vocab_per_rank(vocab, 2);
  REQUIRE(per == 501);    // 1002 rows: one padded row on rank 1
  torch::manual_seed(3);  // the same draws on both ranks
  const torch::Tensor full = torch::randn({k, vocab}) * 3;
  torch::Tensor targets = torch::randint(0, vocab, {k}, torch::kInt64);
  targets[0] = vocab - 1;  // the last real id (rank 1's last real column)
  targets[1] = 0;
  targets[2] = per;  // rank 1's first column
  const torch::Tensor weights = torch::rand({k});
  // Reference: the whole vocabulary in one process.
  torch::Tensor ref_logits = full.clone().requires_grad_(true);
  const torch::Tensor ref_loss =
      F::cross_entropy(ref_logits, targets, F::CrossEntropyFuncOptions().reduction(torch::kNone));
  (ref_loss * weights).sum().backward();
  // This rank's columns; the padded column holds a value that would win if it were counted.
  const int64_t start = tp.rank * per;
  torch::Tensor mine = torch::full({k, per}, 1e4);
  const int64_t real = std::min(per, vocab - start);
  mine.narrow(1, 0, real).copy_(full.narrow(1, start, real));
  mine.requires_grad_(true);
  const torch::Tensor loss =
      omnibal::models::vocab_parallel_cross_entropy(mine, targets, start, vocab, tp);
  (loss * weights).sum().backward();
  CHECK(max_rel(loss, ref_loss) < 1e-6);
  const torch::Tensor g = mine.grad();
  CHECK(max_rel(g.narrow(1, 0, real), ref_logits.grad().narrow(1, start, real)) < 1e-6);
  if (real < per) CHECK(g.narrow(1, real, per - real).abs().max().item<double>() == 0.0);
  // Argmax: plant a tie across ranks on row 4 (ids 7 and per + 7): the lower id wins.
  torch::Tensor tied = full.clone();
  tied[4][7] = 50;
  tied[4][per + 7] = 50;
  torch::Tensor local = torch::full({k, per}, 1e4);
  local.narrow(1, 0, real).copy_(tied.narrow(1, start, real));
  const torch::Tensor pred = omnibal::models::vocab_parallel_argmax(local, start, vocab, tp);
  CHECK(torch::equal(pred, tied.argmax(1)));
  CHECK(pred[4].item<int64_t>() == 7);
}

TEST_CASE("TP 2: shard_of and gather_full are inverse (fused q/k/v groups, padded rows)",
          "[train][tp][mpi]") {
  auto world = omnibal::comm::testing::world_comm();
  const TensorParallel tp = omnibal::train::tensor_parallel_over(*world);
  const torch::Tensor qkv = torch::arange(6 * 4 * 3, torch::kFloat32).view({6 * 4, 3});
  ShardSpec spec{0, 3, 0, 24};
  const torch::Tensor part = omnibal::models::shard_of(qkv, spec, tp);
  REQUIRE(part.sizes() == torch::IntArrayRef({12, 3}));
  // Rank r holds rows [8g + 4r, 8g + 4r + 4) of each of the three 8-row chunks (q, k, v).
  CHECK(torch::equal(part.narrow(0, 4, 4), qkv.narrow(0, 8 + 4 * tp.rank, 4)));
  CHECK(torch::equal(omnibal::models::gather_full(part, spec, tp), qkv));
  const torch::Tensor table = torch::randn({7, 5});
  ShardSpec vocab{0, 1, 8, 7};
  const torch::Tensor rows = omnibal::models::shard_of(table, vocab, tp);
  REQUIRE(rows.size(0) == 4);
  if (tp.rank == 1) CHECK(rows[3].abs().max().item<double>() == 0.0);  // the padded row
  CHECK(torch::equal(omnibal::models::gather_full(rows, vocab, tp), table));
  const torch::Tensor wo = torch::randn({5, 6});
  ShardSpec row_parallel{1, 1, 0, 6};
  CHECK(torch::equal(omnibal::models::gather_full(omnibal::models::shard_of(wo, row_parallel, tp),
                                                  row_parallel, tp),
                     wo));
}

TEST_CASE("TP 2: the whole VLM (qk-norm, RMSNorm ViT, GQA, odd vocabulary) equals one process",
          "[train][tp][mpi]") {
  auto world = omnibal::comm::testing::world_comm();
  const TensorParallel tp = omnibal::train::tensor_parallel_over(*world);
  omnibal::ModelPreset preset = omnibal::load_model_preset("tiny");
  preset.vit.qk_norm = true;  // InternViT-6B: q and k normalised over all heads
  preset.vit.norm = omnibal::VitNorm::kRmsNorm;
  preset.llm.vocab_size = 1001;  // padded to 1002 at TP 2
  preset.llm.tie_embeddings = GENERATE(false, true);
  INFO("tie_embeddings " << preset.llm.tie_embeddings);
  omnibal::profile::ProfilingPackOptions po;
  po.q_vit = 6;
  po.q_tok = 200;
  po.samples = 3;
  po.seed = 5;
  const auto pack = omnibal::profile::make_profiling_pack(preset, po);
  omnibal::models::VlmOptions opt;
  opt.with_img_context_id(omnibal::profile::profiling_img_context_id(preset, po)).with_seed(9);
  const int64_t n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  auto run = [&](const std::vector<omnibal::models::UnitPtr>& units) {
    auto out = omnibal::models::run_units(units, omnibal::models::UnitState::from_pack(pack));
    out.loss_sum.backward();
    return out;
  };
  const auto whole = omnibal::models::make_units(preset, opt, 0, n);
  const auto ref = run(whole);
  auto sharded = omnibal::models::make_units(preset, opt.with_tensor_parallel(tp), 0, n);
  const auto got = run(sharded);
  REQUIRE(ref.label_count > 0);
  CHECK(got.label_count == ref.label_count);
  CHECK(std::abs(got.loss_sum.item<double>() / ref.loss_sum.item<double>() - 1) < 1e-6);
  CHECK(torch::equal(got.predictions, ref.predictions));
  int sharded_params = 0;
  for (size_t u = 0; u < whole.size(); ++u) {
    auto full = whole[u]->named_parameters();
    for (const auto& np : sharded[u]->named_parameters()) {
      INFO(whole[u]->unit_name() << "." << np.key());
      const ShardSpec spec = sharded[u]->shard_spec(np.key());
      sharded_params += spec.sharded() ? 1 : 0;
      const torch::Tensor value = omnibal::models::gather_full(np.value().detach(), spec, tp);
      CHECK(torch::equal(value, full[np.key()].detach()));  // initialised as at TP 1
      const torch::Tensor grad = omnibal::models::gather_full(np.value().grad(), spec, tp);
      CHECK(max_rel(grad, full[np.key()].grad()) < 1e-5);
    }
  }
  // 2 ViT blocks x 8 (qkv w/b, q/k norm, proj w, fc1 w/b, fc2 w) + 4 LLM blocks x 7 + embed
  // (+ the untied head).
  CHECK(sharded_params == 2 * 8 + 4 * 7 + 1 + (preset.llm.tie_embeddings ? 0 : 1));
}

// The 1F1B stage executor on 2 ranks (mpiexec -n 2) against the whole model in one process:
// same loss and the same gradients for every parameter of each stage, with micro-batches of
// different shapes and a stage-boundary activation of >= 8 MiB (ViT tokens of 1,936 tiles);
// an empty micro-batch (every sample skipped) among them changes neither. Then interleaved,
// ZB-H1 and ZB-V (its V: loss on stage 0; a recomputed block's W in its B) the same way.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <thread>

#include "comm/parallel_comms.h"
#include "models/vlm.h"
#include "pipeline/stage_executor.h"
#include "schedule/one_f_one_b.h"
#include "schedule/schedules.h"

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

// One process's step over `packs` with every unit: loss sum, label tokens, and the gradients of
// sum(loss) / labels by "<unit>.<param>".
struct Reference {
  double loss = 0;
  int64_t labels = 0;
  std::map<std::string, torch::Tensor> grads;
};
Reference reference_step(const std::vector<models::UnitPtr>& all,
                         const std::vector<models::PackBatch>& packs) {
  Reference ref;
  std::vector<models::UnitState> outs;
  for (const auto& p : packs) {
    outs.push_back(models::run_units(all, models::UnitState::from_pack(p)));
    ref.labels += outs.back().label_count;
  }
  for (auto& o : outs) {
    ref.loss += o.loss_sum.item<double>();
    (o.loss_sum / static_cast<double>(ref.labels)).backward();
  }
  for (const auto& u : all)
    for (const auto& np : u->named_parameters())
      ref.grads[u->unit_name() + "." + np.key()] = np.value().grad();
  return ref;
}

// Checks every parameter gradient of this stage's `units` against the whole-model reference;
// returns how many were checked.
int check_stage_grads(const std::vector<models::UnitPtr>& units,
                      const std::map<std::string, torch::Tensor>& ref_grads) {
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
  return checked;
}

// A pack whose every sample was skipped (data.on_bad_sample: skip): n = 0, T = 0, no tiles.
models::PackBatch empty_pack() {
  models::PackBatch b;
  b.pixel_values = torch::zeros({0, 3, 56, 56});
  b.image_flags = torch::zeros({0}, torch::kInt64);
  b.input_ids = torch::zeros({0}, torch::kInt64);
  b.labels = torch::zeros({0}, torch::kInt64);
  b.position_ids = torch::zeros({0}, torch::kInt64);
  b.cu_seqlens = torch::zeros({1}, torch::kInt64);
  b.skipped = {"a.jsonl:3: bad sample (corrupt_image): test"};
  return b;
}

}  // namespace

TEST_CASE("an empty micro-batch runs through 2 stages: same messages, no loss, no gradient",
          "[pipeline][mpi]") {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE(world == 2);
  const ModelPreset preset = small_wide_vit();
  const auto names = omnibal::unit_names(preset);
  // Cut after the ViT (a [tiles, 1 + P, d] boundary) or after the LLM embedding ([T, d]).
  const int cut = GENERATE(2, 4);
  INFO("cut " << cut);
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> full = {make_pack(3, 2, 1), make_pack(2, 1, 3)};
  const std::vector<models::PackBatch> packs = {full[0], empty_pack(), full[1]};
  // Reference: the two non-empty packs in one process.
  auto all = models::make_units(preset, opt, 0, static_cast<int64_t>(names.size()));
  const Reference ref = reference_step(all, full);
  const int64_t labels = ref.labels;
  const double ref_loss = ref.loss;
  const auto& ref_grads = ref.grads;
  // The empty pack alone through the whole model: the head's empty output.
  const models::UnitState alone = models::run_units(all, models::UnitState::from_pack(packs[1]));
  CHECK(alone.phase == models::Phase::kLoss);
  CHECK(alone.label_count == 0);
  CHECK(alone.loss_sum.item<double>() == 0.0);
  CHECK_FALSE(alone.loss_sum.requires_grad());

  comm::ParallelComms comms(comm::ProcessGrid({1, 2, 1}, 2), comm::WaitPolicy{120, nullptr});
  const int s = comms.coord().pp;
  comm::TensorMessenger pipe(comms.pipeline());
  auto units = models::make_units(preset, opt, s == 0 ? 0 : cut,
                                  s == 0 ? cut : static_cast<int64_t>(names.size()));
  pipeline::StageExecutor stage(units, s, 2, &pipe);
  const auto program = schedule::build_1f1b_schedule(2, 3)[s];
  // The last stage holds the packs too (for the loss normaliser); its empty pack must match.
  const auto r = stage.run_step(program, packs, 1.0 / static_cast<double>(labels));
  if (s == 1) {
    CHECK(r.label_count == labels);
    CHECK(r.loss_sum == Approx(ref_loss).epsilon(1e-5));
    REQUIRE(r.micro_batches.size() == 3);
    CHECK(r.micro_batches[1].first == 0.0);
    CHECK(r.micro_batches[1].second == 0);
  }
  CHECK(check_stage_grads(units, ref_grads) > 0);
  // Evaluation's forward-only path takes the empty micro-batch as well.
  const auto out = stage.forward_only(0, &packs[1]);
  if (s == 1) {
    REQUIRE(out.has_value());
    CHECK(out->label_count == 0);
  }
}

TEST_CASE("1F1B executor on 2 stages equals the whole model (>= 8 MiB activations)",
          "[pipeline][mpi]") {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE(world == 2);
  const ModelPreset preset = small_wide_vit();
  const auto names = omnibal::unit_names(preset);
  const int cut = 2;  // vit_embed, vit_block_0 | projector, llm_embed, llm_block_0, llm_head
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> packs = {make_pack(242, 8, 1), make_pack(30, 3, 2),
                                                make_pack(61, 5, 3)};
  // Reference: every unit in one process, loss normalised by all label tokens.
  auto all = models::make_units(preset, opt, 0, static_cast<int64_t>(names.size()));
  const Reference ref = reference_step(all, packs);
  const int64_t labels = ref.labels;
  const double ref_loss = ref.loss;
  const auto& ref_grads = ref.grads;

  comm::ParallelComms comms(comm::ProcessGrid({1, 2, 1}, 2), comm::WaitPolicy{120, nullptr});
  const int s = comms.coord().pp;
  comm::TensorMessenger pipe(comms.pipeline());
  auto units = models::make_units(preset, opt, s == 0 ? 0 : cut,
                                  s == 0 ? cut : static_cast<int64_t>(names.size()));
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
  CHECK(check_stage_grads(units, ref_grads) > 0);
}

namespace {

/// Units of `ranges` (this stage's chunks), recomputing the blocks when asked.
std::vector<std::vector<models::UnitPtr>> chunk_units(const ModelPreset& preset,
                                                      const models::VlmOptions& opt,
                                                      const std::vector<models::UnitRange>& ranges,
                                                      bool recompute) {
  auto chunks = models::make_chunk_units(preset, opt, ranges);
  for (auto& c : chunks)
    for (auto& u : c)
      if (omnibal::is_recomputable(u->kind())) u->set_recompute(recompute);
  return chunks;
}

std::vector<models::UnitPtr> flatten(const std::vector<std::vector<models::UnitPtr>>& chunks) {
  std::vector<models::UnitPtr> all;
  for (const auto& c : chunks) all.insert(all.end(), c.begin(), c.end());
  return all;
}

}  // namespace

TEST_CASE("ZB-H1 and interleaved executors on 2 stages equal the whole model", "[pipeline][mpi]") {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE(world == 2);
  const ModelPreset preset = small_wide_vit();
  const auto names = omnibal::unit_names(preset);
  const int64_t n = static_cast<int64_t>(names.size());  // 6 units
  const bool recompute = GENERATE(false, true);
  const bool interleaved = GENERATE(false, true);
  INFO((interleaved ? "interleaved v 2" : "zb-h1") << (recompute ? ", blocks recomputed" : ""));
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> packs = {make_pack(3, 2, 1), make_pack(2, 1, 3),
                                                make_pack(4, 1, 4), make_pack(1, 3, 5)};
  auto all = models::make_units(preset, opt, 0, n);
  const Reference ref = reference_step(all, packs);

  comm::ParallelComms comms(comm::ProcessGrid({1, 2, 1}, 2), comm::WaitPolicy{120, nullptr});
  const int s = comms.coord().pp;
  comm::TensorMessenger pipe(comms.pipeline());
  // Interleaved: chunks [0,1) [1,2) [2,3) [3,6) on ranks 0 1 0 1 (the ViT boundary, the
  // projector's, and a hop from the last rank back to the first); ZB-H1: a cut after the ViT.
  const std::vector<models::UnitRange> ranges =
      interleaved ? (s == 0 ? std::vector<models::UnitRange>{{0, 1}, {2, 3}}
                            : std::vector<models::UnitRange>{{1, 2}, {3, n}})
                  : std::vector<models::UnitRange>{s == 0 ? models::UnitRange{0, 2}
                                                          : models::UnitRange{2, n}};
  const auto chunks = chunk_units(preset, opt, ranges, recompute);
  pipeline::StageExecutor stage(chunks, s, 2, &pipe);
  const auto program = interleaved
                           ? schedule::build_schedule(PipelineSchedule::kInterleaved, 2, 4, 2)[s]
                           : schedule::build_schedule(PipelineSchedule::kZbH1, 2, 4)[s];
  int after_backward = 0;
  pipeline::StepHooks hooks;
  hooks.after_backward = [&](int) { ++after_backward; };
  const auto r = stage.run_step(program, packs, 1.0 / static_cast<double>(ref.labels), hooks);
  if (s == 1) {
    CHECK(r.label_count == ref.labels);
    CHECK(r.loss_sum == Approx(ref.loss).epsilon(1e-5));
    REQUIRE(r.micro_batches.size() == 4);
  }
  // ZB-H1: 4 BackwardInput + 4 BackwardWeight; interleaved: 4 backwards per chunk.
  CHECK(after_backward == 8);
  if (!interleaved) CHECK(r.times.weight_s > 0);
  CHECK(check_stage_grads(flatten(chunks), ref.grads) > 0);
  // Evaluation's forward-only path walks the chunks in turn.
  const auto out = stage.forward_only(0, &packs[0]);
  CHECK(out.has_value() == (s == 1));
}

TEST_CASE("interleaved on one rank hands activations and gradients between its chunks",
          "[pipeline]") {
  const ModelPreset preset = small_wide_vit();
  const int64_t n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> packs = {make_pack(3, 2, 1), make_pack(2, 1, 3)};
  auto all = models::make_units(preset, opt, 0, n);
  const Reference ref = reference_step(all, packs);
  const auto chunks = chunk_units(preset, opt, {{0, 2}, {2, 4}, {4, n}}, false);
  pipeline::StageExecutor stage(chunks, 0, 1, nullptr);
  const auto r =
      stage.run_step(schedule::build_schedule(PipelineSchedule::kInterleaved, 1, 2, 3)[0], packs,
                     1.0 / static_cast<double>(ref.labels));
  CHECK(r.loss_sum == Approx(ref.loss).epsilon(1e-6));
  CHECK(check_stage_grads(flatten(chunks), ref.grads) > 0);
  // A program naming a chunk the stage does not hold is refused.
  std::vector<schedule::Instruction> bad = {{schedule::Op::Forward, 0, 3}};
  CHECK_THROWS_WITH(stage.run_step(bad, packs, 1.0), Catch::Contains("outside its 3 chunks"));
}

TEST_CASE("ZB-V executor on 2 stages equals the whole model (a V: loss on stage 0)",
          "[pipeline][mpi]") {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE(world == 2);
  const ModelPreset preset = small_wide_vit();
  const int64_t n = static_cast<int64_t>(omnibal::unit_names(preset).size());  // 6 units
  const bool recompute = GENERATE(false, true);
  const int m = GENERATE(2, 4);
  INFO("zb-v, m " << m << (recompute ? ", blocks recomputed" : ""));
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> all_packs = {make_pack(3, 2, 1), make_pack(2, 1, 3),
                                                    make_pack(4, 1, 4), make_pack(1, 3, 5)};
  const std::vector<models::PackBatch> packs(all_packs.begin(), all_packs.begin() + m);
  auto all = models::make_units(preset, opt, 0, n);
  const Reference ref = reference_step(all, packs);

  comm::ParallelComms comms(comm::ProcessGrid({1, 2, 1}, 2), comm::WaitPolicy{120, nullptr});
  const int s = comms.coord().pp;
  comm::TensorMessenger pipe(comms.pipeline());
  // Virtual stages [0,1) [1,2) [2,3) [3,6) on ranks 0 1 1 0: the ViT boundary crosses to rank
  // 1, the projector's hand-over 1 -> 2 stays on rank 1, the LLM comes back to rank 0.
  const std::vector<models::UnitRange> ranges =
      s == 0 ? std::vector<models::UnitRange>{{0, 1}, {3, n}}
             : std::vector<models::UnitRange>{{1, 2}, {2, 3}};
  const auto chunks = chunk_units(preset, opt, ranges, recompute);
  pipeline::StageExecutor stage(chunks, s, 2, &pipe, torch::kCPU, schedule::ChunkLayout::kV);
  CHECK(stage.is_last() == (s == 0));
  CHECK(stage.is_first() == (s == 0));
  const auto program = schedule::build_schedule(PipelineSchedule::kZbV, 2, m)[s];
  int after_backward = 0;
  pipeline::StepHooks hooks;
  hooks.after_backward = [&](int) { ++after_backward; };
  const auto r = stage.run_step(program, packs, 1.0 / static_cast<double>(ref.labels), hooks);
  if (s == 0) {
    CHECK(r.label_count == ref.labels);
    CHECK(r.loss_sum == Approx(ref.loss).epsilon(1e-5));
    REQUIRE(r.micro_batches.size() == static_cast<size_t>(m));
  } else {
    CHECK(r.micro_batches.empty());
  }
  CHECK(after_backward == 2 * 2 * m);  // per chunk and micro-batch a B and a W
  CHECK(r.times.weight_s > 0);
  CHECK(check_stage_grads(flatten(chunks), ref.grads) > 0);
  const auto out = stage.forward_only(0, &packs[0]);
  CHECK(out.has_value() == (s == 0));
}

TEST_CASE("ZB-V on one rank: both chunks local; a recomputed block's dW comes in its B",
          "[pipeline]") {
  const ModelPreset preset = small_wide_vit();
  const int64_t n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> packs = {make_pack(3, 2, 1), make_pack(2, 1, 3)};
  auto all = models::make_units(preset, opt, 0, n);
  const Reference ref = reference_step(all, packs);
  // Chunk 1 = llm_block_0 (recomputed) and llm_head. ZB-V runs the recomputed block's W inside
  // its B (lib/schedule/README.md); ZB-H1 defers every linear, recomputed ones too.
  const bool zb_v = GENERATE(true, false);
  INFO((zb_v ? "zb-v" : "zb-h1"));
  const auto chunks = chunk_units(preset, opt, {{0, 4}, {4, n}}, true);
  const auto layout = zb_v ? schedule::ChunkLayout::kV : schedule::ChunkLayout::kLoop;
  std::vector<std::vector<models::UnitPtr>> used = chunks;
  if (!zb_v) used = {flatten(chunks)};
  pipeline::StageExecutor stage(used, 0, 1, nullptr, torch::kCPU, layout);
  CHECK(stage.is_last());
  const torch::Tensor block_w = chunks[1][0]->named_parameters()["attention.wq.weight"];
  const torch::Tensor head_w = chunks[1][1]->named_parameters()["output.weight"];
  bool first = true, block_in_b = false, head_in_b = true;
  pipeline::StepHooks hooks;
  hooks.after_backward = [&](int) {
    if (!first) return;  // the first B: the last chunk's, micro-batch 0
    first = false;
    block_in_b = block_w.grad().defined();
    head_in_b = head_w.grad().defined();
  };
  const auto program = zb_v ? schedule::build_schedule(PipelineSchedule::kZbV, 1, 2)[0]
                            : schedule::build_schedule(PipelineSchedule::kZbH1, 1, 2)[0];
  const auto r = stage.run_step(program, packs, 1.0 / static_cast<double>(ref.labels), hooks);
  CHECK(r.loss_sum == Approx(ref.loss).epsilon(1e-6));
  CHECK(block_in_b == zb_v);
  CHECK_FALSE(head_in_b);  // the head is never recomputed: its dW waits for W
  CHECK(check_stage_grads(flatten(chunks), ref.grads) > 0);
}

TEST_CASE("StepHooks::settle runs at the end of every compute instruction, inside its time",
          "[pipeline]") {
  // runtime.sync_timers on CUDA: the device wait must fall inside the instruction's timer, or
  // forward_s / backward_s / weight_s would measure kernel launches. A 25 ms settle stands in.
  const ModelPreset preset = small_wide_vit();
  const int64_t n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  models::VlmOptions opt;
  opt.with_img_context_id(kImgContext).with_seed(5);
  const std::vector<models::PackBatch> packs = {make_pack(2, 1, 1), make_pack(1, 1, 2)};
  pipeline::StageExecutor stage(models::make_units(preset, opt, 0, n), 0, 1, nullptr);
  const auto program = schedule::build_schedule(PipelineSchedule::kZbH1, 1, 2)[0];
  std::map<schedule::Op, int> computes;
  for (const auto& ins : program) ++computes[ins.op];
  REQUIRE(computes[schedule::Op::Forward] == 2);
  REQUIRE(computes[schedule::Op::BackwardInput] == 2);
  REQUIRE(computes[schedule::Op::BackwardWeight] == 2);
  int settles = 0;
  constexpr double kSettle = 0.025;
  pipeline::StepHooks hooks;
  hooks.settle = [&] {
    ++settles;
    std::this_thread::sleep_for(std::chrono::duration<double>(kSettle));
  };
  const auto r = stage.run_step(program, packs, 1.0, hooks);
  CHECK(settles == 6);
  CHECK(r.times.forward_s >= 2 * kSettle);
  CHECK(r.times.weight_s >= 2 * kSettle);
  CHECK(r.times.backward_s >= 4 * kSettle);  // B and W
  CHECK(r.times.idle_s < kSettle);           // one rank: nothing to wait for
}

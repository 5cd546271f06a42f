// comm.overlap at DP 2 (mpiexec -n 2), below the trainer: the tiny VLM as one pipeline stage
// per rank, 2 micro-batches of rank-specific packs through the stage executor, its gradients
// reduced by the optimizer blocking at ReduceGrads (comm.overlap false) and overlapped (each
// bucket launched in the backward from the chunks' final-gradient windows,
// train/distributed_optimizer.h). Under 1F1B, ZB-H1 (linear weights final in W), interleaved
// (2 chunks on one rank) and the tied head with every unit recomputed (a parameter one backward
// reaches twice: OptimizerOptions::late), in fp32 and bf16, without and with ZeRO-1: the
// reduced gradients are equal (fp32 within 1e-6; at DP 2 the sums are the same additions) and
// some buckets were launched inside a backward. Two steps on: the parameters (ZeRO-1: gathered
// by the overlapped all-gather, waited for before each chunk's first forward) are equal too.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "../comm/mpi_test_support.h"
#include "../models/model_test_util.h"
#include "core/paths.h"
#include "models/accumulate_grad_hook.h"
#include "pipeline/stage_executor.h"
#include "schedule/schedules.h"
#include "train/distributed_optimizer.h"

using namespace omnibal;
using train::DistributedOptimizer;
using train::OptimizerOptions;

namespace {

/// One model and schedule on which overlap must equal the blocking reduction.
struct Variant {
  std::string name;
  std::string preset = "tiny";  ///< name or path (load_model_preset)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int chunks = 1;          ///< interleaved: model chunks on the one rank
  bool recompute = false;  ///< every unit but the loss head
  std::string late;        ///< OptimizerOptions::late (the tied embedding)
};

/// What two steps left on this rank.
struct Run {
  std::map<std::string, torch::Tensor> reduced;  ///< step 0's reduced gradient by name
  std::map<std::string, torch::Tensor> params;   ///< fp32 parameters after both steps
  int launched_inside = 0;  ///< buckets launched inside a backward (before the window closed)
};

/// The tiny VLM of `v` as `v.chunks` chunks of one stage in `dtype`, parameters named as the
/// trainer names them; `chunk_of` gets each parameter's chunk.
std::vector<std::vector<models::UnitPtr>> make_chunks(const Variant& v, torch::Dtype dtype,
                                                      DistributedOptimizer::NamedParams& out,
                                                      std::map<std::string, int>& chunk_of) {
  const ModelPreset preset = load_model_preset(v.preset);
  const auto n = static_cast<int64_t>(omnibal::unit_names(preset).size());
  std::vector<models::UnitRange> ranges;
  for (int c = 0; c < v.chunks; ++c) ranges.emplace_back(n * c / v.chunks, n * (c + 1) / v.chunks);
  const auto options = models::VlmOptions{}
                           .with_img_context_id(models::testing::kImgContextId)
                           .with_seed(7)
                           .with_dtype(dtype);
  auto chunks = models::make_chunk_units(preset, options, ranges);
  for (size_t c = 0; c < chunks.size(); ++c)
    for (const auto& u : chunks[c]) {
      u->set_recompute(v.recompute);
      for (const auto& np : u->named_parameters()) {
        const std::string name = u->unit_name() + "." + np.key();
        out.emplace_back(name, np.value());
        chunk_of[name] = static_cast<int>(c);
      }
    }
  return chunks;
}

/// Two steps of `v` at DP 2 with the reduction blocking or overlapped.
Run run(const Variant& v, Precision precision, bool zero1, bool overlap, comm::Communicator& dp) {
  DistributedOptimizer::NamedParams params;
  OptimizerOptions o;
  const auto chunks = make_chunks(v, train::precision_dtype(precision), params, o.chunk_of);
  o.precision = precision;
  o.zero1 = zero1;
  o.overlap = overlap;
  o.chunks = v.chunks;
  o.bucket_bytes = 64 << 10;  // ~20 buckets of the tiny VLM: some launch early, some late
  if (!v.late.empty()) o.late = {v.late};
  DistributedOptimizer opt(params, o, &dp, train::DpShard{dp.rank(), 2});
  REQUIRE(opt.overlaps() == overlap);
  const ModelPreset preset = load_model_preset(v.preset);
  using models::testing::SampleSpec;
  const int r = dp.rank();
  const std::vector<models::PackBatch> packs = {
      models::testing::make_pack(preset, {SampleSpec{2, 20, 6}, SampleSpec{0, 12, 4}}, 11 + r),
      models::testing::make_pack(preset, {SampleSpec{1 - r, 16, 5}}, 21 + r)};
  pipeline::StageExecutor stage(chunks, 0, 1, nullptr);
  Run out;
  pipeline::StepHooks hooks;  // as StageRuntime::add_gradient_hooks
  if (precision == Precision::kBf16) hooks.after_backward = [&](int) { opt.accumulate_grads(); };
  hooks.reduce_grads = [&] { opt.reduce_grads(); };
  if (overlap) {
    hooks.final_grads = [&](const pipeline::FinalGrads& at) {
      const double closing_us = pipeline::trace_clock_us();
      if (at.begin) opt.begin_final_grads(at.chunk);
      else opt.end_final_grads(at.chunk, at.chunk_done);
      std::vector<pipeline::CommInterval> work;
      for (const auto& l : opt.take_launches()) {
        if (!at.begin && l.start_us < closing_us) ++out.launched_inside;
        work.push_back({l.start_us, l.end_us});
      }
      return work;
    };
    if (zero1) hooks.before_chunk_forward = [&](int c) { opt.wait_params(c); };
  }
  const auto program = schedule::build_schedule(v.schedule, 1, 2, v.chunks)[0];
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    stage.run_step(program, packs, 1e-2, hooks);
    if (step == 0)
      for (const auto& name : opt.names()) {
        const torch::Tensor g = opt.reduced_grad(name);
        if (g.defined()) out.reduced[name] = g.clone();
      }
    opt.clip(opt.grad_norm(), 1.0);
    opt.step(1e-3);
  }
  opt.wait_params();
  for (const auto& [name, p] : params) out.params[name] = p.detach().to(torch::kFloat).clone();
  return out;
}

}  // namespace

TEST_CASE("comm.overlap at DP 2: overlapped gradient reduction equals the blocking one",
          "[train][mpi]") {
  if (!models::compat::has_post_accumulate_grad_hook()) {
    WARN("LibTorch < 2.1: no post-accumulate-grad hooks; buckets launch after each chunk only");
    return;
  }
  auto dp = comm::testing::world_comm();
  REQUIRE(dp->size() == 2);
  const std::string tied = source_dir() + "/tests/integration/tiny-tied.yaml";
  const std::vector<Variant> variants = {{"1F1B"},
                                         {"ZB-H1", "tiny", PipelineSchedule::kZbH1},
                                         {"interleaved, 2 chunks", "tiny",
                                          PipelineSchedule::kInterleaved, 2},
                                         {"tied head, recompute", tied, PipelineSchedule::k1F1B, 1,
                                          true, "llm_embed.tok_embeddings.weight"}};
  for (const Variant& v : variants)
    for (const Precision precision : {Precision::kFp32, Precision::kBf16})
      for (const bool zero1 : {false, true}) {
        INFO(v.name << ", " << choice_name(precision) << (zero1 ? ", ZeRO-1" : ""));
        const Run blocking = run(v, precision, zero1, false, *dp);
        const Run overlapped = run(v, precision, zero1, true, *dp);
        CHECK(overlapped.launched_inside > 0);
        REQUIRE(overlapped.reduced.size() == blocking.reduced.size());
        int nonzero = 0;
        for (const auto& [name, g] : blocking.reduced) {
          INFO(name);
          CHECK(torch::allclose(overlapped.reduced.at(name), g, 1e-6, 1e-9));
          nonzero += g.abs().max().item<float>() > 0 ? 1 : 0;
        }
        CHECK(nonzero > 0);
        for (const auto& [name, p] : blocking.params) {
          INFO(name);
          CHECK(torch::allclose(overlapped.params.at(name), p, 1e-6, 1e-9));
        }
      }
}

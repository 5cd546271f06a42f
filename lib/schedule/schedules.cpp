#include "schedule/schedules.h"

#include <algorithm>

#include "core/error.h"
#include "schedule/pipeline_timeline.h"
#include "schedule/zb_v_schedule.h"

namespace omnibal::schedule {
namespace {

/// Appends the receive, compute and send of one forward of virtual stage (chunk, stage).
void add_forward(std::vector<Instruction>& list, int stage, int stages, int chunks, int chunk,
                 int mb) {
  const int k = virtual_stage(chunk, stage, stages);
  if (k > 0) list.push_back({Op::RecvActivation, mb, chunk});
  list.push_back({Op::Forward, mb, chunk});
  if (k < stages * chunks - 1) list.push_back({Op::SendActivation, mb, chunk});
}

/// Appends the receive, compute (`op`: Backward or BackwardInput) and send of one backward.
void add_backward(std::vector<Instruction>& list, Op op, int stage, int stages, int chunks,
                  int chunk, int mb) {
  const int k = virtual_stage(chunk, stage, stages);
  if (k < stages * chunks - 1) list.push_back({Op::RecvGrad, mb, chunk});
  list.push_back({op, mb, chunk});
  if (k > 0) list.push_back({Op::SendGrad, mb, chunk});
}

/// ZB-V's bubble on equal costs (chunk-times, 6m of work per rank): (P-1)/(6m+P-1) for
/// m >= 2P - 1; below, that of the built lists (zb_v_schedule.h).
double zb_v_bubble(int stages, int micro_batches) {
  const double compute = 6.0 * micro_batches;
  if (micro_batches >= 2 * stages - 1) return (stages - 1) / (compute + stages - 1);
  auto costs = PipelineStepCosts::zeros(2 * stages, micro_batches);
  costs.layout = ChunkLayout::kV;
  for (auto* mat : {&costs.forward_s, &costs.backward_input_s, &costs.backward_weight_s})
    for (auto& row : *mat) std::fill(row.begin(), row.end(), 1.0);
  double step = 0;
  for (const auto& t : run_pipeline_timeline(build_zb_v_schedule(stages, micro_batches), costs))
    step = std::max(step, t.ready_for_reduce_s);
  return (step - compute) / step;
}

void check_sizes(const char* what, int stages, int micro_batches) {
  OMNIBAL_CHECK(stages >= 1, what, ": expected at least one pipeline stage, got ", stages);
  OMNIBAL_CHECK(micro_batches >= 1, what, ": expected at least one micro-batch, got ",
                micro_batches);
}

}  // namespace

StageSchedules build_interleaved_schedule(int stages, int micro_batches, int virtual_stages) {
  check_sizes("interleaved 1F1B", stages, micro_batches);
  OMNIBAL_CHECK(virtual_stages >= 1, "interleaved 1F1B: expected at least one model chunk per ",
                "rank, got ", virtual_stages);
  if (virtual_stages == 1) return build_1f1b_schedule(stages, micro_batches);
  OMNIBAL_CHECK(micro_batches % stages == 0, "interleaved 1F1B: the number of micro-batches (",
                micro_batches, ") must be a multiple of the pipeline stages (", stages, ")");
  const int P = stages, v = virtual_stages, total = micro_batches * v;
  // The k-th forward of a rank: chunk (k / P) % v of micro-batch (k / (P v)) P + k % P; the k-th
  // backward walks the chunks in reverse.
  auto forward_chunk = [&](int k) { return (k / P) % v; };
  auto backward_chunk = [&](int k) { return v - 1 - (k / P) % v; };
  auto micro_batch = [&](int k) { return (k / (P * v)) * P + k % P; };
  StageSchedules lists(P);
  for (int s = 0; s < P; ++s) {
    auto& list = lists[s];
    const int warmup = std::min((P - s - 1) * 2 + (v - 1) * P, total);
    int f = 0, b = 0;
    for (; f < warmup; ++f) add_forward(list, s, P, v, forward_chunk(f), micro_batch(f));
    for (; f < total; ++f, ++b) {
      add_forward(list, s, P, v, forward_chunk(f), micro_batch(f));
      add_backward(list, Op::Backward, s, P, v, backward_chunk(b), micro_batch(b));
    }
    for (; b < total; ++b)
      add_backward(list, Op::Backward, s, P, v, backward_chunk(b), micro_batch(b));
    list.push_back({Op::ReduceGrads, -1});
    list.push_back({Op::OptimizerStep, -1});
  }
  return lists;
}

StageSchedules build_zb_h1_schedule(int stages, int micro_batches) {
  check_sizes("ZB-H1", stages, micro_batches);
  const int P = stages, m = micro_batches;
  StageSchedules lists(P);
  for (int s = 0; s < P; ++s) {
    auto& list = lists[s];
    int f = 0, b = 0, w = 0;
    // W of stage s lags its B by s micro-batches: the deferred W's run once the forwards are
    // done, in the cool-down where 1F1B idles waiting for gradients.
    auto backward = [&] {
      add_backward(list, Op::BackwardInput, s, P, 1, 0, b++);
      if (b - w > s) list.push_back({Op::BackwardWeight, w++});
    };
    for (const int warmup = std::min(P - s - 1, m); f < warmup;) add_forward(list, s, P, 1, 0, f++);
    while (f < m) {
      add_forward(list, s, P, 1, 0, f++);
      backward();
    }
    while (b < m) backward();
    while (w < m) list.push_back({Op::BackwardWeight, w++});
    list.push_back({Op::ReduceGrads, -1});
    list.push_back({Op::OptimizerStep, -1});
  }
  return lists;
}

StageSchedules build_schedule(PipelineSchedule kind, int stages, int micro_batches,
                              int virtual_stages) {
  OMNIBAL_CHECK(kind == PipelineSchedule::kInterleaved || virtual_stages == 1 ||
                    (kind == PipelineSchedule::kZbV && virtual_stages == 2),
                "schedule ", choice_name(kind), ": expected ",
                kind == PipelineSchedule::kZbV ? "2 model chunks (or 1 for the default)"
                                               : "1 model chunk",
                " per rank, got ", virtual_stages,
                " (more virtual stages need the interleaved schedule)");
  switch (kind) {
    case PipelineSchedule::k1F1B: return build_1f1b_schedule(stages, micro_batches);
    case PipelineSchedule::kInterleaved:
      OMNIBAL_CHECK(virtual_stages >= 2, "interleaved 1F1B: expected at least 2 model chunks per ",
                    "rank, got ", virtual_stages);
      return build_interleaved_schedule(stages, micro_batches, virtual_stages);
    case PipelineSchedule::kZbH1: return build_zb_h1_schedule(stages, micro_batches);
    case PipelineSchedule::kZbV: return build_zb_v_schedule(stages, micro_batches);
    case PipelineSchedule::kAuto: break;
  }
  OMNIBAL_FAIL("build_schedule: 'auto' is resolved by the start-up planner, not built");
}

int chunks_per_rank(PipelineSchedule kind, int virtual_stages) {
  if (kind == PipelineSchedule::kZbV) return 2;
  return kind == PipelineSchedule::kInterleaved ? virtual_stages : 1;
}

bool splits_backward(PipelineSchedule kind) {
  return kind == PipelineSchedule::kZbH1 || kind == PipelineSchedule::kZbV;
}

ChunkLayout chunk_layout(PipelineSchedule kind) {
  return kind == PipelineSchedule::kZbV ? ChunkLayout::kV : ChunkLayout::kLoop;
}

double bubble_fraction(PipelineSchedule kind, int stages, int micro_batches, int virtual_stages) {
  OMNIBAL_CHECK(stages >= 1 && micro_batches >= 1 && virtual_stages >= 1,
                "bubble: expected P, m, v >= 1, got P=", stages, " m=", micro_batches,
                " v=", virtual_stages);
  const double idle = stages - 1;
  switch (kind) {
    case PipelineSchedule::k1F1B: return idle / (micro_batches + idle);
    case PipelineSchedule::kInterleaved: return idle / (virtual_stages * micro_batches + idle);
    case PipelineSchedule::kZbH1: {  // m < P: too few W to fill the bubble (schedules.h)
      const double compute = 3.0 * micro_batches;
      const double step = std::max(compute + idle, 2.0 * micro_batches + 2.0 * idle + 1.0);
      return (step - compute) / step;
    }
    case PipelineSchedule::kZbV: return zb_v_bubble(stages, micro_batches);
    case PipelineSchedule::kAuto: break;
  }
  OMNIBAL_FAIL("bubble_fraction: 'auto' has no bubble of its own");
}

}  // namespace omnibal::schedule

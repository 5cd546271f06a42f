// Measured pipeline timelines as Chrome trace-event JSON (the format PyTorch's profiler exports
// and Perfetto / chrome://tracing open; one writer, schedule/step_trace.h, also writes
// `omnibal-plan simulate --trace`'s simulated step). For the steps in runtime.trace_steps every rank hands its
// executor spans (pipeline/stage_executor.h: forward, backward, backward_input, backward_weight,
// recv, send, send_wait, dp_reduce) plus the trainer's optimizer span to rank 0, which writes
// <run_dir>/trace/step-N.json:
//   one process per DP rank ("dp r"), one thread per pipeline stage ("stage s"); complete events
//   {"ph": "X", "name", "cat": compute | comm, "pid": dp rank, "tid": stage, "ts", "dur" (us,
//   from the step's first event), "args": {micro_batch, chunk, samples, tiles, tokens}}.
// Clocks: every rank's steady clock is mapped onto rank 0's with an offset measured at start-up
// (ClockSync: the ping-pong of least round trip over 8, as NTP; error about half of it, a few
// microseconds over shared memory). TP ranks > 0 of a stage are left out (they run the same
// program). Pack loads come from the first stage's packs (the only rank that has them all).
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "models/pack_batch.h"
#include "pipeline/stage_executor.h"

namespace omnibal::train {

/// Offsets of every rank's trace clock from rank 0's, microseconds (rank r's clock minus
/// rank 0's). Collective over `world`; every rank gets the vector.
std::vector<double> measure_clock_offsets(comm::Communicator& world);

/// Where a rank sits and what it ran in one step.
struct RankTrace {
  int dp = 0, stage = 0, tp = 0;
  std::vector<pipeline::TraceSpan> spans;  ///< the executor's spans plus "optimizer"
  /// First stage: (samples, tiles, tokens) of each micro-batch (empty elsewhere).
  std::vector<std::array<int64_t, 3>> loads;
};

/// (samples, tiles, tokens) of each pack.
std::vector<std::array<int64_t, 3>> pack_loads(const std::vector<models::PackBatch>& packs);

/// Collective: gathers every rank's `mine` on rank 0, which writes `path` (trace-event JSON;
/// `other` goes to "otherData"). Throws omnibal::Error (rank 0) when the file cannot be written.
void write_step_trace(const std::string& path, int64_t step, const RankTrace& mine,
                      const std::vector<double>& clock_offsets_us, comm::Communicator& world,
                      const nlohmann::json& other);

/// The traced steps of a run (runtime.trace_steps): owns which steps are traced, the clock
/// offsets (measured once, at construction) and writing <run_dir>/trace/step-N.json.
class StepTracer {
 public:
  /// Collective over `world` when `steps` is not empty (measure_clock_offsets).
  StepTracer(std::vector<int> steps, std::string run_dir, comm::Communicator& world);
  /// Whether 0-based global step `step` is traced.
  bool traced(int64_t step) const;
  /// Collective over the world: writes the trace of `step` from every rank's `mine` (rank 0
  /// writes and logs the path; `other`: the run's layout, "otherData"). Throws omnibal::Error
  /// (rank 0) when the file cannot be written.
  void write(int64_t step, const RankTrace& mine, const nlohmann::json& other);

 private:
  std::vector<int> steps_;
  std::string run_dir_;
  comm::Communicator& world_;
  std::vector<double> clock_offsets_us_;
};

}  // namespace omnibal::train

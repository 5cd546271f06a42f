// One pipeline step as Chrome trace-event JSON: the format PyTorch's profiler exports and
// Perfetto / chrome://tracing open. The trainer writes it for measured steps
// (train/step_trace.h, runtime.trace_steps) and `omnibal-plan simulate --trace` /
// `omnibal-plan partition --trace` for simulated ones, through this one writer, so the measured
// and the simulated step open side by side:
//   {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"source": ..., ...}}
//   one process per DP rank (pid = dp rank, named "dp r"), one thread per pipeline stage
//   (tid = stage, named "stage s"); complete events {"ph": "X", "name", "cat": compute | comm,
//   "pid", "tid", "ts", "dur"} in microseconds from the step's earliest span, with "args":
//   {"chunk", and for per-micro-batch spans "micro_batch", "samples", "tiles", "tokens"}.
// Span names: forward, backward, backward_input, backward_weight (compute); recv, send,
// send_wait, dp_reduce (comm); optimizer (compute). A recv spans the wait for its message.
// Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "schedule/pipeline_timeline.h"

namespace omnibal::schedule {

/// One span of one (DP rank, stage) track.
struct TraceSpan {
  int dp = 0, stage = 0;
  std::string name;      ///< one of the span names above
  int micro_batch = -1;  ///< -1: not per micro-batch (send_wait, dp_reduce, optimizer)
  int chunk = 0;
  double start_us = 0, end_us = 0;  ///< any common clock; the writer rebases to the earliest
};

/// (samples, tiles, tokens) of one micro-batch, shown in its spans' args.
struct TraceLoad {
  int64_t samples = 0, tiles = 0, tokens = 0;
};

/// Everything one trace file shows.
struct StepTrace {
  std::vector<TraceSpan> spans;
  std::map<std::pair<int, int>, TraceLoad> loads;  ///< (dp rank, micro-batch) -> load
};

/// "comm" for recv, send, send_wait and dp_reduce; "compute" for the rest.
const char* trace_category(const std::string& name);

/// The span name of a timeline instruction ("forward", "recv", ...); "" for ReduceGrads and
/// OptimizerStep (the simulator adds dp_reduce / optimizer spans itself).
const char* trace_span_name(Op op);

/// Appends the events of one DP rank's walked timeline (run_pipeline_timeline's log, seconds)
/// as spans of process `dp`.
void append_timeline_spans(StepTrace& trace, int dp, const std::vector<TimelineEvent>& events);

/// The trace-event document of `trace`; `other` becomes "otherData" (give "source": "measured"
/// or "simulated", the step, the config). Spans keep their order; metadata events name every
/// track that has a span.
nlohmann::json trace_event_json(const StepTrace& trace, const nlohmann::json& other);

/// Writes `doc` to `path` through a temporary file and a rename (a failed write leaves no
/// partial file), creating the parent directory. Throws omnibal::Error naming the file.
void write_trace_file(const std::string& path, const nlohmann::json& doc);

}  // namespace omnibal::schedule

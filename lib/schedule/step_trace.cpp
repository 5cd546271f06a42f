#include "schedule/step_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/error.h"

namespace omnibal::schedule {

const char* trace_category(const std::string& name) {
  return name == "recv" || name == "send" || name == "send_wait" || name == "dp_reduce" ? "comm"
                                                                                        : "compute";
}

const char* trace_span_name(Op op) {
  switch (op) {
    case Op::Forward: return "forward";
    case Op::Backward: return "backward";
    case Op::BackwardInput: return "backward_input";
    case Op::BackwardWeight: return "backward_weight";
    case Op::RecvActivation:
    case Op::RecvGrad: return "recv";
    case Op::SendActivation:
    case Op::SendGrad: return "send";
    case Op::ReduceGrads:
    case Op::OptimizerStep: return "";
  }
  return "";
}

void append_timeline_spans(StepTrace& trace, int dp, const std::vector<TimelineEvent>& events) {
  for (const auto& e : events) {
    const char* name = trace_span_name(e.instruction.op);
    if (*name == '\0') continue;
    trace.spans.push_back({dp, e.stage, name, e.instruction.micro_batch, e.instruction.chunk,
                           e.start_s * 1e6, e.end_s * 1e6});
  }
}

nlohmann::json trace_event_json(const StepTrace& trace, const nlohmann::json& other) {
  double t0 = std::numeric_limits<double>::infinity();
  for (const auto& s : trace.spans) t0 = std::min(t0, s.start_us);
  nlohmann::json events = nlohmann::json::array();
  std::map<int, std::set<int>> tracks;  // dp -> stages
  for (const auto& s : trace.spans) {
    nlohmann::json args = {{"chunk", s.chunk}};
    if (s.micro_batch >= 0) {
      args["micro_batch"] = s.micro_batch;
      if (const auto it = trace.loads.find({s.dp, s.micro_batch}); it != trace.loads.end()) {
        args["samples"] = it->second.samples;
        args["tiles"] = it->second.tiles;
        args["tokens"] = it->second.tokens;
      }
    }
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"cat", trace_category(s.name)},
                      {"pid", s.dp},
                      {"tid", s.stage},
                      {"ts", s.start_us - t0},
                      {"dur", s.end_us - s.start_us},
                      {"args", args}});
    tracks[s.dp].insert(s.stage);
  }
  for (const auto& [dp, stages] : tracks) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", dp},
                      {"args", {{"name", "dp " + std::to_string(dp)}}}});
    for (const int s : stages)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", dp},
                        {"tid", s},
                        {"args", {{"name", "stage " + std::to_string(s)}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

void write_trace_file(const std::string& path, const nlohmann::json& doc) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  OMNIBAL_CHECK(!ec, "trace: cannot create the directory of '", path, "': ", ec.message());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    OMNIBAL_CHECK(f.good(), "trace: cannot write '", tmp, "'");
    f << doc.dump() << "\n";
    f.flush();  // ofstream buffers: only the flush shows a full disk
    OMNIBAL_CHECK(f.good(), "trace: error while writing '", tmp, "' (", std::strerror(errno),
                  ") - is the disk full?");
  }
  std::filesystem::rename(tmp, path, ec);
  OMNIBAL_CHECK(!ec, "trace: cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

}  // namespace omnibal::schedule

#include "train/step_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "schedule/step_trace.h"

namespace omnibal::train {
namespace {

constexpr int kPingTag = 950, kPongTag = 951;
constexpr int kRounds = 8;
constexpr int kCols = 8;  ///< name id, mb, chunk, start, end, dp, stage, tp
constexpr double kLoadRow = -1, kPadRow = -2;

const std::array<const char*, 9> kNames{"forward",         "backward",  "backward_input",
                                        "backward_weight", "recv",      "send",
                                        "send_wait",       "dp_reduce", "optimizer"};

int name_id(const char* name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (std::strcmp(kNames[i], name) == 0) return static_cast<int>(i);
  OMNIBAL_FAIL("trace: unknown span name '", name, "'");
}

torch::Tensor scalar(double v) { return torch::full({1}, v, torch::kFloat64); }

}  // namespace

std::vector<double> measure_clock_offsets(comm::Communicator& world) {
  const int n = world.size(), me = world.rank();
  torch::Tensor offsets = torch::zeros({n}, torch::kFloat64);
  if (me == 0) {
    for (int r = 1; r < n; ++r) {
      double best_rtt = std::numeric_limits<double>::infinity();
      for (int i = 0; i < kRounds; ++i) {
        torch::Tensor ping = scalar(0), pong = scalar(0);
        const double t0 = pipeline::trace_clock_us();
        world.isend(ping, r, kPingTag, "trace clock ping").wait();
        world.irecv(pong, r, kPongTag, "trace clock pong").wait();
        const double t1 = pipeline::trace_clock_us();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          offsets[r] = pong.item<double>() - 0.5 * (t0 + t1);
        }
      }
    }
  } else {
    for (int i = 0; i < kRounds; ++i) {
      torch::Tensor ping = scalar(0);
      world.irecv(ping, 0, kPingTag, "trace clock ping").wait();
      world.isend(scalar(pipeline::trace_clock_us()), 0, kPongTag, "trace clock pong").wait();
    }
  }
  world.ibroadcast(offsets, 0, "trace clock offsets").wait();
  return std::vector<double>(offsets.data_ptr<double>(), offsets.data_ptr<double>() + n);
}

std::vector<std::array<int64_t, 3>> pack_loads(const std::vector<models::PackBatch>& packs) {
  std::vector<std::array<int64_t, 3>> out;
  for (const auto& p : packs)
    out.push_back(
        {static_cast<int64_t>(p.num_samples()), p.image_flags.numel(), p.position_ids.numel()});
  return out;
}

void write_step_trace(const std::string& path, int64_t step, const RankTrace& mine,
                      const std::vector<double>& clock_offsets_us, comm::Communicator& world,
                      const nlohmann::json& other) {
  // Rows of kCols doubles: spans, then load rows (kLoadRow, mb, samples, tiles, tokens, dp).
  std::vector<double> rows;
  for (const auto& s : mine.spans)
    rows.insert(rows.end(),
                {static_cast<double>(name_id(s.name)), double(s.micro_batch), double(s.chunk),
                 s.start_us, s.end_us, double(mine.dp), double(mine.stage), double(mine.tp)});
  for (size_t k = 0; k < mine.loads.size(); ++k)
    rows.insert(rows.end(),
                {kLoadRow, double(k), double(mine.loads[k][0]), double(mine.loads[k][1]),
                 double(mine.loads[k][2]), double(mine.dp), double(mine.stage), double(mine.tp)});
  const int64_t count = static_cast<int64_t>(rows.size() / kCols);
  const int64_t most = world.all_reduce_int(count, comm::ReduceOp::kMax, "trace rows");
  torch::Tensor local = torch::full({most * kCols}, kPadRow, torch::kFloat64);
  if (count > 0) std::memcpy(local.data_ptr<double>(), rows.data(), rows.size() * sizeof(double));
  torch::Tensor all = torch::empty({world.size() * most * kCols}, torch::kFloat64);
  world.iall_gather(local, all, "trace spans").wait();
  if (world.rank() != 0) return;

  const double* a = all.data_ptr<double>();
  schedule::StepTrace trace;
  for (int r = 0; r < world.size(); ++r)
    for (int64_t i = 0; i < most; ++i) {
      const double* row = a + (r * most + i) * kCols;
      if (row[0] == kLoadRow) {
        trace.loads[{int(row[5]), int(row[1])}] = {int64_t(row[2]), int64_t(row[3]),
                                                   int64_t(row[4])};
      } else if (row[0] >= 0 && row[7] == 0) {  // spans of TP rank 0 (padding rows are < 0)
        trace.spans.push_back({int(row[5]), int(row[6]), kNames[static_cast<size_t>(row[0])],
                               int(row[1]), int(row[2]), row[3] - clock_offsets_us[r],
                               row[4] - clock_offsets_us[r]});
      }
    }
  nlohmann::json info = other;
  info["source"] = "measured";
  info["step"] = step;
  schedule::write_trace_file(path, schedule::trace_event_json(trace, info));
}

StepTracer::StepTracer(std::vector<int> steps, std::string run_dir, comm::Communicator& world)
    : steps_(std::move(steps)), run_dir_(std::move(run_dir)), world_(world) {
  if (!steps_.empty()) clock_offsets_us_ = measure_clock_offsets(world_);
}

bool StepTracer::traced(int64_t step) const {
  return std::find(steps_.begin(), steps_.end(), step) != steps_.end();
}

void StepTracer::write(int64_t step, const RankTrace& mine, const nlohmann::json& other) {
  const std::string path = fmt::format("{}/trace/step-{}.json", run_dir_, step);
  write_step_trace(path, step, mine, clock_offsets_us_, world_, other);
  if (world_.rank() == 0) log_info("trace: step {} in {}", step, path);
}

}  // namespace omnibal::train

// The timeline's event log and the trace-event writer (schedule/step_trace.h): exact event times
// on the textbook 1F1B case, busy and idle time equal to the timeline's figures under every
// schedule, forward before backward on every track, and a document that parses back.
#include "schedule/step_trace.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <tuple>

#include "core/error.h"
#include "schedule/one_f_one_b.h"
#include "schedule/schedules.h"

using namespace omnibal::schedule;
using omnibal::PipelineSchedule;

namespace {

/// (stage, op, micro-batch, chunk) -> (start, end) of a walked log.
using EventMap = std::map<std::tuple<int, Op, int, int>, std::pair<double, double>>;

EventMap by_key(const std::vector<TimelineEvent>& events) {
  EventMap out;
  for (const auto& e : events)
    out[{e.stage, e.instruction.op, e.instruction.micro_batch, e.instruction.chunk}] = {e.start_s,
                                                                                        e.end_s};
  return out;
}

PipelineStepCosts random_costs(int V, int m, uint32_t seed, bool split) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.1, 1.0);
  auto c = PipelineStepCosts::zeros(V, m);
  for (int k = 0; k < V; ++k)
    for (int i = 0; i < m; ++i) {
      c.forward_s[k][i] = u(rng);
      c.backward_s[k][i] = 2 * u(rng);
      c.backward_weight_s[k][i] = split ? 0.4 * c.backward_s[k][i] : 0.0;
      c.backward_input_s[k][i] = c.backward_s[k][i] - c.backward_weight_s[k][i];
      c.send_activation_s[k][i] = 0.05 * u(rng);
      c.send_grad_s[k][i] = 0.05 * u(rng);
    }
  return c;
}

}  // namespace

TEST_CASE("event log: P=2, m=2, f=1, b=2 gives every instruction's textbook times",
          "[schedule][trace]") {
  auto c = PipelineStepCosts::zeros(2, 2);
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 2; ++i) {
      c.forward_s[s][i] = 1;
      c.backward_s[s][i] = 2;
    }
  std::vector<TimelineEvent> events;
  const auto t = run_pipeline_timeline(build_1f1b_schedule(2, 2), c, &events);
  const auto plain = run_pipeline_timeline(build_1f1b_schedule(2, 2), c);
  CHECK(t[0].ready_for_reduce_s == plain[0].ready_for_reduce_s);
  CHECK(t[1].idle_s == plain[1].idle_s);
  const EventMap e = by_key(events);
  using P = std::pair<double, double>;
  // Stage 0: F0 [0,1] F1 [1,2], waits for B0's gradient [2,4], B0 [4,6], waits [6,7], B1 [7,9].
  CHECK(e.at({0, Op::Forward, 0, 0}) == P{0, 1});
  CHECK(e.at({0, Op::SendActivation, 0, 0}) == P{1, 1});
  CHECK(e.at({0, Op::Forward, 1, 0}) == P{1, 2});
  CHECK(e.at({0, Op::RecvGrad, 0, 0}) == P{2, 4});
  CHECK(e.at({0, Op::Backward, 0, 0}) == P{4, 6});
  CHECK(e.at({0, Op::RecvGrad, 1, 0}) == P{6, 7});
  CHECK(e.at({0, Op::Backward, 1, 0}) == P{7, 9});
  // Stage 1: waits [0,1], F0 [1,2] B0 [2,4], micro-batch 1 already there, F1 [4,5] B1 [5,7].
  CHECK(e.at({1, Op::RecvActivation, 0, 0}) == P{0, 1});
  CHECK(e.at({1, Op::Forward, 0, 0}) == P{1, 2});
  CHECK(e.at({1, Op::Backward, 0, 0}) == P{2, 4});
  CHECK(e.at({1, Op::RecvActivation, 1, 0}) == P{4, 4});
  CHECK(e.at({1, Op::Forward, 1, 0}) == P{4, 5});
  CHECK(e.at({1, Op::Backward, 1, 0}) == P{5, 7});
  CHECK(e.at({1, Op::SendGrad, 1, 0}) == P{7, 7});
  CHECK(events.size() == 16);  // 8 instructions per stage before ReduceGrads
}

TEST_CASE("event log: busy and wait time equal the timeline's under every schedule",
          "[schedule][trace]") {
  const auto [kind, v] =
      GENERATE(std::pair{PipelineSchedule::k1F1B, 1}, std::pair{PipelineSchedule::kInterleaved, 2},
               std::pair{PipelineSchedule::kZbH1, 1});
  const int P = GENERATE(2, 3, 4);
  const int m = GENERATE(12, 24);  // multiples of every P (interleaved needs m % P == 0)
  const auto lists = build_schedule(kind, P, m, v);
  const auto costs = random_costs(P * v, m, 17u * P + m, kind == PipelineSchedule::kZbH1);
  std::vector<TimelineEvent> events;
  const auto t = run_pipeline_timeline(lists, costs, &events);
  std::vector<double> busy(P, 0), wait(P, 0), last_end(P, 0);
  std::map<std::tuple<int, int, int>, double> forward_end;  // (stage, mb, chunk)
  for (const auto& e : events) {
    const int s = e.stage;
    const Op op = e.instruction.op;
    CHECK(e.start_s >= last_end[s] - 1e-12);  // one rank runs one instruction at a time
    last_end[s] = e.end_s;
    const auto key = std::tuple{s, e.instruction.micro_batch, e.instruction.chunk};
    if (op == Op::Forward) forward_end[key] = e.end_s;
    if (op == Op::Backward || op == Op::BackwardInput || op == Op::BackwardWeight) {
      REQUIRE(forward_end.count(key) == 1);
      CHECK(forward_end.at(key) <= e.start_s);
    }
    if (is_communication(op) && (op == Op::RecvActivation || op == Op::RecvGrad))
      wait[s] += e.end_s - e.start_s;
    else if (!is_communication(op)) busy[s] += e.end_s - e.start_s;
    else CHECK(e.end_s == e.start_s);  // sends do not block
    if (op == Op::SendActivation || op == Op::SendGrad) CHECK(e.arrival_s >= e.start_s);
  }
  for (int s = 0; s < P; ++s) {
    const double want = t[s].forward_busy_s + t[s].backward_busy_s + t[s].backward_weight_busy_s;
    CHECK(busy[s] == Approx(want).epsilon(1e-12));
    CHECK(wait[s] == Approx(t[s].idle_s).margin(1e-12));
    CHECK(last_end[s] == Approx(t[s].ready_for_reduce_s).epsilon(1e-12));
  }
}

TEST_CASE("trace_event_json: tracks, rebased times, loads in args; parses back",
          "[schedule][trace]") {
  StepTrace trace;
  trace.spans.push_back({0, 1, "forward", 0, 0, 1000.0, 1500.0});
  trace.spans.push_back({1, 0, "recv", 2, 1, 1200.0, 1250.0});
  trace.spans.push_back({0, 1, "dp_reduce", -1, 0, 1600.0, 1700.0});
  trace.loads[{0, 0}] = {3, 12, 900};
  const auto doc =
      nlohmann::json::parse(trace_event_json(trace, {{"source", "simulated"}, {"step", 4}}).dump());
  const auto& ev = doc.at("traceEvents");
  REQUIRE(ev.size() == 3 + 4);  // 3 spans, 2 process names, 2 thread names
  CHECK(ev[0]["ph"] == "X");
  CHECK(ev[0]["name"] == "forward");
  CHECK(ev[0]["cat"] == "compute");
  CHECK(ev[0]["pid"] == 0);
  CHECK(ev[0]["tid"] == 1);
  CHECK(ev[0]["ts"].get<double>() == 0.0);
  CHECK(ev[0]["dur"].get<double>() == 500.0);
  CHECK(ev[0]["args"]["samples"] == 3);
  CHECK(ev[0]["args"]["tiles"] == 12);
  CHECK(ev[0]["args"]["tokens"] == 900);
  CHECK(ev[1]["cat"] == "comm");
  CHECK(ev[1]["ts"].get<double>() == 200.0);
  CHECK(ev[1]["args"]["chunk"] == 1);
  CHECK_FALSE(ev[1]["args"].contains("samples"));  // no load known for (dp 1, mb 2)
  CHECK_FALSE(ev[2]["args"].contains("micro_batch"));
  CHECK(ev[3]["name"] == "process_name");
  CHECK(ev[3]["args"]["name"] == "dp 0");
  CHECK(ev[4]["name"] == "thread_name");
  CHECK(ev[4]["args"]["name"] == "stage 1");
  CHECK(doc.at("otherData").at("source") == "simulated");
  CHECK(doc.at("displayTimeUnit") == "ms");
}

TEST_CASE("write_trace_file writes whole files and names an unwritable path", "[schedule][trace]") {
  const auto dir = std::filesystem::temp_directory_path() / "omnibal-step-trace-test";
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "sub" / "t.json").string();
  write_trace_file(path, {{"traceEvents", nlohmann::json::array()}});
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in).at("traceEvents").empty());
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // A path below a regular file cannot be created.
  CHECK_THROWS_WITH(write_trace_file(path + "/x.json", {}),
                    Catch::Contains("trace: cannot") && Catch::Contains("t.json"));
  std::filesystem::remove_all(dir);
}

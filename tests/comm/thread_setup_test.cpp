// Threads per rank (docs/conventions.md): max(1, cores / ranks on the node) unless runtime.threads
// overrides it; the CPU list formatting used in the start-up log line.
#include "comm/thread_setup.h"

#include <catch2/catch.hpp>

using namespace omnibal::comm;
using Catch::Matchers::Contains;

TEST_CASE("thread plan: cores over local ranks, at least one", "[comm][threads]") {
  CHECK(plan_threads(0, 16, 4).threads == 4);
  CHECK(plan_threads(0, 16, 3).threads == 5);
  CHECK(plan_threads(0, 2, 2).threads == 1);
  CHECK(plan_threads(0, 2, 4).threads == 1);  // oversubscribed: never 0
  CHECK_FALSE(plan_threads(0, 2, 4).from_config);
  const ThreadPlan forced = plan_threads(6, 2, 4);
  CHECK(forced.threads == 6);
  CHECK(forced.from_config);
}

TEST_CASE("thread plan: swept sizes stay within the node", "[comm][threads]") {
  const int cores = GENERATE(1, 2, 7, 64, 128);
  const int ranks = GENERATE(1, 2, 3, 8, 200);
  const ThreadPlan plan = plan_threads(0, cores, ranks);
  CHECK(plan.threads >= 1);
  if (ranks <= cores) CHECK(plan.threads * ranks <= cores);
  else CHECK(plan.threads == 1);
}

TEST_CASE("thread plan: bad inputs", "[comm][threads]") {
  CHECK_THROWS_WITH(plan_threads(-1, 2, 1), Contains("runtime.threads: expected >= 0"));
  CHECK_THROWS_WITH(plan_threads(0, 2, 0), Contains("expected >= 1 rank on the node"));
}

TEST_CASE("thread plan: cpu lists and the log line", "[comm][threads]") {
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({5}) == "5");
  CHECK(format_cpu_list({}) == "");
  ThreadPlan plan = plan_threads(0, 8, 2);
  plan.affinity = {0, 1, 2, 3};
  CHECK(plan.describe() ==
        "threads 4 intra-op / 1 inter-op (8 cores / 2 ranks on node); bound to cpus 0-3");
  CHECK_FALSE(cpu_affinity().empty());  // this process runs on at least one CPU
}

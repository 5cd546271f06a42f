// Collectives and the process-grid communicators at 4 ranks (registered as `mpiexec -n 4`):
// all-reduce (fp32/64, int, bf16), reduce-scatter, all-gather and broadcast values, the hash agreement (same_on_every_rank), DP groups and
// pipelines of a dp 2 x pp 2 grid, the SIGTERM stop agreement (should_stop) when one rank
// has the flag, and rank 0's decision made collective (run_on_root).
#include "comm/parallel_comms.h"
#include "comm/run_on_root.h"
#include "comm/stop_signal.h"
#include "comm/tensor_message.h"
#include "comm/thread_setup.h"
#include "core/error.h"
#include "mpi_test_support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <catch2/catch.hpp>

using namespace omnibal::comm;
using Catch::Matchers::Contains;
using omnibal::comm::testing::pattern;
using omnibal::comm::testing::world_comm;

TEST_CASE("collective: all-reduce sum, max, min", "[collective]") {
  auto comm = world_comm();
  REQUIRE(comm->size() == 4);
  const int r = comm->rank();
  // Rank r holds (r + 1) * [1, 2, ..., 1000]; the sum is 10 * [1, ..., 1000].
  auto base = torch::arange(1, 1001, torch::kDouble);
  auto t = base * (r + 1);
  comm->all_reduce(t);
  CHECK(torch::equal(t, base * 10));
  auto f = pattern({3, 5}, r);  // float32: values exact in float for these magnitudes
  comm->all_reduce(f, ReduceOp::kSum);
  CHECK(torch::equal(f, pattern({3, 5}, 0) * 4 + 1000.0f * (0 + 1 + 2 + 3)));
  CHECK(comm->all_reduce_int(r * 7, ReduceOp::kMax) == 21);
  CHECK(comm->all_reduce_int(r * 7 + 3, ReduceOp::kMin) == 3);
  auto ints = torch::full({4}, r, torch::kInt);
  comm->all_reduce(ints, ReduceOp::kSum);
  CHECK(torch::equal(ints, torch::full({4}, 6, torch::kInt)));
  CHECK_THROWS_WITH(comm->iall_reduce(torch::zeros({2}, torch::kBFloat16), ReduceOp::kMax, "bf16"),
                    Contains("bfloat16 tensors by sum only"));
  CHECK_THROWS_WITH(comm->iall_reduce(torch::zeros({2}, torch::kHalf), ReduceOp::kSum, "fp16"),
                    Contains("cannot reduce float16 tensors"));
}

TEST_CASE("collective: bfloat16 all-reduce sums in fp32 and rounds to bf16", "[collective]") {
  auto comm = world_comm();
  const int r = comm->rank();
  // 1 + (r + 1) / 64 is exact in bf16; the sum 4 + 10/64 = 4.15625 is exact too.
  auto t = torch::full({300}, 1.0 + (r + 1) / 64.0, torch::kBFloat16);
  comm->all_reduce(t, ReduceOp::kSum);
  CHECK(t.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(t.to(torch::kFloat), torch::full({300}, 4.15625f)));
  // 1024 on rank 0 plus 1 from each other rank: bf16's spacing at 1024 is 8, so the exact 1027
  // is not representable and every order of partial sums rounds to 1024 (no overflow, no
  // stray rounding up).
  auto big = torch::full({5}, r == 0 ? 1024.0 : 1.0, torch::kBFloat16);
  comm->all_reduce(big, ReduceOp::kSum);
  CHECK(big[0].item<float>() == 1024.0f);
}

TEST_CASE("collective: reduce-scatter and all-gather blocks", "[collective]") {
  auto comm = world_comm();
  const int r = comm->rank(), n = comm->size();
  // input [n * 6]: rank r holds (r + 1) * [0, 1, ..., n * 6 - 1]; block b of the sum is
  // 10 * [6b, ..., 6b + 5].
  const auto base = torch::arange(n * 6, torch::kFloat);
  torch::Tensor out = torch::empty({6});
  comm->reduce_scatter(base * (r + 1), out);
  CHECK(torch::equal(out, base.slice(0, 6 * r, 6 * r + 6) * 10));
  torch::Tensor gathered = torch::empty({n * 6});
  comm->all_gather(out, gathered);
  CHECK(torch::equal(gathered, base * 10));
  // bf16 reduce-scatter and an int64 all-gather.
  torch::Tensor bout = torch::empty({2}, torch::kBFloat16);
  comm->reduce_scatter(torch::full({n * 2}, 0.5, torch::kBFloat16), bout);
  CHECK(torch::equal(bout.to(torch::kFloat), torch::full({2}, 2.0f)));
  torch::Tensor ids = torch::empty({n * 3}, torch::kLong);
  comm->all_gather(torch::full({3}, r, torch::kLong), ids);
  CHECK(torch::equal(ids, torch::arange(n, torch::kLong).repeat_interleave(3)));
  CHECK_THROWS_WITH(comm->ireduce_scatter(torch::zeros({n * 2 + 1}), torch::empty({2}), "odd"),
                    Contains("tensor and an [n] block"));
}

TEST_CASE("collective: same_on_every_rank tells one differing half of a hash", "[collective]") {
  auto comm = world_comm();
  const int r = comm->rank();
  const uint64_t h = 0xfedcba9876543210ULL;  // both halves have the top bit set
  CHECK(same_on_every_rank(*comm, h));
  CHECK(same_on_every_rank(*comm, 0));
  CHECK_FALSE(same_on_every_rank(*comm, r == 3 ? h ^ (1ULL << 40) : h, "high half"));
  CHECK_FALSE(same_on_every_rank(*comm, r == 1 ? h ^ 1ULL : h, "low half"));
  CHECK_FALSE(same_on_every_rank(*comm, r == 0 ? ~uint64_t{0} : 0));
}

TEST_CASE("collective: broadcast and barrier", "[collective]") {
  auto comm = world_comm();
  const int root = 2;
  auto t = comm->rank() == root ? pattern({64, 3}, 9) : torch::zeros({64, 3});
  comm->broadcast(t, root);
  CHECK(torch::equal(t, pattern({64, 3}, 9)));
  auto ids = comm->rank() == 0 ? torch::arange(10, torch::kLong) : torch::empty({10}, torch::kLong);
  comm->broadcast(ids, 0);
  CHECK(torch::equal(ids, torch::arange(10, torch::kLong)));
  comm->barrier();
  SUCCEED("all ranks passed the barrier");
}

TEST_CASE("collective: dp 2 x pp 2 groups follow the process grid", "[collective]") {
  const ProcessGrid grid(GridShape{2, 2, 1}, 4);
  WaitPolicy policy;
  policy.timeout_s = 20;
  ParallelComms comms(grid, policy);
  const GridCoord c = comms.coord();
  CHECK(comms.world().rank() == comms.rank());
  CHECK(comms.dp_group().rank() == c.dp);
  CHECK(comms.pipeline().rank() == c.pp);
  // DP group all-reduce of world ranks equals the sum of the grid's DP group.
  const auto dp_ranks = grid.dp_group(c.pp);
  CHECK(comms.dp_group().all_reduce_int(comms.rank(), ReduceOp::kSum) == dp_ranks[0] + dp_ranks[1]);
  CHECK(comms.dp_group().world_rank(1 - c.dp) == dp_ranks[1 - c.dp]);
  // An activation travels along each pipeline: stage 0 -> stage 1 of the same replica.
  TensorMessenger messenger(comms.pipeline());
  if (c.pp == 0) {
    CHECK(comms.next_stage() == 1);
    messenger.send({MessageKind::kActivation, 0, {pattern({2, 3}, comms.rank())}}, 1).wait();
  } else {
    CHECK(comms.prev_stage() == 0);
    auto got = messenger.recv({MessageKind::kActivation, 0, {{at::kFloat, {2, 3}}}}, 0).wait();
    CHECK(torch::equal(got[0], pattern({2, 3}, *grid.prev_stage_rank(comms.rank()))));
  }
}

TEST_CASE("collective: threads per rank follow cores / ranks on the node", "[collective]") {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  REQUIRE(local != nullptr);
  REQUIRE(std::atoi(local) == 4);
  const ThreadPlan plan = configure_threads(0, std::atoi(local));
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  CHECK(plan.threads == std::max(1, cores / 4));
  CHECK(torch::get_num_threads() == plan.threads);
  CHECK(at::get_num_interop_threads() == plan.interop);
  CHECK_FALSE(plan.affinity.empty());
  // runtime.threads overrides; the inter-op pool keeps its first setting.
  CHECK(configure_threads(3, 4).threads == 3);
  CHECK(torch::get_num_threads() == 3);
  CHECK(at::get_num_interop_threads() == plan.interop);
}

TEST_CASE("collective: should_stop agrees when one rank has the flag", "[collective]") {
  auto comm = world_comm();
  CHECK_FALSE(should_stop(*comm));
  if (comm->rank() == 3) request_stop();
  CHECK(stop_requested() == (comm->rank() == 3));
  CHECK(should_stop(*comm));  // every rank sees it at the same call
}

TEST_CASE("collective: run_on_root runs on rank 0 only and gives every rank its error",
          "[collective]") {
  auto comm = world_comm();
  const int r = comm->rank();
  int runs = 0;
  const auto count = [&] { ++runs; };
  run_on_root(*comm, count, "counting");
  CHECK(runs == (r == 0 ? 1 : 0));
  const auto refuse = [] { throw omnibal::Error("runtime.run_dir x is in use by pid 7"); };
  if (r == 0) {
    CHECK_THROWS_WITH(run_on_root(*comm, refuse, "locking runtime.run_dir"),
                      "runtime.run_dir x is in use by pid 7");  // rank 0's own exception
  } else {
    CHECK_THROWS_WITH(run_on_root(*comm, refuse, "locking runtime.run_dir"),
                      Contains("locking runtime.run_dir failed on rank 0: runtime.run_dir x is "
                               "in use by pid 7"));
  }
  comm->barrier("after run_on_root");  // the communicator is still in step on every rank
}

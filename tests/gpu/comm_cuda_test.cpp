// Communicators with CUDA tensors, one rank (run under `mpiexec -n 1`): the NCCL backend's
// all-reduce (sum, max; float32 and bfloat16), broadcast, reduce-scatter and all-gather (float32
// and bfloat16, ZeRO-1's pair) of CUDA tensors, grouped calls, its argument errors, and a CPU
// tensor routed to its MPI twin; the MPI backend refusing a CUDA tensor with an error that
// names the device, and the staged path (copy to the host, reduce, copy back). On one rank the
// results equal the inputs; what is checked is that the CUDA/NCCL code runs and completes.
#include <catch2/catch.hpp>
#include <mpi.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "core/error.h"

using namespace omnibal;
using namespace omnibal::comm;

namespace {

std::shared_ptr<const Watchdog> test_watchdog() {
  WaitPolicy policy;
  policy.timeout_s = 60;
  return std::make_shared<Watchdog>(policy);
}

}  // namespace

TEST_CASE("NCCL communicator, one rank: all-reduce and broadcast of CUDA tensors", "[gpu][nccl]") {
  INFO("this build has " << (nccl_available() ? "" : "no ") << "NCCL backend");
  REQUIRE(nccl_available());
  auto comm = make_nccl_communicator(MPI_COMM_WORLD, "gpu test world", test_watchdog(), 0);
  REQUIRE(comm->size() == 1);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << c10::toString(dtype));
    const auto x = torch::arange(1000, cuda.dtype(torch::kFloat32)).to(dtype);
    auto y = x.clone();
    comm->all_reduce(y, ReduceOp::kSum);
    CHECK(torch::equal(y, x));
    comm->all_reduce(y, ReduceOp::kMax);
    CHECK(torch::equal(y, x));
    auto b = x.clone();
    comm->broadcast(b, 0);
    CHECK(torch::equal(b, x));
  }
  auto a = torch::full({4096}, 2.5, cuda), c = torch::full({17}, 7, cuda.dtype(torch::kInt64));
  comm->group_start();
  auto r1 = comm->iall_reduce(a, ReduceOp::kSum, "grouped all-reduce");
  auto r2 = comm->ibroadcast(c, 0, "grouped broadcast");
  comm->group_end();
  r1.wait();
  r2.wait();
  CHECK(a.sum().item<double>() == Approx(2.5 * 4096));
  CHECK(c.sum().item<int64_t>() == 7 * 17);
  CHECK(comm->all_reduce_int(5, ReduceOp::kSum) == 5);  // CPU tensor: the MPI twin
  comm->barrier();
}

TEST_CASE("NCCL communicator, one rank: reduce-scatter and all-gather, bf16 too; bad arguments",
          "[gpu][nccl]") {
  REQUIRE(nccl_available());
  auto comm = make_nccl_communicator(MPI_COMM_WORLD, "gpu test zero1", test_watchdog(), 0);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << c10::toString(dtype));
    // One rank: block 0 of the input is all of it, and the gather is the block itself.
    const auto x = (torch::arange(777, cuda.dtype(torch::kFloat32)) * 0.5 - 3).to(dtype);
    auto block = torch::full({777}, -1, cuda.dtype(dtype));
    comm->reduce_scatter(x, block, "reduce-scatter");
    CHECK(torch::equal(block, x));
    auto gathered = torch::zeros({777}, cuda.dtype(dtype));
    comm->all_gather(block, gathered, "all-gather");
    CHECK(torch::equal(gathered, x));
  }
  auto a = torch::ones({8}, cuda), b = torch::zeros({8}, cuda);
  CHECK_THROWS_WITH(comm->reduce_scatter(a, b.to(torch::kCPU), "mixed"),
                    Catch::Contains("mixed: expected both tensors on the CPU or both on cuda:0"));
  CHECK_THROWS_WITH(comm->all_gather(a, torch::zeros({9}, cuda), "sizes"),
                    Catch::Contains("sizes: expected a [1 x n] tensor and an [n] block"));
  CHECK_THROWS_WITH(comm->isend(a, 0, 0, "to self"),
                    Catch::Contains("to self: peer 0 is not another rank"));
  CHECK_THROWS_WITH(comm->broadcast(a, 1, "root"), Catch::Contains("root: root 1 outside"));
  auto cpu_in = torch::arange(6, torch::kFloat32), cpu_out = torch::zeros({6});
  comm->reduce_scatter(cpu_in, cpu_out, "cpu twin");  // both on the CPU: the MPI twin
  CHECK(torch::equal(cpu_out, cpu_in));
}

TEST_CASE("MPI communicator with CUDA tensors: refused by name, staged through the host",
          "[gpu][mpi]") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD, "gpu test mpi", test_watchdog());
  const auto x =
      torch::arange(256, torch::TensorOptions().device(torch::kCUDA, 0).dtype(torch::kFloat32));
  auto y = x.clone();
  try {
    comm->all_reduce(y, ReduceOp::kSum);
    FAIL("the MPI backend accepted a CUDA tensor");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("CPU tensors") != std::string::npos);
    CHECK(what.find("cuda") != std::string::npos);
  }
  auto host = y.to(torch::kCPU);
  comm->all_reduce(host, ReduceOp::kSum);
  comm->broadcast(host, 0);
  y.copy_(host);
  CHECK(torch::equal(y, x));
}

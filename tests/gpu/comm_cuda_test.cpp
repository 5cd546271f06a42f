// Communicators with CUDA tensors, one rank (run under `mpiexec -n 1`): the NCCL backend's
// all-reduce (sum, max; float32 and bfloat16) and broadcast of CUDA tensors, grouped calls, and
// a CPU tensor routed to its MPI twin; the MPI backend refusing a CUDA tensor with an error that
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

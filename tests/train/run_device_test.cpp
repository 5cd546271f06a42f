// runtime.device without a GPU: the device index of a local rank, the CUDA checks (named key,
// counts in the message), cpu selecting the CPU and MPI, cuda failing on this GPU-less host.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "core/error.h"
#include "train/run_device.h"

using omnibal::RuntimeDevice;
using omnibal::train::check_cuda_devices;
using omnibal::train::comm_backend;
using omnibal::train::local_device_index;
using omnibal::train::run_device;
using omnibal::train::select_device;

TEST_CASE("local_device_index: local rank modulo the device count", "[train][device]") {
  CHECK(local_device_index(0, 8) == 0);
  CHECK(local_device_index(3, 8) == 3);
  CHECK(local_device_index(7, 8) == 7);
  CHECK(local_device_index(9, 8) == 1);
  CHECK(local_device_index(5, 1) == 0);
  CHECK_THROWS_WITH(local_device_index(0, 0), Catch::Contains("at least one CUDA device"));
  CHECK_THROWS_WITH(local_device_index(-1, 4), Catch::Contains("local rank >= 0"));
}

TEST_CASE("check_cuda_devices: CUDA available and a device per local rank", "[train][device]") {
  CHECK_NOTHROW(check_cuda_devices(true, 8, 8));
  CHECK_NOTHROW(check_cuda_devices(true, 8, 2));
  CHECK_THROWS_WITH(check_cuda_devices(false, 0, 1), Catch::Contains("runtime.device is cuda") &&
                                                         Catch::Contains("CUDA is not available") &&
                                                         Catch::Contains("runtime.device=cpu"));
  CHECK_THROWS_WITH(check_cuda_devices(true, 2, 4),
                    Catch::Contains("runtime.device is cuda") &&
                        Catch::Contains("2 CUDA device(s) for 4 ranks"));
}

TEST_CASE("select_device: cpu is the CPU over MPI, cuda without a GPU fails naming the key",
          "[train][device]") {
  const torch::Device cpu = select_device(RuntimeDevice::kCpu, 3, 4);
  CHECK(cpu.is_cpu());
  CHECK(comm_backend(cpu) == omnibal::comm::Backend::kMpi);
  CHECK(run_device(RuntimeDevice::kCpu).is_cpu());
  CHECK(comm_backend(torch::Device(torch::kCUDA, 1)) == omnibal::comm::Backend::kNccl);
  if (!torch::cuda::is_available())  // this test never needs a GPU
    CHECK_THROWS_WITH(run_device(RuntimeDevice::kCuda),
                      Catch::Contains("runtime.device is cuda but CUDA is not available"));
}

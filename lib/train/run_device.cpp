#include "train/run_device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace omnibal::train {
namespace {

/// The integer environment variable `name`, or `fallback` when unset. Throws omnibal::Error
/// naming the variable when it is not a non-negative integer.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  OMNIBAL_CHECK(*end == '\0' && v >= 0, "runtime.device: environment variable ", name, "='", text,
                "' is not a non-negative integer");
  return static_cast<int>(v);
}

}  // namespace

int local_device_index(int local_rank, int device_count) {
  OMNIBAL_CHECK(device_count >= 1, "runtime.device cuda: expected at least one CUDA device, got ",
                device_count);
  OMNIBAL_CHECK(local_rank >= 0, "runtime.device cuda: expected a local rank >= 0, got ",
                local_rank);
  return local_rank % device_count;
}

void check_cuda_devices(bool available, int device_count, int local_size) {
  OMNIBAL_CHECK(
      available,
      "runtime.device is cuda but CUDA is not available here (torch::cuda::is_available() "
      "is false: no GPU, no driver, or a CPU-only LibTorch); set runtime.device=cpu");
  OMNIBAL_CHECK(device_count >= local_size, "runtime.device is cuda but this node has ",
                device_count, " CUDA device(s) for ", local_size,
                " ranks on this node; expected one device per rank: launch at "
                "most ",
                device_count, " ranks per node");
}

torch::Device select_device(RuntimeDevice choice, int local_rank, int local_size) {
  if (choice == RuntimeDevice::kCpu) return torch::kCPU;
  const bool available = torch::cuda::is_available();
  const int count = available ? static_cast<int>(torch::cuda::device_count()) : 0;
  check_cuda_devices(available, count, local_size);
  const torch::Device device(torch::kCUDA,
                             static_cast<c10::DeviceIndex>(local_device_index(local_rank, count)));
  // Kernels and allocations that take the current device (custom kernels' streams) use ours.
  c10::impl::getDeviceGuardImpl(torch::kCUDA)->setDevice(device);
  return device;
}

/// The first of the launchers' variables that is set (Open MPI's mpirun, Slurm's srun, torchrun
/// style), else `fallback`.
static int launcher_env(const char* ompi, const char* slurm, const char* generic, int fallback) {
  for (const char* name : {ompi, slurm, generic})
    if (const char* text = std::getenv(name); text != nullptr && *text != '\0')
      return env_int(name, fallback);
  return fallback;
}

torch::Device run_device(RuntimeDevice choice) {
  if (choice == RuntimeDevice::kCpu) return torch::kCPU;
  return select_device(choice,
                       launcher_env("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK", 0),
                       launcher_env("OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE",
                                    "LOCAL_WORLD_SIZE", 1));
}

std::function<void()> timer_sync(const torch::Device& device) {
  if (!device.is_cuda()) return {};
  const int index = device.index();
  return [index] { torch::cuda::synchronize(index); };
}

comm::Backend comm_backend(const torch::Device& device) {
  return device.is_cuda() ? comm::Backend::kNccl : comm::Backend::kMpi;
}

}  // namespace omnibal::train

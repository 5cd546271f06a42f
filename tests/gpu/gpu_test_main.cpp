// Catch2 main of the GPU checks (tests/gpu): without a CUDA device it prints
// "no CUDA device: GPU tests not run" and exits 77 (kNoCudaExit, ctest's SKIP_RETURN_CODE), so a
// CPU machine can never mistake the binary for a pass. With one it turns TF32 off (the CUDA vs
// CPU comparisons are fp32 against fp32), starts MPI for the communicator tests (run it under
// `mpiexec -n 1`) and runs the Catch2 session. `gpu_test --cuda-probe` only answers 77 or 0
// (tests/gpu/run_gpu_test.sh asks before starting mpiexec, which takes 2 s to pass a failure on).
#define CATCH_CONFIG_RUNNER
#include <ATen/Context.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>

#include "comm/mpi_runtime.h"
#include "models/torch_compat.h"

namespace {
constexpr int kNoCudaExit = 77;
}  // namespace

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::printf(
        "no CUDA device: GPU tests not run (LibTorch %s; torch::cuda::is_available() is "
        "false: a CPU-only LibTorch, no GPU, or no driver); exit code %d\n",
        omnibal::models::compat::torch_version(), kNoCudaExit);
    return kNoCudaExit;
  }
  if (argc == 2 && std::strcmp(argv[1], "--cuda-probe") == 0) return 0;
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  std::printf("LibTorch %s, %d CUDA device(s)\n", omnibal::models::compat::torch_version(),
              static_cast<int>(torch::cuda::device_count()));
  omnibal::comm::MpiRuntime mpi(&argc, &argv);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  return session.run();
}

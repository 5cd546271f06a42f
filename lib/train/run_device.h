// The device a rank trains on (runtime.device, docs/conventions.md) and the communicator
// backend that carries its tensors. cpu: the CPU, MPI. cuda: CUDA device
// (local rank % device count), the local rank and the ranks per node from Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK / _SIZE, else SLURM_LOCALID / SLURM_NTASKS_PER_NODE, else
// LOCAL_RANK / LOCAL_WORLD_SIZE (0 / 1 when unset), NCCL for the
// CUDA tensors (its MPI twin for the CPU ones, comm/communicator.h). Start-up fails naming the
// key when CUDA is unavailable or the node has fewer devices than ranks (two ranks on one GPU
// cannot share an NCCL communicator). Used by apps/omnibal-train (before the communicators are
// made) and the trainer (stage units, optimizer buffers, start-up profile, partition trials).
#pragma once

#include <torch/torch.h>

#include <functional>

#include "comm/parallel_comms.h"
#include "core/choices.h"

namespace omnibal::train {

/// The CUDA device index of local rank `local_rank`: local_rank % device_count. Throws
/// omnibal::Error when device_count < 1 or local_rank < 0.
int local_device_index(int local_rank, int device_count);

/// What runtime.device cuda needs, checked without touching CUDA: CUDA available and at least
/// `local_size` devices. Throws omnibal::Error naming runtime.device and what was found.
void check_cuda_devices(bool available, int device_count, int local_size);

/// This rank's device for `choice` given its node-local rank and the ranks on its node: the CPU,
/// or cuda:local_device_index(local_rank, count) after check_cuda_devices, made the current CUDA
/// device. Throws omnibal::Error as check_cuda_devices.
torch::Device select_device(RuntimeDevice choice, int local_rank, int local_size);

/// select_device with the local rank and size of this process's environment
/// (Open MPI, then Slurm, then torchrun-style variables; 0 / 1 when unset).
torch::Device run_device(RuntimeDevice choice);

/// pipeline::StepHooks::settle under runtime.sync_timers: a synchronise of `device` when it is
/// a CUDA device (the executor's compute times become device time, at the cost of the host no
/// longer queueing the next instruction's kernels ahead); empty on the CPU, whose ops are done
/// when they return.
std::function<void()> timer_sync(const torch::Device& device);

/// The backend for tensors on `device`: NCCL for CUDA, MPI otherwise.
comm::Backend comm_backend(const torch::Device& device);

}  // namespace omnibal::train

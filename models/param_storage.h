// Releasing and restoring a parameter's memory while autograd still refers to it: the building
// block of fully sharded data parallelism (train.shard full, ZeRO-3 / FSDP). A unit's gathered
// parameters are freed after its forward and gathered again, in place, before its backward, so
// the tensors autograd saved in the forward (the parameters themselves, views of one flat
// buffer) see the data again when the backward reads them. As PyTorch FSDP does with its
// storage resize: the storage's bytes are released (its size set to 0) and re-allocated with
// the storage's own allocator; the gathered values are written through an alias with its own
// version counter (Tensor::variable_data), so autograd's check that a saved tensor was not
// modified in place does not fire for what is, by construction, the same data.
// Not here: which unit is gathered when, the collectives (lib/train).
#pragma once

#include <torch/torch.h>

#include <cstddef>

namespace omnibal::models {

/// Releases the memory of `t`'s storage: every tensor viewing it keeps its sizes but has no
/// data until restore_storage. No-op when already released.
void free_storage(const torch::Tensor& t);

/// Re-allocates `t`'s storage to `nbytes` bytes with the allocator it was created with; the
/// contents are undefined (write them through unversioned_alias). No-op when it already holds
/// `nbytes`. Throws omnibal::Error when the storage has no allocator (memory from outside).
void restore_storage(const torch::Tensor& t, size_t nbytes);

/// Whether `t`'s storage is released (0 bytes).
bool storage_freed(const torch::Tensor& t);

/// The same memory as `t` (storage, offset, sizes, strides) as a tensor outside autograd whose
/// in-place writes do not bump `t`'s version counter.
torch::Tensor unversioned_alias(const torch::Tensor& t);

}  // namespace omnibal::models

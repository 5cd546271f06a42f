#include "models/param_storage.h"

#include "core/error.h"

namespace omnibal::models {

void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == 0) return;
  // The old DataPtr's deleter returns the memory to its allocator (the CUDA caching allocator
  // on a GPU) as the new, empty one takes its place.
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void restore_storage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes) return;
  OMNIBAL_CHECK(s->allocator() != nullptr,
                "restore_storage: the storage has no allocator (memory from outside LibTorch)");
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

bool storage_freed(const torch::Tensor& t) { return t.storage().nbytes() == 0; }

torch::Tensor unversioned_alias(const torch::Tensor& t) { return t.variable_data(); }

}  // namespace omnibal::models

// Loading ahead of training: worker threads materialise the packs of a plan, in order, at most
// `prefetch` packs ahead of the consumer. A worker's exception (a bad sample under
// on_bad_sample: error, an I/O error, anything) is stored with its pack and rethrown on the
// consuming thread by next() when that pack is reached: never a crash, never a hang. Destroying
// the loader stops and joins the workers (a worker finishes the pack it is building first).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/pack_builder.h"

namespace omnibal::data {

/// Loader settings.
struct LoaderOptions {
  int workers = 2;   ///< threads building packs (data.workers)
  int prefetch = 4;  ///< packs built ahead of the consumer, >= 1
  PackParts parts;   ///< what each pack holds (PackParts::for_stage for pipeline stages)
  /// Pin each pack's tensors on the worker thread (models::PackBatch::pin_memory): CUDA runs,
  /// where the copy to the device is then asynchronous. Needs a CUDA device.
  bool pin_memory = false;
};

/// Iterates the packs of a plan, built on worker threads.
class PackLoader {
 public:
  /// `builder` must outlive the loader. `packs` holds global sample ids per pack, in the order
  /// next() returns them. Workers start at once.
  PackLoader(const PackBuilder& builder, std::vector<std::vector<int64_t>> packs,
             LoaderOptions options);
  ~PackLoader();
  PackLoader(const PackLoader&) = delete;
  PackLoader& operator=(const PackLoader&) = delete;

  /// The next pack in plan order, std::nullopt after the last. Rethrows the exception a worker
  /// raised while building this pack.
  std::optional<models::PackBatch> next();

  /// Packs in the plan.
  size_t size() const { return packs_.size(); }
  /// Samples skipped so far (on_bad_sample: skip), by reason: report it at the end of an epoch.
  const BadSampleCounts& bad_samples() const { return counts_; }

 private:
  struct Slot {
    bool ready = false;
    std::optional<models::PackBatch> batch;
    std::exception_ptr error;
  };
  void work();

  const PackBuilder& builder_;
  std::vector<std::vector<int64_t>> packs_;
  LoaderOptions options_;
  BadSampleCounts counts_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t next_job_ = 0;
  size_t consumed_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace omnibal::data

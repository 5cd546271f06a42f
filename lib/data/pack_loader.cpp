#include "data/pack_loader.h"

#include "core/error.h"

namespace omnibal::data {

PackLoader::PackLoader(const PackBuilder& builder, std::vector<std::vector<int64_t>> packs,
                       LoaderOptions options)
    : builder_(builder), packs_(std::move(packs)), options_(options), slots_(packs_.size()) {
  OMNIBAL_CHECK(options_.workers >= 1, "data.workers: expected >= 1, got ", options_.workers);
  OMNIBAL_CHECK(options_.prefetch >= 1, "loader prefetch: expected >= 1, got ", options_.prefetch);
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this] { work(); });
}

PackLoader::~PackLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void PackLoader::work() {
  for (;;) {
    size_t job = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] {
        return stop_ || next_job_ >= packs_.size() ||
               next_job_ < consumed_ + static_cast<size_t>(options_.prefetch);
      });
      if (stop_ || next_job_ >= packs_.size()) return;
      job = next_job_++;
    }
    std::optional<models::PackBatch> batch;
    std::exception_ptr error;
    try {
      batch = builder_.build(packs_[job], options_.parts, &counts_);
      if (options_.pin_memory) batch->pin_memory();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slots_[job].batch = std::move(batch);
      slots_[job].error = error;
      slots_[job].ready = true;
    }
    cv_.notify_all();
  }
}

std::optional<models::PackBatch> PackLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (consumed_ >= packs_.size()) return std::nullopt;
  Slot& slot = slots_[consumed_];
  cv_.wait(lock, [&slot] { return slot.ready; });
  ++consumed_;
  std::optional<models::PackBatch> batch = std::move(slot.batch);
  std::exception_ptr error = slot.error;
  slot.batch.reset();
  lock.unlock();
  cv_.notify_all();
  if (error) std::rethrow_exception(error);
  return batch;
}

}  // namespace omnibal::data

#include "train/run_stop.h"

#include <fmt/format.h>

#include <thread>

#include "comm/stop_signal.h"
#include "core/error.h"

namespace omnibal::train {

RunStop::RunStop(const TrainConfig& train, comm::Communicator& world,
                 std::chrono::steady_clock::time_point started)
    : train_(train), world_(world), started_(started) {}

std::optional<std::string> RunStop::at_boundary(int64_t step, int64_t first) {
  if (comm::should_stop(world_)) return std::string("signal");
  if (step <= first) return std::nullopt;
  if (train_.exit_after_steps > 0 && step - first >= train_.exit_after_steps)
    return fmt::format("train.exit_after_steps {}", train_.exit_after_steps);
  if (train_.exit_duration_min <= 0) return std::nullopt;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const int64_t over = elapsed >= 60.0 * train_.exit_duration_min ? 1 : 0;
  if (world_.all_reduce_int(over, comm::ReduceOp::kMax, "exit duration") == 0) return std::nullopt;
  return fmt::format("train.exit_duration_min {}", train_.exit_duration_min);
}

FaultInjector::FaultInjector(const FailAtConfig& fail_at, int world_rank,
                             std::shared_ptr<comm::ErrorForwarder> errors)
    : fail_at_(fail_at), rank_(world_rank), errors_(std::move(errors)) {}

void FaultInjector::maybe_fail(FailWhere where, int64_t step) const {
  if (fail_at_.rank != rank_ || fail_at_.step != step || fail_at_.where != where) return;
  if (where == FailWhere::kLoader) {
    std::thread t([&] {
      errors_->run_guarded("data-loader", [&] {
        OMNIBAL_FAIL("debug.fail_at: injected loader failure at step ", step);
      });
    });
    t.join();
    return;
  }
  OMNIBAL_FAIL("debug.fail_at: injected ", choice_name(where), " failure at step ", step);
}

}  // namespace omnibal::train

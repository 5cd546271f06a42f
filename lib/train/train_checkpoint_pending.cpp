// TEMPORARY bridge until lib/checkpoint (branch ckpt) is merged: checkpoints are skipped with a
// warning. Deleted by the merge commit that brings lib/checkpoint.
#include "core/error.h"
#include "core/log.h"
#include "train/train_checkpoint.h"

namespace omnibal::train {

nlohmann::json TrainCounters::to_json() const { return {{"step", step}}; }
TrainCounters TrainCounters::from_json(const nlohmann::json&) { return {}; }
struct TrainCheckpoint::Impl {};
TrainCheckpoint::TrainCheckpoint(std::string, int, comm::Communicator&) {}
TrainCheckpoint::~TrainCheckpoint() = default;
void TrainCheckpoint::save(const TrainCounters&, const std::vector<std::pair<std::string, torch::Tensor>>&,
                           const AdamW&, bool, const std::string&) {
  log_info("warning: this build has no lib/checkpoint; checkpoint skipped");
}
std::string TrainCheckpoint::resolve(const std::string& resume) const {
  OMNIBAL_CHECK(resume.empty(), "--resume needs lib/checkpoint, which this build lacks");
  return "";
}
TrainCounters TrainCheckpoint::load(const std::string&, const std::vector<std::pair<std::string, torch::Tensor>>&,
                                    AdamW&) const {
  OMNIBAL_FAIL("this build has no lib/checkpoint");
}
std::string TrainCheckpoint::config_text(const std::string&) const { return ""; }

}  // namespace omnibal::train

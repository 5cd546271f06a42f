#include "train/run_inputs.h"

#include <fmt/format.h>

#include <algorithm>

#include "comm/communicator.h"
#include "core/error.h"
#include "train/tp_group.h"

namespace omnibal::train {

RunInputs load_run_inputs(const Config& config, comm::ParallelComms& comms) {
  RunInputs in;
  in.preset = load_model_preset(config.model.preset);
  check_tensor_parallel(in.preset, comms.grid().shape().tp);
  in.architecture_yaml = preset_architecture_yaml(in.preset);
  OMNIBAL_CHECK(!config.data.meta.empty(), "data.meta: expected the training meta file");
  OMNIBAL_CHECK(!config.data.tokenizer.empty(), "data.tokenizer: expected a SentencePiece .model");
  in.tokenizer = std::make_unique<data::Tokenizer>(config.data.tokenizer);
  const DataRank rank{comms.coord().dp, comms.coord().pp, comms.grid().shape().pp};
  in.data =
      std::make_unique<TrainingData>(load_set(config.data.meta, config, in.preset, *in.tokenizer,
                                              std::max(1, config.data.workers)),
                                     config, rank);
  const uint64_t h = in.plan_hash();
  OMNIBAL_CHECK(comm::same_on_every_rank(comms.world(), h, "data plan hash"), "rank ", comms.rank(),
                ": the data plan differs between ranks (this rank's hash ",
                fmt::format("{:016x}", h), "); all ranks must read the same data files and config");
  if (!config.data.eval_meta.empty())
    in.evaluator = std::make_unique<Evaluator>(load_set(config.data.eval_meta, config, in.preset,
                                                        *in.tokenizer, 1, /*repeat=*/false),
                                               config.balance.samples_per_pack,
                                               in.preset.llm.max_seq_len, config.train.eval_every);
  return in;
}

}  // namespace omnibal::train

// omnibal-train: trains a VLM preset with OmniBal's data, model and memory balance on a
// TP x PP x DP grid of MPI ranks.
//   mpirun -np N omnibal-train --config configs/X.yaml [--set key=value ...] [--resume auto|PATH]
// N must equal parallel.tp * parallel.pp * parallel.dp. The app parses the command line, loads the config,
// sets up threads and the process grid, locks the run directory (rank 0, core/run_dir_lock.h:
// a second launch on it is refused, naming the holder), finds the checkpoint to resume and
// settles every `auto` of the config (train/run_config.h), loads the inputs and refuses a resume
// onto another architecture or data plan (train/run_inputs.h), runs the trainer and maps errors to
// `[rank r] ...` on stderr and a job abort (comm::run_guarded); SIGTERM/SIGINT stop the job at
// the next step boundary with a checkpoint and exit 0, as do train.exit_after_steps /
// exit_duration_min; during start-up planning (profile, partition trials) within seconds, with
// no checkpoint and exit 0 too (train/startup_stop.h).
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/job_guard.h"
#include "comm/mpi_runtime.h"
#include "comm/parallel_comms.h"
#include "comm/run_on_root.h"
#include "comm/stop_signal.h"
#include "comm/thread_setup.h"
#include "core/config.h"
#include "core/host_heap.h"
#include "core/log.h"
#include "core/run_dir_lock.h"
#include "train/run_config.h"
#include "train/run_device.h"
#include "train/run_inputs.h"
#include "train/startup_stop.h"
#include "train/trainer.h"

namespace comm = omnibal::comm;

namespace {

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume;
  bool print_config = false;
};

int train(const Args& args, comm::MpiRuntime& mpi) {
  const omnibal::Config cfg = omnibal::load_config(args.config, args.overrides);
  if (args.print_config) {
    if (mpi.rank() == 0) std::fputs(omnibal::to_yaml(cfg).c_str(), stdout);
    return 0;
  }
  comm::install_stop_handler();
  comm::configure_threads(cfg.runtime.threads, mpi.local_size());  // logs each rank's plan
  omnibal::log_info("{}", omnibal::configure_host_heap(cfg.runtime.heap_keep_mb).describe());
  const comm::ProcessGrid grid = comm::make_process_grid(cfg.parallel, mpi.size());
  comm::WaitPolicy policy{cfg.comm.timeout_s, std::make_shared<comm::ErrorForwarder>(),
                          cfg.comm.stop_grace_s};
  // runtime.device: checked before any communicator; CUDA tensors travel over NCCL.
  const torch::Device device = omnibal::train::run_device(cfg.runtime.device);
  comm::ParallelComms comms(grid, policy, omnibal::train::comm_backend(device),
                            device.is_cuda() ? device.index() : 0);
  // One launch per run directory: rank 0 locks it before anything is written there and holds
  // the lock until this process ends; a refusal ends every rank with rank 0's message.
  std::optional<omnibal::RunDirLock> run_dir_lock;
  const auto lock_run_dir = [&] { run_dir_lock.emplace(cfg.runtime.run_dir, "omnibal-train"); };
  comm::run_on_root(comms.world(), lock_run_dir, "locking runtime.run_dir");
  // Every `auto` is settled here, once (the checkpoint resumed decides model.hf_style before
  // init_from's config.json does); below this line the config is const.
  const omnibal::train::ResumePoint resume = omnibal::train::find_resume_point(cfg, args.resume);
  const omnibal::Config run_cfg = omnibal::train::resolve_run_config(cfg, resume);
  try {
    // The preset, tokenizer and data plan, then the refusals of a resume that would train
    // something else than its checkpoint holds: before any start-up planning.
    omnibal::train::RunInputs inputs = omnibal::train::load_run_inputs(run_cfg, comms);
    omnibal::train::refuse_incompatible_resume(resume, run_cfg, inputs.architecture_yaml,
                                               inputs.plan_hash());
    omnibal::train::Trainer trainer(run_cfg, comms, policy.errors, resume, std::move(inputs));
    const auto outcome = trainer.run();
    if (outcome.stopped)
      omnibal::log_info(
          "stopped ({}) after step {}; checkpoint written, continue with --resume auto",
          outcome.stop_reason, outcome.steps_done);
  } catch (const omnibal::train::StartupStopped& stop) {  // agreed by every rank: exit 0
    omnibal::log_info("{}", stop.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiRuntime mpi(&argc, &argv);
  Args args;
  CLI::App app{"omnibal-train: TP x PP x DP VLM trainer with OmniBal balancing"};
  app.add_option("--config", args.config, "run configuration (YAML)")->check(CLI::ExistingFile);
  app.add_option("--set", args.overrides, "override a config key: a.b=value (repeatable)");
  app.add_option("--resume", args.resume,
                 "auto (newest valid checkpoint of the run) or a "
                 "checkpoint directory");
  app.add_flag("--print-config", args.print_config, "print the resolved config and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return comm::run_guarded([&] { return train(args, mpi); });
}

// RunLog: the run directory as rank 0 writes it: the resolved config.yaml, metrics.jsonl (one
// JSON object per step), eval.jsonl (one per evaluation), summary.json at the end, and the
// console: a progress line per step with ETA and a final summary. Other ranks hold a RunLog that
// writes nothing. A resumed run appends (earlier lines past the resume step are dropped first).
// Every record is flushed as it is written, and a write that fails (a full disk, a quota) throws
// omnibal::Error naming the file and the record ("<run_dir>/metrics.jsonl: writing the step 12
// record failed (No space left on device) - is the disk full?"), which ends the job at once
// rather than at the next checkpoint. The run directory's lock is the app's (core/run_dir_lock.h).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "train/evaluator.h"

namespace omnibal::train {

/// Writes `text` as the whole file `path` (a file of the run directory; `what` names it in
/// errors, e.g. "the run summary"); throws omnibal::Error naming the path when it cannot create
/// the file or the write fails (a full disk).
void write_run_file(const std::string& path, const std::string& text, const std::string& what);

class RunLog {
 public:
  /// `active` on rank 0 only. Creates `dir`, writes config.yaml; keeps metrics/eval lines of
  /// steps < `first_step` (0 = start afresh). Throws omnibal::Error naming the file when a
  /// write fails.
  /// The progress line prints every `log_every` steps (train.log_every) and at this launch's
  /// first and the run's last step.
  RunLog(std::string dir, bool active, const std::string& config_yaml, int64_t first_step,
         int64_t total_steps, int log_every = 1);
  /// Appends one step's metrics and, when due, prints the progress line: loss, lr, gradient
  /// norm, samples/s, tokens/s, s/step, bubble, the step's Dist Ratio (ViT tiles / LLM tokens
  /// over DP ranks, balance_metrics.h) and ETA; on a terminal one line updated in place.
  /// Throws omnibal::Error naming metrics.jsonl and the step when the write fails.
  void step(const nlohmann::json& metrics);
  /// Appends an evaluation and prints its table. Throws omnibal::Error when the write fails.
  void eval(int64_t step, const EvalResult& result);
  /// Writes summary.json and prints the final summary. Throws omnibal::Error when the write
  /// fails.
  void finish(const nlohmann::json& summary);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  bool active_;
  int64_t first_step_, total_steps_;
  int log_every_ = 1;
  bool tty_ = false;        ///< stdout is a terminal: the progress line updates in place
  bool open_line_ = false;  ///< a progress line without its newline is on the terminal
  void end_line();
  std::chrono::steady_clock::time_point start_;
  std::ofstream metrics_, eval_;
};

/// Evaluation as JSON: {"step", "overall": {...}, "tasks": {name: {samples, exact_match, loss,
/// majority_rate}}}.
nlohmann::json eval_json(int64_t step, const EvalResult& result);

}  // namespace omnibal::train

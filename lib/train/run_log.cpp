#include "train/run_log.h"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "balance/balance_metrics.h"
#include "core/error.h"

namespace omnibal::train {

namespace fs = std::filesystem;

namespace {

// A failed write to the run directory (a full disk, a quota) is an error naming the file, not a
// silently cut metrics.jsonl. Call after flush(): ofstream buffers, so only the flush writes.
void check_written(const std::ostream& out, const std::string& path, const std::string& what) {
  const int err = errno;
  OMNIBAL_CHECK(out.good(), path, ": writing ", what, " failed (",
                err != 0 ? std::strerror(err) : "stream error", ") - is the disk full?");
}

// Keeps the lines of `path` whose "step" is < keep_below (resume), drops the rest.
void truncate_after(const std::string& path, int64_t keep_below) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", int64_t{0}) < keep_below) keep.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : keep) out << l << "\n";
  out.flush();
  check_written(out, path, "the records kept for the resume");
}

std::string duration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60)
                   : fmt::format("{}m{:02}s", t / 60, t % 60);
}

nlohmann::json task_json(const TaskScore& t) {
  return {{"samples", t.samples},
          {"exact_match", t.accuracy()},
          {"correct", t.correct},
          {"loss", t.loss()},
          {"majority_rate", t.majority_rate}};
}

}  // namespace

void write_run_file(const std::string& path, const std::string& text, const std::string& what) {
  errno = 0;
  std::ofstream out(path, std::ios::trunc);
  OMNIBAL_CHECK(out.is_open(), path, ": cannot create ", what, " (", std::strerror(errno), ")");
  out << text;
  out.flush();
  check_written(out, path, what);
}

nlohmann::json eval_json(int64_t step, const EvalResult& r) {
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& t : r.tasks) tasks[t.task] = task_json(t);
  return {{"step", step}, {"overall", task_json(r.overall)}, {"tasks", tasks}};
}

RunLog::RunLog(std::string dir, bool active, const std::string& config_yaml, int64_t first_step,
               int64_t total_steps, int log_every)
    : dir_(std::move(dir)),
      active_(active),
      first_step_(first_step),
      total_steps_(total_steps),
      log_every_(std::max(1, log_every)),
      // In place only on a real terminal: OpenMPI hands ranks a pty even when mpirun's own
      // output goes to a file, so under mpirun (OMPI_COMM_WORLD_SIZE set) lines are printed.
      tty_(isatty(fileno(stdout)) != 0 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr),
      start_(std::chrono::steady_clock::now()) {
  if (!active_) return;
  fs::create_directories(dir_);
  write_run_file(dir_ + "/config.yaml", config_yaml, "the resolved config");
  // metrics.jsonl's "step" is the 0-based step index (steps 0 .. first_step - 1 are done),
  // eval.jsonl's the number of steps done when it ran (an evaluation at first_step ran before
  // the checkpoint the run resumes from).
  for (const auto& [name, keep_below] :
       {std::pair<const char*, int64_t>{"/metrics.jsonl", first_step},
        std::pair<const char*, int64_t>{"/eval.jsonl", first_step + 1}}) {
    if (first_step == 0) write_run_file(dir_ + name, "", "an empty log");
    else truncate_after(dir_ + name, keep_below);
  }
  metrics_.open(dir_ + "/metrics.jsonl", std::ios::app);
  eval_.open(dir_ + "/eval.jsonl", std::ios::app);
  OMNIBAL_CHECK(metrics_.good() && eval_.good(), dir_, ": cannot write the run directory");
}

void RunLog::step(const nlohmann::json& m) {
  if (!active_) return;
  const int64_t step = m.at("step").get<int64_t>();
  errno = 0;
  metrics_ << m.dump() << "\n";
  metrics_.flush();
  check_written(metrics_, dir_ + "/metrics.jsonl", fmt::format("the step {} record", step));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step + 1 - first_step_;
  if (step != first_step_ && step + 1 != total_steps_ && (step + 1) % log_every_ != 0) return;
  const double eta = done > 0 ? elapsed / done * (total_steps_ - step - 1) : 0;
  std::vector<int64_t> tiles, tokens;
  for (const auto& d : m.at("dp_ranks")) {
    tiles.push_back(d.at("tiles").get<int64_t>());
    tokens.push_back(d.at("tokens").get<int64_t>());
  }
  const std::string line = fmt::format(
      "step {:>5}/{} loss {:.4f} lr {:.2e} |g| {:.3f} {:>6.1f} samples/s {:>7.0f} tok/s "
      "{:.2f} s/step bubble {:.2f} dist {:.3f}/{:.3f} ETA {}",
      step + 1, total_steps_, m.at("loss").get<double>(), m.at("lr").get<double>(),
      m.at("grad_norm").get<double>(), m.at("samples_per_s").get<double>(),
      m.at("tokens_per_s").get<double>(), m.at("step_seconds").get<double>(),
      m.at("bubble_fraction").get<double>(), balance::dist_ratio(tiles.data(), tiles.size()),
      balance::dist_ratio(tokens.data(), tokens.size()), duration(eta));
  if (tty_) {
    fmt::print("\r{}\x1b[K", line);  // one line, rewritten in place
    open_line_ = true;
    if (step + 1 == total_steps_) end_line();
  } else {
    fmt::print("{}\n", line);
  }
  std::fflush(stdout);
}

void RunLog::end_line() {
  if (!open_line_) return;
  fmt::print("\n");
  open_line_ = false;
}

void RunLog::eval(int64_t step, const EvalResult& r) {
  if (!active_) return;
  end_line();
  errno = 0;
  eval_ << eval_json(step, r).dump() << "\n";
  eval_.flush();
  check_written(eval_, dir_ + "/eval.jsonl", fmt::format("the evaluation record of step {}", step));
  fmt::print("eval @ step {}: {:<28} {:>7} {:>8} {:>8} {:>9}\n", step, "task", "samples", "loss",
             "exact", "majority");
  auto row = [](const TaskScore& t) {
    if (t.samples == 0) {  // every sample skipped (data.on_bad_sample: skip): nothing scored
      fmt::print("               {:<28} {:>7} {:>8} {:>8} {:>8.1f}%\n", t.task, 0, "n/a", "n/a",
                 100 * t.majority_rate);
      return;
    }
    fmt::print("               {:<28} {:>7} {:>8.4f} {:>7.1f}% {:>8.1f}%\n", t.task, t.samples,
               t.loss(), 100 * t.accuracy(), 100 * t.majority_rate);
  };
  for (const auto& t : r.tasks) row(t);
  row(r.overall);
  std::fflush(stdout);
}

void RunLog::finish(const nlohmann::json& s) {
  if (!active_) return;
  end_line();
  write_run_file(dir_ + "/summary.json", s.dump(2) + "\n", "the run summary");
  // After a resume the time is this launch's: say how many of the steps it ran.
  const int64_t steps = s.at("steps").get<int64_t>(), here = s.at("steps_this_run").get<int64_t>();
  fmt::print(
      "done: {} in {} ({:.2f} s/step), final loss {}, {} samples, param hash {}"
      "{}\n",
      here == steps ? fmt::format("{} steps", steps)
                    : fmt::format("step {} ({} in this launch)", steps, here),
      duration(s.at("seconds").get<double>()), s.at("seconds_per_step").get<double>(),
      s.at("final_loss").is_number()  // null: no step ran in this launch (train.steps 0)
          ? fmt::format("{:.4f}", s.at("final_loss").get<double>())
          : std::string("n/a"),
      s.at("samples").get<int64_t>(), s.at("param_hash").get<std::string>(),
      s.contains("eval") ? fmt::format(", exact match {:.1f}%",
                                       100 * s["eval"]["overall"]["exact_match"].get<double>())
                         : std::string());
  fmt::print("run directory: {}\n", dir_);
  std::fflush(stdout);
}

}  // namespace omnibal::train

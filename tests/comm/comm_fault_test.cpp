// Failure handling end to end: runs comm_fault_program under mpiexec as a child process and
// checks that an injected error, a background-thread error or a stuck receive ends the whole
// job non-zero before a 30 s deadline with "[rank r] <message>" on stderr, and that SIGTERM
// sent to the rank processes (not to mpiexec) makes all ranks stop at the same step with exit 0.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr double kDeadlineS = 30;

struct RunResult {
  int exit_code = -1;  ///< mpiexec's exit status (-1: killed at the deadline)
  bool hung = false;   ///< still running at the deadline
  std::string output;  ///< stdout + stderr
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Starts mpiexec with `ranks` ranks of comm_fault_program, stdout and stderr into `log`.
pid_t spawn(int ranks, const std::vector<std::string>& args, const fs::path& log,
            const std::vector<std::string>& mpiexec_args = {}) {
  std::vector<std::string> argv = {OMNIBAL_MPIEXEC, "-n", std::to_string(ranks), "--oversubscribe"};
  argv.insert(argv.end(), mpiexec_args.begin(), mpiexec_args.end());
  argv.push_back(OMNIBAL_FAULT_PROGRAM);
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

/// Waits for `pid` until the deadline; kills the job when it hangs.
RunResult finish(pid_t pid, const fs::path& log) {
  RunResult result;
  const auto start = Clock::now();
  int status = 0;
  while (true) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (Clock::now() - start > std::chrono::duration<double>(kDeadlineS)) {
      result.hung = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!result.hung && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.output = read_file(log);
  return result;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("omnibal_comm_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

RunResult run_mode(int ranks, const std::string& mode, const std::string& timeout_s = "30",
                   const std::vector<std::string>& extra_args = {},
                   const std::vector<std::string>& mpiexec_args = {}) {
  const fs::path dir = fresh_dir(mode);
  std::vector<std::string> args = {mode, dir.string(), timeout_s};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const pid_t pid = spawn(ranks, args, dir / "log.txt", mpiexec_args);
  RunResult r = finish(pid, dir / "log.txt");
  fs::remove_all(dir);
  return r;
}

/// The step each rank wrote to <dir>/rank<r>.stop when it agreed to stop (-1: no file).
std::vector<int> stop_steps(const fs::path& dir, int ranks) {
  std::vector<int> steps;
  for (int r = 0; r < ranks; ++r) {
    const fs::path stop_file = dir / ("rank" + std::to_string(r) + ".stop");
    steps.push_back(fs::exists(stop_file) ? std::stoi(read_file(stop_file)) : -1);
  }
  return steps;
}

/// Waits until every rank wrote its pid file and returns the pids.
std::vector<pid_t> rank_pids(const fs::path& dir, int ranks) {
  std::vector<pid_t> pids;
  const auto start = Clock::now();
  for (int r = 0; r < ranks; ++r) {
    const fs::path pid_file = dir / ("rank" + std::to_string(r) + ".pid");
    while (!fs::exists(pid_file) && Clock::now() - start < std::chrono::seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(fs::exists(pid_file));
    pids.push_back(std::stoi(read_file(pid_file)));
  }
  return pids;
}

}  // namespace

TEST_CASE("failure: a throw on rank 1 ends the job while rank 0 waits in a receive",
          "[mpi][fault]") {
  const RunResult r = run_mode(2, "throw-in-recv");
  INFO(r.output);
  CHECK_FALSE(r.hung);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 1] ") &&
                           Catch::Contains("injected failure at step 2 (where=forward)"));
}

TEST_CASE(
    "failure: under odls_base_sigkill_timeout a rank blocked on a dead peer gives up "
    "comm.stop_grace_s after SIGTERM",
    "[mpi][fault]") {
  // Open MPI 4.1 answers rank 1's MPI_Abort with SIGCONT, sleeps the timeout (3 s here), sends
  // SIGTERM, sleeps it again, then SIGKILLs. Rank 0's stop handler turns that SIGTERM into a
  // flag while it is blocked in a receive from the dead rank; the watchdog must then give up
  // after comm.stop_grace_s (1 s) with a message, before the SIGKILL.
  const RunResult r =
      run_mode(2, "throw-in-recv", "120", {"1"}, {"--mca", "odls_base_sigkill_timeout", "3"});
  INFO(r.output);
  CHECK_FALSE(r.hung);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 1] ") &&
                           Catch::Contains("injected failure at step 2 (where=forward)") &&
                           Catch::Contains("[rank 0] ") &&
                           Catch::Contains("recv activation mb 0 from rank 1 (header) still "
                                           "blocked 1 s after a stop signal (comm.stop_grace_s)"));
}

TEST_CASE("failure: a throw on rank 1 ends the job while others wait in an all-reduce",
          "[mpi][fault]") {
  const RunResult r = run_mode(4, "throw-in-allreduce");
  INFO(r.output);
  CHECK_FALSE(r.hung);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 1] ") &&
                           Catch::Contains("injected failure at step 3 (where=reduce)"));
}

TEST_CASE("failure: a background-thread throw is forwarded and ends the job", "[mpi][fault]") {
  const RunResult r = run_mode(2, "thread-throw");
  INFO(r.output);
  CHECK_FALSE(r.hung);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 1] in thread 'data-loader': ") &&
                           Catch::Contains("injected loader failure: bad sample 17"));
}

TEST_CASE("failure: the watchdog names the stuck receive", "[mpi][fault]") {
  const RunResult r = run_mode(2, "timeout", "1.5");
  INFO(r.output);
  CHECK_FALSE(r.hung);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 0] ") &&
                           Catch::Contains("recv activation mb 3 from rank 1 (header) timed out "
                                           "after 1.5 s (comm.timeout_s)"));
}

TEST_CASE("failure: the watchdog names the stuck all-reduce", "[mpi][fault]") {
  const RunResult r = run_mode(2, "timeout-allreduce", "1.5");
  INFO(r.output);
  CHECK_FALSE(r.hung);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 0] ") &&
                           Catch::Contains("gradient all-reduce of bucket 2 over world timed out "
                                           "after 1.5 s (comm.timeout_s)"));
}

TEST_CASE("sigterm: ranks agree on one step, stop and exit 0", "[mpi][sigterm]") {
  const bool all_ranks = GENERATE(true, false);  // Slurm signals all tasks; a partial signal too
  const int ranks = 2;
  const fs::path dir = fresh_dir(all_ranks ? "sigterm_all" : "sigterm_one");
  const pid_t pid = spawn(ranks, {"sigterm", dir.string(), "20"}, dir / "log.txt");
  const std::vector<pid_t> pids = rank_pids(dir, ranks);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let some steps run
  for (int r = 0; r < ranks; ++r) {
    if (all_ranks || r == 1) REQUIRE(kill(pids[r], SIGTERM) == 0);
  }
  const RunResult result = finish(pid, dir / "log.txt");
  INFO(result.output);
  CHECK_FALSE(result.hung);
  CHECK(result.exit_code == 0);
  const std::vector<int> steps = stop_steps(dir, ranks);
  CHECK(steps[0] == steps[1]);
  CHECK(steps[0] > 1);  // it ran some steps before the signal
  fs::remove_all(dir);
}

TEST_CASE("sigterm: mpirun forwards SIGTERM after odls_base_sigkill_timeout, ranks stop together",
          "[mpi][sigterm]") {
  // Open MPI 4.1: on SIGTERM mpirun waits odls_base_sigkill_timeout seconds, sends SIGTERM to
  // the ranks, waits as long again, then SIGKILLs. The ranks must stop within that window.
  const int ranks = 2;
  const fs::path dir = fresh_dir("sigterm_mpirun");
  const pid_t pid = spawn(ranks, {"sigterm", dir.string(), "20"}, dir / "log.txt",
                          {"--mca", "odls_base_sigkill_timeout", "2"});
  rank_pids(dir, ranks);
  REQUIRE(kill(pid, SIGTERM) == 0);
  const RunResult result = finish(pid, dir / "log.txt");
  INFO(result.output);
  CHECK_FALSE(result.hung);
  const std::vector<int> steps = stop_steps(dir, ranks);
  CHECK(steps[0] > 1);  // the ranks were signalled, not killed before the handler ran
  CHECK(steps[0] == steps[1]);
  CHECK_THAT(result.output,
             Catch::Contains("rank 0 stops at step") && Catch::Contains("rank 1 stops at step"));
  fs::remove_all(dir);
}

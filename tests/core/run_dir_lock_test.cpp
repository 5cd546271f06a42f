// RunDirLock: one holder per run directory. A second lock (another open file description in
// this process, or another process) is refused naming the holder's program, pid, host and the
// lock file; a lock file left by a dead process is taken over; a release removes the file.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/run_dir_lock.h"
#include "tests/common/scratch_dir.h"

using omnibal::parse_run_dir_holder;
using omnibal::RunDirLock;
using omnibal::testing::ScratchDir;

namespace {

namespace fs = std::filesystem;

// The lock file of run directory `dir`. Each test's run directory is ScratchDir::absent: the lock
// creates it (or must refuse what stands in its place).
std::string lock_file(const ScratchDir& dir) { return dir.file(RunDirLock::kFileName); }

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The message of the refused lock of `dir`.
std::string refusal(const std::string& dir) {
  try {
    RunDirLock second(dir, "omnibal-train");
  } catch (const omnibal::Error& e) {
    return e.what();
  }
  FAIL("the second lock of " << dir << " was not refused");
  return "";
}

}  // namespace

TEST_CASE("run dir lock: creates the directory and names this process in the lock file", "[core]") {
  const auto dir = ScratchDir::absent("run_dir_lock_create");
  RunDirLock lock(dir.str(), "omnibal-train");
  CHECK(lock.held());
  CHECK(lock.path() == lock_file(dir));
  CHECK_FALSE(lock.taken_over());
  const auto holder = parse_run_dir_holder(read_all(lock_file(dir)));
  CHECK(holder.program == "omnibal-train");
  CHECK(holder.pid == ::getpid());
  CHECK(holder.host == hostname());
  CHECK(holder.since.size() == 20);  // 2026-12-06T05:01:02Z
  CHECK(holder.since.back() == 'Z');
}

TEST_CASE("run dir lock: a second lock in the same process is refused, naming the holder",
          "[core]") {
  const auto dir = ScratchDir::absent("run_dir_lock_same_process");
  RunDirLock lock(dir.str(), "omnibal-train");
  // flock locks belong to the open file description: a second open conflicts in one process.
  const std::string what = refusal(dir.str());
  const std::string expected = "runtime.run_dir " + dir.str() + " is in use by omnibal-train pid " +
                               std::to_string(::getpid()) + " on host " + hostname() + " since ";
  CHECK_THAT(what, Catch::Contains(expected));
  CHECK_THAT(what, Catch::Contains("(lock file " + lock_file(dir) +
                                   "); wait for it, or use another runtime.run_dir"));
  CHECK(fs::exists(lock_file(dir)));  // the refused attempt leaves the holder's file alone
  CHECK(parse_run_dir_holder(read_all(lock_file(dir))).pid == ::getpid());
}

TEST_CASE("run dir lock: another process is refused while held, and locks once it is released",
          "[core]") {
  const auto dir = ScratchDir::absent("run_dir_lock_other_process");
  auto try_in_child = [&] {
    const pid_t child = ::fork();
    if (child == 0) {
      int code = 0;
      try {
        RunDirLock lock(dir.str(), "omnibal-train");
      } catch (const omnibal::Error&) {
        code = 3;
      }
      ::_exit(code);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  {
    RunDirLock lock(dir.str(), "omnibal-train");
    CHECK(try_in_child() == 3);
  }
  CHECK_FALSE(fs::exists(lock_file(dir)));  // a clean release removes the file
  CHECK(try_in_child() == 0);
  RunDirLock again(dir.str(), "omnibal-train");
  CHECK_FALSE(again.taken_over());  // released cleanly by the child: nothing to take over
}

TEST_CASE("run dir lock: the lock of a killed process is taken over, naming it", "[core]") {
  const auto dir = ScratchDir::absent("run_dir_lock_killed");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    try {
      RunDirLock lock(dir.str(), "omnibal-train");
      const char byte = 1;
      if (::write(ready[1], &byte, 1) != 1) ::_exit(4);
      for (;;) ::pause();  // holds the lock until killed
    } catch (...) {
      ::_exit(5);
    }
  }
  ::close(ready[1]);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  CHECK_THAT(refusal(dir.str()),
             Catch::Contains("in use by omnibal-train pid " + std::to_string(child)));
  ::kill(child, SIGKILL);  // dies holding it: the file stays, the kernel drops the lock
  ::waitpid(child, nullptr, 0);
  REQUIRE(fs::exists(lock_file(dir)));
  RunDirLock lock(dir.str(), "omnibal-train");
  REQUIRE(lock.taken_over());
  CHECK(lock.taken_over()->pid == child);
  CHECK(lock.taken_over()->host == hostname());
  CHECK(parse_run_dir_holder(read_all(lock_file(dir))).pid == ::getpid());
}

TEST_CASE("run dir lock: a lock file naming a dead pid on another host is taken over", "[core]") {
  const auto dir = ScratchDir::absent("run_dir_lock_stale");
  fs::create_directories(dir.path());
  std::ofstream(lock_file(dir)) << "program omnibal-train\npid 4194301\nhost node-17\n"
                                   "since 2026-12-06T05:01:02Z\n";
  RunDirLock lock(dir.str(), "omnibal-train");
  REQUIRE(lock.taken_over());
  CHECK(lock.taken_over()->describe() ==
        "omnibal-train pid 4194301 on host node-17 since 2026-12-06T05:01:02Z");
  const auto now = parse_run_dir_holder(read_all(lock_file(dir)));
  CHECK(now.pid == ::getpid());
  CHECK(now.host == hostname());  // the old content is replaced, not appended to
}

TEST_CASE("run dir lock: an unusable run directory is an error naming it", "[core]") {
  const auto dir = ScratchDir::absent("run_dir_lock_not_a_dir");
  std::ofstream(dir.str()) << "a file, not a directory\n";
  CHECK_THROWS_WITH(RunDirLock(dir.str(), "omnibal-train"),
                    Catch::Contains("runtime.run_dir " + dir.str()));
  fs::remove(dir.path());
}

TEST_CASE("run dir lock: holder text parses and describes itself", "[core]") {
  const auto h = parse_run_dir_holder("program omnibal-train\npid 12\nhost h\nsince T\nextra x\n");
  CHECK(h.describe() == "omnibal-train pid 12 on host h since T");
  CHECK(parse_run_dir_holder("").pid == 0);
  CHECK(parse_run_dir_holder("").describe() == "another process (its lock file names no holder)");
}

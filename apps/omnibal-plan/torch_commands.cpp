// The LibTorch subcommands (profile, export) as seen from the torch-free omnibal-plan: they live
// in omnibal-plan-torch beside this binary, which omnibal-plan execs with the same arguments, so
// the planners start without loading LibTorch's ~290 shared libraries or MPI.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "core/error.h"

namespace omnibal::plan {

namespace {

constexpr const char* kTorchCommands[][2] = {
    {"profile", "per-unit cost table of a preset under a balanced pack (LibTorch)"},
    {"export", "a training checkpoint as a Hugging Face InternVL checkpoint (LibTorch)"},
};

// omnibal-plan-torch in the folder of the running executable (/proc/self/exe: symlinks to
// omnibal-plan resolve to the build or install folder that holds both).
std::filesystem::path torch_binary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  OMNIBAL_CHECK(!ec, "omnibal-plan: cannot resolve /proc/self/exe (", ec.message(),
                ") to find omnibal-plan-torch");
  return self.parent_path() / "omnibal-plan-torch";
}

}  // namespace

bool is_torch_command(const std::string& name) {
  for (const auto& c : kTorchCommands)
    if (name == c[0]) return true;
  return false;
}

int exec_torch_command(int argc, char** argv) {
  const std::string bin = torch_binary().string();
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  ::execv(bin.c_str(), args.data());  // returns only on failure
  const int err = errno;
  OMNIBAL_FAIL("omnibal-plan ", argv[1], " runs ", bin, ", which cannot be started (",
               std::strerror(err), "); it is built with LibTorch (OMNIBAL_WITH_TORCH=ON): ",
               "cmake --build build --target omnibal-plan-torch");
}

void register_torch_command_stubs(CLI::App& app) {
  // Listed in `omnibal-plan --help` only: main() forwards these before the command line is parsed.
  for (const auto& c : kTorchCommands) app.add_subcommand(c[0], c[1]);
}

}  // namespace omnibal::plan

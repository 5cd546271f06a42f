#include "core/log.h"

#include <cstdio>
#include <mutex>

namespace omnibal {
namespace {
int g_rank = 0;
int g_world = 1;
bool g_all = false;
std::mutex g_mutex;
}  // namespace

void set_log_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}

void set_log_all_ranks(bool all) { g_all = all; }

void log_line(const std::string& line) {
  if (g_rank != 0 && !g_all) return;
  log_line_every_rank(line);
}

void log_line_every_rank(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world > 1) std::fprintf(stderr, "[rank %d] %s\n", g_rank, line.c_str());
  else std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace omnibal

// Console logging: rank 0 prints by default; every message carries "[rank r]" when the job has
// more than one rank or when all ranks are asked to log; per-rank facts go through
// log_info_every_rank. set_log_rank() runs in comm::MpiRuntime's constructor, before any line.
// Uses fmt for formatting.
#pragma once

#include <fmt/format.h>

#include <string>

namespace omnibal {

/// Sets this process's rank and world size for log prefixes (call once at start-up).
void set_log_rank(int rank, int world_size);
/// When true, every rank logs (default: rank 0 only).
void set_log_all_ranks(bool all);
/// Writes one line to stderr when this rank logs. Thread-safe.
void log_line(const std::string& line);

/// Writes one line to stderr on every rank, prefixed "[rank r]" when the job has more than one
/// rank (for per-rank facts such as the thread count and CPU binding). Thread-safe.
void log_line_every_rank(const std::string& line);

/// fmt-style info message: log_info("packs {} over {} steps", n, steps).
template <typename... Args> void log_info(fmt::format_string<Args...> format, Args&&... args) {
  log_line(fmt::format(format, std::forward<Args>(args)...));
}

/// log_info on every rank (log_line_every_rank).
template <typename... Args>
void log_info_every_rank(fmt::format_string<Args...> format, Args&&... args) {
  log_line_every_rank(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace omnibal

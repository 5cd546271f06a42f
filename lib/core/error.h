// One error vocabulary for omnibal: every library check throws omnibal::Error carrying where it
// was raised, what was expected and what was seen. Library code never exits; only the apps catch,
// print "[rank r] <message>" and end the job.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace omnibal {

/// The single exception type thrown by omnibal libraries. what() is a full, human-readable
/// message: "<file>:<line>: <message>".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
/// Builds the message of an Error from the call site and streamable parts.
template <typename... Parts>
[[noreturn]] void throw_error(const char* file, int line, const Parts&... parts) {
  std::ostringstream os;
  const std::string path(file);
  const auto slash = path.find_last_of('/');
  os << (slash == std::string::npos ? path : path.substr(slash + 1)) << ":" << line << ": ";
  append_all(os, parts...);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace omnibal

/// Throws omnibal::Error with the streamed message parts when cond is false:
///   OMNIBAL_CHECK(q_vit > 0, "balance.q_vit: expected a positive tile count, got ", q_vit);
#define OMNIBAL_CHECK(cond, ...)                                                  \
  do {                                                                            \
    if (!(cond)) ::omnibal::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/// Throws omnibal::Error unconditionally with the streamed message parts.
#define OMNIBAL_FAIL(...) ::omnibal::detail::throw_error(__FILE__, __LINE__, __VA_ARGS__)

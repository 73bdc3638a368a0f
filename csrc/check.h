// The checks of the torch bindings: FLASHATTN_CHECK(cond, parts...) raises what TORCH_CHECK raises
// (RuntimeError; FLASHATTN_CHECK_VALUE: ValueError), with the message built here from the parts.
//
// Why not TORCH_CHECK's own formatting: it streams every part through a std::ostringstream
// instantiated in this extension, and on a build whose compiler and runtime libstdc++ disagree
// (seen on the H200 build of 2026-11-26: SIGSEGV in std::ostream::_M_insert<long>) the first
// message with a number in it kills the process instead of raising. The parts are joined here with
// std::to_string and string appends, and TORCH_CHECK gets one std::string, which c10 passes through
// without a stream.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>
#include <type_traits>

namespace flashattn {
namespace detail {

inline void append(std::string& s, const char* part) { s += part; }
inline void append(std::string& s, const std::string& part) { s += part; }
inline void append(std::string& s, char part) { s += part; }
inline void append(std::string& s, bool part) { s += part ? "true" : "false"; }
inline void append(std::string& s, c10::ScalarType part) { s += c10::toString(part); }
inline void append(std::string& s, const c10::Device& part) { s += part.str(); }

inline void append(std::string& s, c10::IntArrayRef part) {
  s += '[';
  for (size_t i = 0; i < part.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(part[i]);
  }
  s += ']';
}

// Numbers, and string views of either kind (c10::string_view is std::string_view in recent torch).
template <class T>
inline void append(std::string& s, const T& part) {
  if constexpr (std::is_array_v<T>) {
    s += part;
  } else if constexpr (std::is_integral_v<T>) {
    s += std::to_string(part);
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(part));
    s += buf;
  } else {
    s.append(part.data(), part.size());
  }
}

}  // namespace detail

template <class... Parts>
std::string message(const Parts&... parts) {
  std::string s;
  (detail::append(s, parts), ...);
  return s;
}

}  // namespace flashattn

#define FLASHATTN_CHECK(cond, ...) TORCH_CHECK((cond), ::flashattn::message(__VA_ARGS__))
#define FLASHATTN_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE((cond), ::flashattn::message(__VA_ARGS__))

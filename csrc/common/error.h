// The core's error type. The Python binding maps it to rdmacoll.RdmacollError, and
// ArgumentError (an invalid argument, found before communicating) to RdmacollValueError,
// which is also a ValueError (what Horovod raises for bad arguments).
#pragma once
#include <stdexcept>
#include <string>

namespace rdmacoll {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class ArgumentError : public Error {
 public:
  explicit ArgumentError(const std::string& what) : Error(what) {}
};

// Memory the machine cannot give (common/memory_limit.h), found before faulting it in:
// rdmacoll.RdmacollMemoryError, also a MemoryError (what NumPy raises).
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& what) : Error(what) {}
};

// Raised by a wait that noticed a pending Python signal (Ctrl-C): the binding turns it
// back into the Python exception that the signal handler set (KeyboardInterrupt).
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted by a signal") {}
};

// errno text with a prefix: "what: strerror(errno)".
std::string sysError(const std::string& what, int err);

}  // namespace rdmacoll

#define RC_CHECK(cond, msg)                                 \
  do {                                                      \
    if (!(cond)) throw ::rdmacoll::Error(std::string(msg)); \
  } while (0)

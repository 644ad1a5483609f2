// ddp's error hierarchy. Every error ddp throws is a ddp::Error (a std::runtime_error) whose message
// says what happened, where (op, sequence number, rank, peer, address) and what to do about it.
// Errors raised on a background thread are carried to the thread that waits for the result.
#pragma once

#include <stdexcept>
#include <string>

namespace ddp {

// Base class of everything ddp throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A caller passed something invalid (a rank out of range, a wrong buffer size, a bad URL, ...).
// Nothing was started; fixing the call fixes the problem.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An operation did not finish within its timeout. The message names the operation and, for
// collectives, which ranks had not reached it.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer process died or its connection broke while this process needed it.
class PeerLostError : public Error {
 public:
  using Error::Error;
};

// Ranks disagree: different collectives at the same sequence number, different models, different
// world sizes, two processes claiming one rank.
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A socket, file or system call failed in a way that is not one of the above.
class IOError : public Error {
 public:
  using Error::Error;
};

}  // namespace ddp

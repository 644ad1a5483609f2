#include "store/connection.h"

#include <stdexcept>

#include "util/strings.h"

namespace ddp::detail {

void StoreConnection::check_not_broken() const {
  if (broken_) throw PeerLostError(cat("the connection to ", peer_, " broke earlier: ", broken_reason_));
}

void StoreConnection::fail(std::string reason) {
  broken_ = true;
  broken_reason_ = std::move(reason);
}

void StoreConnection::disconnect() {
  fd_.reset();
  broken_ = false;
}

void StoreConnection::unexpected_reply(std::string_view op, std::string_view detail) {
  fail("unexpected reply");
  throw IOError(cat(op, ": unexpected reply", detail, " from ", peer_));
}

void StoreConnection::send_bytes(std::string_view bytes, Clock::time_point deadline) {
  send_all(fd_.get(), bytes, deadline, peer_);
}

void StoreConnection::read(char* out, std::size_t size, Clock::time_point deadline) {
  if (!recv_exact(fd_.get(), out, size, deadline, peer_)) throw IOError(cat(peer_, " closed the connection"));
}

TimeoutError StoreConnection::no_reply(std::string_view op) const {
  return TimeoutError(
      cat(op, ": no reply from ", peer_, " in time; the process hosting it may be stopped or overloaded"));
}

PeerLostError StoreConnection::lost_connection(std::string_view op, const std::string& what) const {
  return PeerLostError(cat(op, ": lost the connection to ", peer_, " (", what,
                           "). The process hosting the store (rank 0 or the launcher) has probably exited or "
                           "crashed; look at its output first."));
}

TimeoutError StoreConnection::get_timed_out(const std::string& key, std::chrono::milliseconds timeout) const {
  return TimeoutError(cat("store get(", quote(key), ") timed out after ", format_duration(timeout),
                          " waiting for the key at ", where_,
                          ". The process that should set it has not: it may have failed, be slower than the "
                          "timeout, or belong to a different world size."));
}

std::vector<std::string> StoreConnection::multi_get(const std::vector<std::string>&, std::chrono::milliseconds) {
  throw std::logic_error("StoreConnection::multi_get called on a protocol without it (see has_multi_get)");
}

TimeoutError StoreConnection::wait_timed_out(const std::vector<std::string>& missing, std::chrono::milliseconds timeout,
                                             std::string_view op) const {
  std::vector<std::string> quoted;
  for (const auto& key : missing) quoted.push_back(quote(key));
  return TimeoutError(cat("store ", op, " timed out after ", format_duration(timeout), " at ", where_,
                          "; still missing: ", join(quoted), ". The processes that should set them have not."));
}

}  // namespace ddp::detail

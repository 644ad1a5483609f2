#include "util/error_kind.h"

#include "ddp/error.h"

namespace ddp::detail {

ErrorInfo classify(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    return {ErrorKind::InvalidArgument, e.what()};
  } catch (const TimeoutError& e) {
    return {ErrorKind::Timeout, e.what()};
  } catch (const PeerLostError& e) {
    return {ErrorKind::PeerLost, e.what()};
  } catch (const MismatchError& e) {
    return {ErrorKind::Mismatch, e.what()};
  } catch (const IOError& e) {
    return {ErrorKind::IO, e.what()};
  } catch (const std::exception& e) {
    return {ErrorKind::Other, e.what()};
  } catch (...) {
    return {ErrorKind::Other, "an unknown exception"};
  }
}

std::exception_ptr make_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return std::make_exception_ptr(InvalidArgument(message));
    case ErrorKind::Timeout: return std::make_exception_ptr(TimeoutError(message));
    case ErrorKind::PeerLost: return std::make_exception_ptr(PeerLostError(message));
    case ErrorKind::Mismatch: return std::make_exception_ptr(MismatchError(message));
    case ErrorKind::IO: return std::make_exception_ptr(IOError(message));
    case ErrorKind::Other: break;
  }
  return std::make_exception_ptr(Error(message));
}

void throw_error(ErrorKind kind, const std::string& message) { std::rethrow_exception(make_error(kind, message)); }

void rethrow_with_context(const std::string& context) {
  const ErrorInfo info = classify(std::current_exception());
  throw_error(info.kind, context + ": " + info.message);
}

}  // namespace ddp::detail

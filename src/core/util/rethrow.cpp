#include "util/rethrow.h"

#include "ddp/error.h"

namespace ddp::detail {

void rethrow_with_context(const std::string& context) {
  const std::string prefix = context + ": ";
  try {
    throw;
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + e.what());
  } catch (const PeerLostError& e) {
    throw PeerLostError(prefix + e.what());
  } catch (const MismatchError& e) {
    throw MismatchError(prefix + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what());
  } catch (const IOError& e) {
    throw IOError(prefix + e.what());
  } catch (const std::exception& e) {
    throw Error(prefix + e.what());
  }
}

}  // namespace ddp::detail

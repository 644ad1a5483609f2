#include "gloo/termination.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <regex>

#include "flight/recorder.h"
#include "flight/last_words.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::terminate_handler g_previous = nullptr;

// Gloo's text when the exception is one of Gloo's.
std::optional<std::string> gloo_what(const std::exception_ptr& ex) {
  if (!ex) return std::nullopt;
  try {
    std::rethrow_exception(ex);
  } catch (const gloo::EnforceNotMet& e) {
    return std::string(e.what());
  } catch (const gloo::Exception& e) {
    return std::string(e.what());
  } catch (...) {
  }
  return std::nullopt;
}

// What this process's groups are doing: their ops issued or started, not ended.
std::vector<std::string> ops_in_flight() {
  std::vector<std::string> ops;
  const FlightDump dump = FlightRecorder::instance().snapshot("");
  for (const auto& entry : dump.entries) {
    if (entry.state != FlightState::Issued && entry.state != FlightState::Started) continue;
    const auto& group = dump.groups.at(entry.group);
    ops.push_back(cat(describe(to_op(entry)), " in group '", group.name, "' on rank ", group.rank));
  }
  return ops;
}

void on_terminate() {
  if (auto what = gloo_what(std::current_exception())) {
    std::vector<std::string> in_flight;
    try {
      in_flight = ops_in_flight();
    } catch (...) {
    }
    say_last_words(explain_gloo_termination(*what, in_flight), std::chrono::seconds(3));
  }
  if (g_previous) g_previous();
  std::abort();
}

}  // namespace

std::string explain_gloo_termination(std::string_view what, const std::vector<std::string>& in_flight) {
  const std::string ops = in_flight.empty() ? std::string("no operation is in flight on this rank")
                                            : cat("in flight on this rank: ", join(in_flight, "; "));
  std::match_results<std::string_view::const_iterator> m;
  static const std::regex overflow(R"(op\.preamble\.length <= op\.nbytes\. (\d+) vs (\d+))");
  if (std::regex_search(what.begin(), what.end(), m, overflow)) {
    return cat("Gloo's network thread ends this process: a peer sent a message of ", m[1].str(),
               " bytes for a receive of ", m[2].str(),
               " bytes. The ranks called collectives of different sizes or "
               "types (",
               ops,
               "; a peer's error names what it called). Every rank must call the same collectives, "
               "with the same sizes and types, in the same order: for uneven inputs use ddp::join. With DDP_DEBUG=1 "
               "every rank compares its call with the others' before any data moves and fails naming each "
               "rank's call, instead of ending the process. (Gloo: ",
               what, ")");
  }
  return cat("Gloo's network thread ends this process: ", what, " (", ops, ")");
}

void explain_gloo_terminations() {
  static std::once_flag once;
  std::call_once(once, [] { g_previous = std::set_terminate(on_terminate); });
}

}  // namespace ddp::detail

#include "ddp/torch/straggler_report.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "util/strings.h"

namespace ddp {
namespace {

struct Part {
  const char* name;
  const char* hint;
  double RankStepTimes::*seconds;
};

constexpr std::array<Part, 3> kParts{{
    {"forward", "", &RankStepTimes::forward},
    {"backward", "", &RankStepTimes::backward},
    {"outside DDP", " (data loading, the optimizer?)", &RankStepTimes::outside},
}};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double per_step(const RankStepTimes& r, double RankStepTimes::*part) { return r.*part / static_cast<double>(r.steps); }

std::string fixed(const char* format, double value) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string who(const RankStepTimes& r) {
  return detail::cat("rank ", r.rank, r.host.empty() ? std::string() : detail::cat(" (host ", r.host, ")"));
}

}  // namespace

double RankStepTimes::own_per_step() const {
  return steps > 0 ? (forward + backward + outside) / static_cast<double>(steps) : 0;
}

StragglerReport make_straggler_report(std::vector<RankStepTimes> ranks) {
  StragglerReport report;
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  report.ranks = std::move(ranks);
  std::vector<const RankStepTimes*> timed;
  for (const auto& r : report.ranks) {
    if (r.steps > 0) timed.push_back(&r);
  }
  if (timed.empty()) {
    report.text = "no straggler report yet: no rank has finished a synchronized step since the last report";
    return report;
  }
  report.steps =
      (*std::min_element(timed.begin(), timed.end(), [](auto* a, auto* b) { return a->steps < b->steps; }))->steps;
  const RankStepTimes& slow = **std::max_element(
      timed.begin(), timed.end(), [](auto* a, auto* b) { return a->own_per_step() < b->own_per_step(); });
  report.straggler = slow.rank;
  // Against the other ranks' median: with two ranks, the other rank (the median of both would
  // be their mean, which no rank can be twice as slow as).
  std::vector<const RankStepTimes*> others;
  for (const auto* r : timed) {
    if (r != &slow) others.push_back(r);
  }
  if (others.empty()) others.push_back(&slow);
  std::vector<double> own;
  for (const auto* r : others) own.push_back(r->own_per_step());
  const double typical = median(own);
  report.ratio = typical > 0 ? slow.own_per_step() / typical : 1;

  // The part in which the straggler exceeds the other ranks' median the most.
  const Part* worst = &kParts.back();
  double worst_excess = -1;
  for (const Part& part : kParts) {
    std::vector<double> values;
    for (const auto* r : others) values.push_back(per_step(*r, part.seconds));
    const double excess = per_step(slow, part.seconds) - median(values);
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = &part;
    }
  }
  report.part = worst->name;
  report.part_share = slow.own_per_step() > 0 ? per_step(slow, worst->seconds) / slow.own_per_step() : 0;

  const std::string ms = fixed("%.1f ms", 1e3 * slow.own_per_step());
  if (timed.size() < 2 || report.ratio < 1.1) {
    report.text =
        detail::cat("no straggler over ", report.steps, " steps: the slowest rank, ", who(slow), ", takes ",
                    fixed("%.2fx", report.ratio), " the other ranks' median time per step (", ms, " without waiting)");
  } else {
    report.text = detail::cat(who(slow), " is the straggler: its step takes ", fixed("%.2fx", report.ratio),
                              " the other ranks' median (", ms, " without waiting, over ", report.steps, " steps), ",
                              fixed("%.0f%%", 100 * report.part_share), " of it ", worst->name, worst->hint);
  }
  return report;
}

}  // namespace ddp

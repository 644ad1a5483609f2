#include "state_dict/load_plan.h"

#include <algorithm>
#include <map>

#include "state_dict/weights.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

constexpr std::string_view kDdpPrefix = "module.";

bool starts_with(std::string_view s, std::string_view head) { return s.substr(0, head.size()) == head; }

}  // namespace

LoadPlan plan_load(const std::vector<TensorInfo>& module, const std::vector<TensorInfo>& file,
                   const std::string& prefix) {
  LoadPlan plan;
  auto& report = plan.report;
  // The file's keys as the module would name them, and where each came from.
  std::vector<std::pair<std::string, std::size_t>> keys;
  std::size_t outside = 0;
  for (std::size_t i = 0; i < file.size(); ++i) {
    if (!starts_with(file[i].name, prefix)) {
      ++outside;
      continue;
    }
    keys.emplace_back(file[i].name.substr(prefix.size()), i);
  }
  if (!prefix.empty()) {
    if (keys.empty() && !file.empty()) {
      report.notes.push_back(cat("no key of the file begins with the prefix ", quote(prefix), " (the first is ",
                                 quote(file.front().name), ")"));
    } else if (outside > 0) {
      report.notes.push_back(
          cat("ignored ", outside, " keys of the file that do not begin with the prefix ", quote(prefix)));
    }
  }
  const bool all_ddp = !keys.empty() && std::all_of(keys.begin(), keys.end(),
                                                    [](const auto& k) { return starts_with(k.first, kDdpPrefix); });
  const bool module_ddp =
      std::any_of(module.begin(), module.end(), [](const auto& m) { return starts_with(m.name, kDdpPrefix); });
  if (all_ddp && !module_ddp) {
    for (auto& k : keys) k.first.erase(0, kDdpPrefix.size());
    report.notes.push_back(
        "stripped DDP's \"module.\" prefix from the file's keys (a DistributedDataParallel model's state dict)");
  }

  std::map<std::string, std::size_t> in_file;
  for (std::size_t k = 0; k < keys.size(); ++k) in_file.emplace(keys[k].first, k);
  std::vector<bool> used(keys.size(), false);
  for (std::size_t m = 0; m < module.size(); ++m) {
    const auto it = in_file.find(module[m].name);
    if (it == in_file.end()) {
      report.missing_keys.push_back(module[m].name);
      continue;
    }
    used[it->second] = true;
    const auto& source = file[keys[it->second].second];
    if (source.sizes != module[m].sizes) {
      report.shape_mismatches.push_back({module[m].name, source.sizes, module[m].sizes});
      continue;
    }
    if (source.dtype != module[m].dtype) {
      report.notes.push_back(
          cat(quote(module[m].name), ": ", source.dtype, " in the file, converted to ", module[m].dtype));
    }
    plan.copies.emplace_back(m, keys[it->second].second);
  }
  for (std::size_t k = 0; k < keys.size(); ++k) {
    if (!used[k]) report.unexpected_keys.push_back(keys[k].first);
  }
  return plan;
}

}  // namespace ddp::detail

#include "cli/slurm.h"

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using detail::quote;

namespace {

constexpr std::size_t kMaxHosts = 1'000'000;

[[noreturn]] void malformed(std::string_view list, const std::string& why) {
  throw InvalidArgument(cat("the Slurm node list ", quote(list, 200), " is malformed: ", why,
                            ". Expected e.g. node[01-04,07],gpu5; pass --master_addr to skip reading it."));
}

// Splits at commas outside brackets.
std::vector<std::string_view> split_top_level(std::string_view list) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      if (++depth > 1) malformed(list, "nested brackets");
    } else if (list[i] == ']') {
      if (--depth < 0) malformed(list, "a ']' without '['");
    }
  }
  if (depth != 0) malformed(list, "a '[' without ']'");
  return items;
}

// "01-04,07" -> 01 02 03 04 07.
std::vector<std::string> expand_ranges(std::string_view list, std::string_view ranges) {
  std::vector<std::string> values;
  std::size_t start = 0;
  while (start <= ranges.size()) {
    const std::size_t comma = std::min(ranges.find(',', start), ranges.size());
    const std::string_view item = ranges.substr(start, comma - start);
    const std::size_t dash = item.find('-');
    const std::string_view low_text = item.substr(0, dash);
    const std::string_view high_text = dash == std::string_view::npos ? low_text : item.substr(dash + 1);
    auto low = detail::parse_int(low_text);
    auto high = detail::parse_int(high_text);
    if (low_text.empty() || !low || !high || *low < 0 || low_text[0] == '+' || high_text[0] == '+') {
      malformed(list, cat("[", ranges, "] holds ", quote(item), ", which is not a number or a range A-B"));
    }
    if (*high < *low) malformed(list, cat("the range ", item, " runs backwards"));
    if (static_cast<std::size_t>(*high - *low) >= kMaxHosts) malformed(list, "it names more than a million hosts");
    const std::size_t width = low_text.size();
    for (std::int64_t n = *low; n <= *high; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      values.push_back(std::move(digits));
    }
    start = comma + 1;
  }
  return values;
}

void expand_item(std::string_view list, std::string_view item, std::string prefix, std::vector<std::string>& out) {
  const std::size_t open = item.find('[');
  if (open == std::string_view::npos) {
    out.push_back(prefix + std::string(item));
    if (out.size() > kMaxHosts) malformed(list, "it names more than a million hosts");
    return;
  }
  const std::size_t close = item.find(']', open);
  const auto values = expand_ranges(list, item.substr(open + 1, close - open - 1));
  prefix += item.substr(0, open);
  for (const auto& value : values) expand_item(list, item.substr(close + 1), prefix + value, out);
}

std::optional<int> read_count(const EnvLookup& env, const std::string& name, int min_value) {
  auto text = env(name);
  if (!text || text->empty()) return std::nullopt;
  // Slurm writes SLURM_NNODES as "2"; SLURM_JOB_NUM_NODES likewise.
  auto value = detail::parse_int(*text);
  if (!value || *value < min_value || *value > 1'000'000) {
    throw InvalidArgument(cat("the Slurm variable ", name, "=", quote(*text), " is not a number ", min_value,
                              " or more. Outside a Slurm job, unset it; inside one, pass --nnodes and --node_rank."));
  }
  return static_cast<int>(*value);
}

}  // namespace

std::vector<std::string> expand_nodelist(std::string_view list) {
  if (list.empty()) malformed(list, "it is empty");
  std::vector<std::string> hosts;
  for (std::string_view item : split_top_level(list)) {
    if (item.empty()) malformed(list, "it has an empty entry");
    if (item.front() == '[') malformed(list, cat("the entry ", quote(item), " has no host name before '['"));
    expand_item(list, item, {}, hosts);
  }
  return hosts;
}

SlurmInfo read_slurm(const EnvLookup& env) {
  SlurmInfo info;
  info.nnodes = read_count(env, "SLURM_NNODES", 1);
  if (!info.nnodes) info.nnodes = read_count(env, "SLURM_JOB_NUM_NODES", 1);
  info.node_id = read_count(env, "SLURM_NODEID", 0);
  auto list = env("SLURM_JOB_NODELIST");
  if (!list || list->empty()) list = env("SLURM_NODELIST");
  if (list && !list->empty()) info.first_host = expand_nodelist(*list).front();
  return info;
}

}  // namespace ddp::launcher

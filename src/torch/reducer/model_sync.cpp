#include "reducer/model_sync.h"

#include <ATen/ATen.h>

#include <map>
#include <sstream>

#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::string describe(const std::string& name, const at::Tensor& p) {
  std::ostringstream out;
  out << "'" << name << "' " << p.sizes() << " " << p.scalar_type();
  return out.str();
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

void check_same_parameters(const std::shared_ptr<ProcessGroup>& group, const std::vector<std::string>& names,
                           const std::vector<at::Tensor>& params) {
  if (group->size() == 1) return;
  const at::Device device = params.empty() ? at::Device(at::kCPU) : params.front().device();
  std::string mine;
  for (std::size_t i = 0; i < params.size(); ++i) mine += describe(names[i], params[i]) + "\n";
  // Cheap first: do the hashes agree? (MIN == MAX over the ranks)
  const auto h = static_cast<std::int64_t>(fnv1a(mine) >> 1);
  at::Tensor lo = at::full({1}, h, at::kLong).to(device), hi = lo.clone();
  all_reduce(lo, ReduceOp::MIN, group);
  all_reduce(hi, ReduceOp::MAX, group);
  if (lo.item<std::int64_t>() == hi.item<std::int64_t>()) return;
  // They differ: gather every rank's description to say where.
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(mine.size()), at::kLong).to(device);
  all_reduce(length, ReduceOp::MAX, group);
  const auto longest = length.item<std::int64_t>();
  at::Tensor padded = at::zeros({longest}, at::kByte);
  std::memcpy(padded.data_ptr(), mine.data(), mine.size());
  padded = padded.to(device);
  at::Tensor all = at::empty({longest * group->size()}, padded.options());
  all_gather_into_tensor(all, padded, group);
  all = all.cpu();
  std::vector<std::vector<std::string>> per_rank;
  for (int r = 0; r < group->size(); ++r) {
    const char* start = static_cast<const char*>(all.data_ptr()) + r * longest;
    per_rank.push_back(split_lines(std::string(start, strnlen(start, static_cast<std::size_t>(longest)))));
  }
  std::size_t most = 0;
  for (const auto& lines : per_rank) most = std::max(most, lines.size());
  for (std::size_t i = 0; i < most; ++i) {
    bool same = true;
    for (const auto& lines : per_rank) same = same && i < lines.size() && lines[i] == per_rank[0][i];
    if (same) continue;
    std::vector<std::string> where;
    for (int r = 0; r < group->size(); ++r) {
      where.push_back(cat("rank ", r, ": ",
                          i < per_rank[r].size()
                              ? per_rank[r][i]
                              : "(no such parameter: it has " + std::to_string(per_rank[r].size()) + " parameters)"));
    }
    throw MismatchError(cat("DistributedDataParallel: the model differs across ranks at parameter ", i, " (",
                            join(where, "; "),
                            "). Every rank must construct the same model, with the same parameters in the same "
                            "order, before wrapping it."));
  }
}

void broadcast_coalesced(const std::shared_ptr<ProcessGroup>& group, const std::vector<at::Tensor>& tensors, int root) {
  if (group->size() == 1 || tensors.empty()) return;
  std::map<std::pair<int, int>, std::vector<at::Tensor>> groups;  // (dtype, device) in first-seen order below
  std::vector<std::pair<int, int>> keys;
  for (const auto& t : tensors) {
    std::pair<int, int> key{static_cast<int>(t.scalar_type()), t.is_cuda() ? t.get_device() : -1};
    if (!groups.count(key)) keys.push_back(key);
    groups[key].push_back(t);
  }
  for (const auto& key : keys) {
    auto& members = groups[key];
    std::vector<at::Tensor> flat;
    for (const auto& t : members) flat.push_back(t.detach().reshape({-1}));
    at::Tensor buffer = at::cat(flat);
    broadcast(buffer, root, group);
    std::int64_t offset = 0;
    for (auto& t : members) {
      t.detach().copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

}  // namespace ddp::detail

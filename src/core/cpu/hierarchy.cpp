#include "cpu/hierarchy.h"

#include <cstring>
#include <optional>

#include "cpu/pipeline.h"
#include "ddp/error.h"
#include "reduce/reduce.h"
#include "util/buffers.h"
#include "util/strings.h"

namespace ddp::detail {

Hierarchy::Hierarchy(shm::Plan plan, shm::HostCollectives* host, Backend* across, Thresholds thresholds)
    : plan_(std::move(plan)),
      striped_(shm::equal_hosts(plan_) && plan_.my_host().size() > 1),
      host_(host),
      across_(across),
      thresholds_(thresholds) {
  std::size_t ranks = 0;
  for (const auto& h : plan_.hosts) ranks += h.size();
  host_of_.resize(ranks);
  local_of_.resize(ranks);
  for (std::size_t h = 0; h < plan_.hosts.size(); ++h) {
    for (std::size_t l = 0; l < plan_.hosts[h].size(); ++l) {
      host_of_[static_cast<std::size_t>(plan_.hosts[h][l])] = static_cast<int>(h);
      local_of_[static_cast<std::size_t>(plan_.hosts[h][l])] = static_cast<int>(l);
    }
  }
}

template <typename First, typename Second, typename Third>
void Hierarchy::pipelined(const Buffer& data, First first, Second second, Third third) {
  const std::size_t chunks = chunk_count(data.count, element_size(data.dtype), thresholds_.chunk_bytes);
  const auto chunk = [&](std::size_t k) {
    const ChunkRange r = chunk_range(data.count, chunks, k);
    return part(data, r.begin, r.end - r.begin);
  };
  run_pipelined(chunks, [&](std::size_t k) { first(chunk(k)); }, [&](std::size_t k) { second(chunk(k)); },
                [&](std::size_t k) { third(chunk(k)); });
}

void Hierarchy::all_reduce(Buffer data, ReduceOp op, Deadline deadline) {
  if (stripes(data)) {
    // Each rank carries its own share across the network, in parallel with the host's others.
    return pipelined(data, [&](const Buffer& c) { host_->reduce_share(c, op, deadline); },
                     [&](const Buffer& c) {
                       const auto s = host_->share(c.count, c.dtype, plan_.local);
                       if (s.length > 0) across_->all_reduce(part(c, s.begin, s.length), op, deadline);
                     },
                     [&](const Buffer& c) { host_->gather_shares(c, deadline); });
  }
  // Through the hosts' first ranks (when striped, lane 0 is theirs).
  const bool leader = plan_.local == 0;
  pipelined(data, [&](const Buffer& c) { if (host_) host_->reduce(c, op, 0, deadline); },
            [&](const Buffer& c) { if (leader) across_->all_reduce(c, op, deadline); },
            [&](const Buffer& c) { if (host_) host_->broadcast(c, 0, deadline); });
}

void Hierarchy::broadcast(Buffer data, int root, Deadline deadline) {
  const int root_host = host_of_[static_cast<std::size_t>(root)];
  const bool at_root = plan_.host == root_host, striped = stripes(data), leader = plan_.local == 0;
  pipelined(data,
            [&](const Buffer& c) {
              if (at_root && host_) host_->broadcast(c, local_of_[static_cast<std::size_t>(root)], deadline);
            },
            [&](const Buffer& c) {
              if (striped) {
                const auto s = host_->share(c.count, c.dtype, plan_.local);
                if (s.length > 0) across_->broadcast(part(c, s.begin, s.length), root_host, deadline);
              } else if (leader) {
                across_->broadcast(c, root_host, deadline);
              }
            },
            [&](const Buffer& c) {
              if (at_root || !host_) return;
              if (striped) {
                host_->gather_shares(c, deadline, "broadcast");
              } else {
                host_->broadcast(c, 0, deadline);
              }
            });
}

void Hierarchy::all_gather(Buffer input, Buffer output, Deadline deadline) {
  const std::size_t hosts = plan_.hosts.size(), locals = plan_.hosts[0].size(), c = input.count;
  const std::size_t block = input.bytes();
  // The lane's inputs in host order, then every lane's: block (l, h) is rank hosts[h][l]'s input.
  std::vector<char> lane(hosts * block), all(locals * hosts * block);
  across_->all_gather(input, over(lane, input, hosts * c), deadline);
  host_->all_gather(over(lane, input, hosts * c), over(all, input, locals * hosts * c), deadline);
  char* out = static_cast<char*>(output.data);
  for (std::size_t l = 0; l < locals; ++l) {
    for (std::size_t h = 0; h < hosts; ++h) {
      std::memcpy(out + static_cast<std::size_t>(plan_.hosts[h][l]) * block, all.data() + (l * hosts + h) * block, block);
    }
  }
}

void Hierarchy::reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) {
  const std::size_t hosts = plan_.hosts.size(), locals = plan_.hosts[0].size(), c = output.count;
  const std::size_t block = output.bytes();
  // Blocks reordered lane by lane, so that the host's reduce-scatter leaves rank l its lane's.
  std::vector<char> by_lane(locals * hosts * block), lane(hosts * block);
  const char* in = static_cast<const char*>(input.data);
  for (std::size_t l = 0; l < locals; ++l) {
    for (std::size_t h = 0; h < hosts; ++h) {
      std::memcpy(by_lane.data() + (l * hosts + h) * block, in + static_cast<std::size_t>(plan_.hosts[h][l]) * block, block);
    }
  }
  host_->reduce_scatter(over(by_lane, output, locals * hosts * c), over(lane, output, hosts * c), op, deadline);
  ring_reduce_scatter(*across_, over(lane, output, hosts * c), output, op, deadline);
}

std::string encode_thresholds(const Hierarchy::Thresholds& t) { return cat(t.stripe_bytes, " ", t.chunk_bytes); }

Hierarchy::Thresholds decode_thresholds(const std::string& text) {
  const auto space = text.find(' ');
  const auto stripe = parse_int(text.substr(0, space));
  const auto chunk = space == std::string::npos ? std::nullopt : parse_int(text.substr(space + 1));
  if (!stripe || !chunk || *stripe < 0 || *chunk < 0) {
    throw MismatchError(cat("group rank 0 published the hierarchical collectives' thresholds as ", quote(text),
                            ", not as two sizes: do all ranks run the same ddp build?"));
  }
  return {static_cast<std::size_t>(*stripe), static_cast<std::size_t>(*chunk)};
}

void ring_reduce_scatter(Backend& group, Buffer input, Buffer output, ReduceOp op, Backend::Deadline deadline) {
  const int n = group.size(), r = group.rank();
  const std::size_t block = output.bytes();
  std::vector<char> acc = copy_of(input);
  std::vector<char> incoming(block);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Step s sends the block that has s + 1 contributions on to the next rank and adds this rank's
  // own to the one that arrives; after n - 1 steps block r has all n.
  for (int s = 0; s + 1 < n; ++s) {
    const auto send_block = static_cast<std::size_t>((r - s - 1 + 2 * n) % n);
    const auto recv_block = static_cast<std::size_t>((r - s - 2 + 2 * n) % n);
    auto received = group.post_recv(over(incoming, output, output.count), prev, static_cast<std::uint32_t>(s));
    auto sent = group.post_send(part(over(acc, output, n * output.count), send_block * output.count, output.count), next,
                                static_cast<std::uint32_t>(s));
    received(deadline);
    sent(deadline);
    char* into = acc.data() + recv_block * block;
    reduce(into, into, incoming.data(), output.count, output.dtype, op);
  }
  std::memcpy(output.data, acc.data() + static_cast<std::size_t>(r) * block, block);
}

}  // namespace ddp::detail

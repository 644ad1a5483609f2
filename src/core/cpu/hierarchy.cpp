#include "cpu/hierarchy.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "cpu/pipeline.h"
#include "ddp/error.h"
#include "reduce/reduce.h"
#include "util/buffers.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace

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

std::size_t Hierarchy::gather_chunks(std::size_t count, DataType dtype) const {
  // At least one chunk, so that every rank takes the same steps (and checks) for an empty block.
  const std::size_t world = host_of_.size();
  return std::max<std::size_t>(1, chunk_count(count, element_size(dtype) * world, thresholds_.gather_chunk_bytes));
}

char* Hierarchy::scratch(std::size_t bytes, Storage& once) {
  // Kept between ops while chunk-sized: fresh pages cost a fault each (about 10 ms per 32 MiB
  // here), more than a chunk's shared-memory work.
  Storage& use = thresholds_.gather_chunk_bytes > 0 && bytes <= 3 * thresholds_.gather_chunk_bytes ? scratch_ : once;
  if (use.bytes < bytes) {
    use.data.reset();
    use.data.reset(new char[bytes]);
    use.bytes = bytes;
  }
  return use.data.get();
}

void Hierarchy::all_gather(Buffer input, Buffer output, Deadline deadline) {
  const std::size_t hosts = plan_.hosts.size(), locals = plan_.hosts[0].size(), c = input.count;
  const std::size_t e = element_size(input.dtype), block = input.bytes(), chunks = gather_chunks(c, input.dtype);
  const std::size_t most = chunk_range(c, chunks, 0).end;  // the first chunk is the longest
  // Per chunk of `length` elements, in slot k % kSlots: the lane's pieces in host order
  // (`lane`), then every lane's (`all`), so that piece (l, h) is rank hosts[h][l]'s.
  Storage once;
  char* slots = scratch(kSlots * (hosts + locals * hosts) * most * e, once);
  const auto lane = [&](std::size_t k) { return slots + (k % kSlots) * (hosts + locals * hosts) * most * e; };
  char* out = static_cast<char*>(output.data);
  run_pipelined(
      chunks, [](std::size_t) {},
      [&](std::size_t k) {
        const ChunkRange r = chunk_range(c, chunks, k);
        const std::size_t length = r.end - r.begin;
        across_->all_gather(part(input, r.begin, length), over(lane(k), input, hosts * length), deadline);
      },
      [&](std::size_t k) {
        const ChunkRange r = chunk_range(c, chunks, k);
        const std::size_t length = r.end - r.begin;
        char* all = lane(k) + hosts * most * e;
        host_->all_gather(over(lane(k), input, hosts * length), over(all, input, locals * hosts * length), deadline);
        for (std::size_t l = 0; l < locals; ++l) {
          for (std::size_t h = 0; h < hosts; ++h) {
            copy(out + static_cast<std::size_t>(plan_.hosts[h][l]) * block + r.begin * e,
                 all + (l * hosts + h) * length * e, length * e);
          }
        }
      },
      kSlots);
}

void Hierarchy::reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) {
  const std::size_t hosts = plan_.hosts.size(), locals = plan_.hosts[0].size(), c = output.count;
  const std::size_t e = element_size(output.dtype), block = output.bytes(), chunks = gather_chunks(c, output.dtype);
  const std::size_t most = chunk_range(c, chunks, 0).end;
  // Per chunk, the blocks' pieces reordered lane by lane (`ordered`, used by the host's
  // reduce-scatter alone), so that it leaves rank l its lane's pieces (in slot k % kSlots), which
  // the lane's ring reduce-scatters across the hosts while the host works on the next chunk.
  Storage once;
  char* ordered = scratch((locals * hosts + kSlots * hosts) * most * e, once);
  const auto lane = [&](std::size_t k) { return ordered + (locals * hosts + (k % kSlots) * hosts) * most * e; };
  const char* in = static_cast<const char*>(input.data);
  run_pipelined(
      chunks,
      [&](std::size_t k) {
        const ChunkRange r = chunk_range(c, chunks, k);
        const std::size_t length = r.end - r.begin;
        for (std::size_t l = 0; l < locals; ++l) {
          for (std::size_t h = 0; h < hosts; ++h) {
            copy(ordered + (l * hosts + h) * length * e,
                 in + static_cast<std::size_t>(plan_.hosts[h][l]) * block + r.begin * e, length * e);
          }
        }
        host_->reduce_scatter(over(ordered, output, locals * hosts * length), over(lane(k), output, hosts * length), op,
                              deadline);
      },
      [&](std::size_t k) {
        const ChunkRange r = chunk_range(c, chunks, k);
        const std::size_t length = r.end - r.begin;
        ring_reduce_scatter(*across_, over(lane(k), output, hosts * length), part(output, r.begin, length), op,
                            deadline);
      },
      [](std::size_t) {}, kSlots);
}

std::string encode_thresholds(const Hierarchy::Thresholds& t) {
  return cat(t.stripe_bytes, " ", t.chunk_bytes, " ", t.gather_chunk_bytes);
}

Hierarchy::Thresholds decode_thresholds(const std::string& text) {
  std::size_t sizes[3] = {}, at = 0, n = 0;
  for (; n < 3 && at <= text.size(); ++n) {
    const auto space = std::min(text.find(' ', at), text.size());
    const auto value = parse_int(text.substr(at, space - at));
    if (!value || *value < 0) break;
    sizes[n] = static_cast<std::size_t>(*value);
    at = space + 1;
  }
  if (n < 3 || at <= text.size()) {
    throw MismatchError(cat("group rank 0 published the hierarchical collectives' thresholds as ", quote(text),
                            ", not as three sizes: do all ranks run the same ddp build?"));
  }
  return {sizes[0], sizes[1], sizes[2]};
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

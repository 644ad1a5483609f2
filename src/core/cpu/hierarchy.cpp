#include "cpu/hierarchy.h"

#include <algorithm>
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
    first_.push_back(h == 0 ? 0 : first_[h - 1] + plan_.hosts[h - 1].size());
  }
}

template <typename First, typename Second, typename Third>
void Hierarchy::pipelined(const Buffer& data, First first, Second second, Third third) {
  const std::size_t chunks = chunk_count(data.count, element_size(data.dtype), thresholds_.chunk_bytes);
  const auto chunk = [&](std::size_t k) {
    const ChunkRange r = chunk_range(data.count, chunks, k);
    return part(data, r.begin, r.end - r.begin);
  };
  run_pipelined(
      chunks, [&](std::size_t k) { first(chunk(k)); }, [&](std::size_t k) { second(chunk(k)); },
      [&](std::size_t k) { third(chunk(k)); });
}

void Hierarchy::all_reduce(Buffer data, ReduceOp op, Deadline deadline) {
  if (stripes(data)) {
    // Each rank carries its own share across the network, in parallel with the host's others.
    return pipelined(
        data, [&](const Buffer& c) { host_->reduce_share(c, op, deadline); },
        [&](const Buffer& c) {
      const auto s = host_->share(c.count, c.dtype, plan_.local);
      if (s.length > 0) across_->all_reduce(part(c, s.begin, s.length), op, deadline);
        },
        [&](const Buffer& c) { host_->gather_shares(c, deadline); });
  }
  // Through the hosts' first ranks (when striped, lane 0 is theirs).
  const bool leader = plan_.local == 0;
  pipelined(
      data,
      [&](const Buffer& c) {
    if (host_) host_->reduce(c, op, 0, deadline);
      },
      [&](const Buffer& c) {
    if (leader) across_->all_reduce(c, op, deadline);
  },
      [&](const Buffer& c) {
    if (host_) host_->broadcast(c, 0, deadline);
      });
}

void Hierarchy::broadcast(Buffer data, int root, Deadline deadline) {
  const int root_host = host_of_[static_cast<std::size_t>(root)];
  const bool at_root = plan_.host == root_host, striped = stripes(data), leader = plan_.local == 0;
  pipelined(
      data,
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

template <typename First, typename Second, typename Third>
void Hierarchy::pipelined_pieces(std::size_t count, std::size_t chunks, First first, Second second, Third third) {
  const auto stage = [&](auto& f) {
    return [&](std::size_t k) {
      const ChunkRange r = chunk_range(count, chunks, k);
      f(k, r.begin, r.end - r.begin);
    };
  };
  run_pipelined(chunks, stage(first), stage(second), stage(third), kSlots);
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
    use.data.reset();  // before the new one: never both at once
    use.data.reset(new char[bytes]);
    use.bytes = bytes;
  }
  return use.data.get();
}

void Hierarchy::all_gather(Buffer input, Buffer output, Deadline deadline) {
  if (!striped_ || output.bytes() < thresholds_.gather_stripe_bytes) return leaders_all_gather(input, output, deadline);
  const std::size_t hosts = plan_.hosts.size(), locals = plan_.hosts[0].size(), c = input.count;
  const std::size_t e = element_size(input.dtype), block = input.bytes(), chunks = gather_chunks(c, input.dtype);
  const std::size_t most = chunk_range(c, chunks, 0).end;  // the first chunk is the longest
  // Per chunk of `length` elements, in slot k % kSlots: the lane's pieces in host order
  // (`lane`), then every lane's (`all`), so that piece (l, h) is rank hosts[h][l]'s.
  Storage once;
  char* slots = scratch(kSlots * (hosts + locals * hosts) * most * e, once);
  const auto lane = [&](std::size_t k) { return slots + (k % kSlots) * (hosts + locals * hosts) * most * e; };
  char* out = static_cast<char*>(output.data);
  pipelined_pieces(
      c, chunks, [](std::size_t, std::size_t, std::size_t) {},
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    across_->all_gather(part(input, begin, length), over(lane(k), input, hosts * length), deadline);
      },
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    char* all = lane(k) + hosts * most * e;
    host_->all_gather(over(lane(k), input, hosts * length), over(all, input, locals * hosts * length), deadline);
    for_each_piece(Order::ByLane, [&](std::size_t piece, std::size_t rank) {
      copy_bytes(out + rank * block + begin * e, all + piece * length * e, length * e);
    });
  });
}

void Hierarchy::reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) {
  if (!striped_ || input.bytes() < thresholds_.gather_stripe_bytes) {
    return leaders_reduce_scatter(input, output, op, deadline);
  }
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
  pipelined_pieces(
      c, chunks,
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    for_each_piece(Order::ByLane, [&](std::size_t piece, std::size_t rank) {
      copy_bytes(ordered + piece * length * e, in + rank * block + begin * e, length * e);
    });
    host_->reduce_scatter(over(ordered, output, locals * hosts * length), over(lane(k), output, hosts * length), op,
                          deadline);
      },
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    const std::vector<std::size_t> counts(hosts, length);
    ring_reduce_scatter(*across_, over(lane(k), output, hosts * length), counts, op, deadline);
    copy_bytes(static_cast<char*>(output.data) + begin * e, lane(k) + across_->rank() * length * e, length * e);
  },
      [](std::size_t, std::size_t, std::size_t) {});
}

std::vector<std::size_t> Hierarchy::host_counts(std::size_t length) const {
  std::vector<std::size_t> counts;
  for (const auto& h : plan_.hosts) counts.push_back(h.size() * length);
  return counts;
}

void Hierarchy::leaders_all_gather(Buffer input, Buffer output, Deadline deadline) {
  const std::size_t world = host_of_.size(), c = input.count, e = element_size(input.dtype), block = input.bytes();
  const std::size_t chunks = gather_chunks(c, input.dtype), most = chunk_range(c, chunks, 0).end;
  const std::size_t mine = plan_.my_host().size();
  // Per chunk, in slot k % kSlots: every rank's piece, host after host (rank hosts[h][l]'s at
  // index first_[h] + l). The host gathers its pieces there, the leaders pass the hosts' runs
  // round their ring, and each host's leader broadcasts the whole slot to its host.
  Storage once;
  char* slots = scratch(kSlots * world * most * e, once);
  const auto slot = [&](std::size_t k) { return slots + (k % kSlots) * world * most * e; };
  char* out = static_cast<char*>(output.data);
  pipelined_pieces(
      c, chunks,
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    char* run = slot(k) + first_[static_cast<std::size_t>(plan_.host)] * length * e;
    if (host_) {
      host_->all_gather(part(input, begin, length), over(run, input, mine * length), deadline);
    } else {
      copy_bytes(run, static_cast<const char*>(input.data) + begin * e, length * e);
    }
      },
      [&](std::size_t k, std::size_t, std::size_t length) {
    if (plan_.local == 0) {
      ring_all_gather(*across_, over(slot(k), input, world * length), host_counts(length), deadline);
    }
  },
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    if (host_) host_->broadcast(over(slot(k), input, world * length), 0, deadline);
    for_each_piece(Order::ByHost, [&](std::size_t piece, std::size_t rank) {
      copy_bytes(out + rank * block + begin * e, slot(k) + piece * length * e, length * e);
    });
      });
}

void Hierarchy::leaders_reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) {
  const std::size_t world = host_of_.size(), c = output.count, e = element_size(output.dtype), block = output.bytes();
  const std::size_t chunks = gather_chunks(c, output.dtype), most = chunk_range(c, chunks, 0).end;
  const std::size_t mine = plan_.my_host().size(), run_at = first_[static_cast<std::size_t>(plan_.host)];
  // Per chunk, in slot k % kSlots: the blocks' pieces host after host (as in leaders_all_gather),
  // reduced over the host into its leader's slot, reduce-scattered among the leaders so that each
  // holds its host's run, which it broadcasts to its host.
  Storage once;
  char* slots = scratch(kSlots * world * most * e, once);
  const auto slot = [&](std::size_t k) { return slots + (k % kSlots) * world * most * e; };
  const char* in = static_cast<const char*>(input.data);
  pipelined_pieces(
      c, chunks,
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    for_each_piece(Order::ByHost, [&](std::size_t piece, std::size_t rank) {
      copy_bytes(slot(k) + piece * length * e, in + rank * block + begin * e, length * e);
    });
    if (host_) host_->reduce(over(slot(k), output, world * length), op, 0, deadline);
      },
      [&](std::size_t k, std::size_t, std::size_t length) {
    if (plan_.local == 0) {
      ring_reduce_scatter(*across_, over(slot(k), output, world * length), host_counts(length), op, deadline);
    }
  },
      [&](std::size_t k, std::size_t begin, std::size_t length) {
    char* run = slot(k) + run_at * length * e;
    if (host_) host_->broadcast(over(run, output, mine * length), 0, deadline);
    copy_bytes(static_cast<char*>(output.data) + begin * e, run + static_cast<std::size_t>(plan_.local) * length * e,
               length * e);
      });
}

std::string encode_thresholds(const Hierarchy::Thresholds& t) {
  return cat(t.stripe_bytes, " ", t.chunk_bytes, " ", t.gather_chunk_bytes, " ", t.gather_stripe_bytes);
}

Hierarchy::Thresholds decode_thresholds(const std::string& text) {
  std::size_t sizes[4] = {}, at = 0, n = 0;
  for (; n < 4 && at <= text.size(); ++n) {
    const auto space = std::min(text.find(' ', at), text.size());
    const auto value = parse_int(text.substr(at, space - at));
    if (!value || *value < 0) break;
    sizes[n] = static_cast<std::size_t>(*value);
    at = space + 1;
  }
  if (n < 4 || at <= text.size()) {
    throw MismatchError(cat("group rank 0 published the hierarchical collectives' thresholds as ", quote(text),
                            ", not as four sizes: do all ranks run the same ddp build?"));
  }
  return {sizes[0], sizes[1], sizes[2], sizes[3]};
}

namespace {

// Where segment i of a ring's buffer starts, in elements.
std::size_t segment_at(const std::vector<std::size_t>& counts, std::size_t i) {
  std::size_t at = 0;
  for (std::size_t j = 0; j < i; ++j) at += counts[j];
  return at;
}

}  // namespace

void ring_reduce_scatter(Backend& group, Buffer data, const std::vector<std::size_t>& counts, ReduceOp op,
                         Backend::Deadline deadline) {
  const int n = group.size(), r = group.rank();
  std::vector<char> incoming(*std::max_element(counts.begin(), counts.end()) * element_size(data.dtype));
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Step s sends the segment that has s + 1 contributions on to the next rank and adds this rank's
  // own to the one that arrives; after n - 1 steps segment r has all n.
  for (int s = 0; s + 1 < n; ++s) {
    const auto send = static_cast<std::size_t>((r - s - 1 + 2 * n) % n);
    const auto recv = static_cast<std::size_t>((r - s - 2 + 2 * n) % n);
    const auto tag = static_cast<std::uint32_t>(s);
    auto received = group.post_recv(over(incoming, data, counts[recv]), prev, tag);
    auto sent = group.post_send(part(data, segment_at(counts, send), counts[send]), next, tag);
    received(deadline);
    sent(deadline);
    const Buffer into = part(data, segment_at(counts, recv), counts[recv]);
    reduce(into.data, into.data, incoming.data(), into.count, data.dtype, op);
  }
}

void ring_all_gather(Backend& group, Buffer data, const std::vector<std::size_t>& counts, Backend::Deadline deadline) {
  const int n = group.size(), r = group.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Step s passes on the segment that arrived at step s - 1 (at step 0, this rank's own).
  for (int s = 0; s + 1 < n; ++s) {
    const auto send = static_cast<std::size_t>((r - s + n) % n);
    const auto recv = static_cast<std::size_t>((r - s - 1 + 2 * n) % n);
    const auto tag = static_cast<std::uint32_t>(s);
    auto received = group.post_recv(part(data, segment_at(counts, recv), counts[recv]), prev, tag);
    auto sent = group.post_send(part(data, segment_at(counts, send), counts[send]), next, tag);
    received(deadline);
    sent(deadline);
  }
}

}  // namespace ddp::detail

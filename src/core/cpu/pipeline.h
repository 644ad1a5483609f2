// A three-stage pipeline over chunks 0..n-1, for the hierarchical all_reduce (cpu_backend.cpp):
// `first(k)` (the host's shared-memory reduce) runs on the calling thread for every chunk in order;
// `second(k)` (the link) runs on a helper thread, in order, each as soon as first(k) is done; and
// `third(k)` (the host's shared-memory all-gather) runs on the calling thread, in order, each once
// second(k) is done. So the link carries chunk k while the host reduces chunk k + 1 and gathers
// chunk k - 1, and it idles only for the first chunk's reduce and the last one's gather.
//
// Every rank calling it with the same n runs its own stages in the same order, so collectives
// inside the stages match across ranks. An exception from any stage stops the pipeline: the helper
// finishes the chunk it is in (no stage is cut short or run concurrently with abort()), and the
// first exception is rethrown on the calling thread. With n <= 1 everything runs inline.
//
// `window` W > 0 bounds the chunks in flight, for stages that hand chunks over through W scratch
// slots (chunk k in slot k % W): the calling thread runs third(k - W) before first(k), and second(k)
// starts only once third(k - W) is done. 0: no bound, every first before the thirds (stages that
// work on the caller's buffer in place). Either way the calling thread's order is fixed.
#pragma once

#include <cstddef>
#include <functional>

namespace ddp::detail {

using ChunkStage = std::function<void(std::size_t chunk)>;

void run_pipelined(std::size_t chunks, const ChunkStage& first, const ChunkStage& second, const ChunkStage& third,
                   std::size_t window = 0);

// How many chunks of at most `chunk_bytes` (0: one chunk) `count` elements of `element_bytes` are
// cut into (none for none, never more than count), and chunk k's [begin, end) in elements: equal
// whole elements, the remainder spread over the first chunks. Pure, so that every rank cuts alike.
std::size_t chunk_count(std::size_t count, std::size_t element_bytes, std::size_t chunk_bytes);
struct ChunkRange {
  std::size_t begin = 0, end = 0;
};
ChunkRange chunk_range(std::size_t count, std::size_t chunks, std::size_t k);

}  // namespace ddp::detail

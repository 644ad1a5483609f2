// Memory a rank shares with the other ranks of its host (ProcessGroup::allocate_shared_memory),
// so that a collective on a buffer inside it needs no copy through the segment's slots: the
// peers read the buffer where it is. Each allocation is a memory file (memfd) of its own, mapped
// by its owner at once and by a peer the first time an op names it; the owner lists it in its
// row of the segment's region table (layout.h) and names it in each step as `where` (an entry
// and an offset). Allocation involves no peer, so ranks may allocate at different times, and an
// op where some ranks' buffers are shared and others' are not is fine: each peer is read from
// wherever its data is.
//
// allocate and the memory's release may run on any thread; locate and peer on the op thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "shm/layout.h"

namespace ddp::detail::shm {

class SharedBuffers : public std::enable_shared_from_this<SharedBuffers> {
 public:
  // `base`: the mapped segment; `me`: this rank's index; `pids[i]`: peer i's process (-1 for me).
  SharedBuffers(void* base, const Layout& layout, int me, std::vector<pid_t> pids);
  ~SharedBuffers();
  SharedBuffers(const SharedBuffers&) = delete;
  SharedBuffers& operator=(const SharedBuffers&) = delete;

  // `bytes` (> 0) of zeroed memory the peers can map, released when the last copy of the pointer
  // goes. Null when this rank's row of the table is full (kRegions live allocations), after
  // detach, or when the peers could not open it (a peer of another user, this process not
  // dumpable); throws IOError when the system refuses the memory.
  std::shared_ptr<void> allocate(std::size_t bytes);

  // Where [data, data + bytes) lies in this rank's live allocations, as published in a step
  // (nonzero), or 0 when it is not wholly inside one.
  std::uint64_t locate(const void* data, std::size_t bytes) const;

  // The start of peer `rank`'s buffer that it published as `where`, `bytes` long, mapped here on
  // first use (read-write: all_reduce writes the share it reduced into its peers' buffers);
  // mappings of that peer's memory freed since are dropped. Throws Error when `where` names no
  // live allocation of that peer or runs past its end, IOError when the peer's memory cannot be
  // mapped (messages say "its ...": the caller names the peer).
  char* peer(int rank, std::uint64_t where, std::size_t bytes);

  // Unmaps what this rank holds of peer `rank`'s memory that the peer has freed or replaced since
  // it last looked (one load when nothing changed): the memory lives as long as any mapping of it
  // does. The op thread's; every large op calls it for every peer.
  void drop_stale(int rank);

  // The segment is going away: unmaps the peers' memory and stops using the table; allocations
  // still alive stay usable as ordinary memory.
  void detach();

 private:
  struct Own {
    char* data = nullptr;
    std::size_t bytes = 0;
    int fd = -1;
  };
  struct Mapped {
    std::uint32_t generation = 0;
    char* data = nullptr;
    std::size_t bytes = 0;
  };
  void release(std::size_t index);
  void changed_row();  // with mutex_ held
  void unmap_peers();

  Layout layout_;
  int me_;
  bool same_user_;  // every peer runs as this process's user
  std::vector<pid_t> pids_;
  mutable std::mutex mutex_;  // guards base_, own_ and generation_
  void* base_;                // null once detached
  std::vector<Own> own_;      // per entry of this rank's row
  std::uint32_t generation_ = 0;
  std::vector<std::vector<Mapped>> mapped_;  // [peer][entry], the op thread's
  std::vector<std::uint32_t> seen_;          // [peer]: its Control::regions when last looked at
};

}  // namespace ddp::detail::shm

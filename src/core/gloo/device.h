// The Gloo TCP device (its one I/O thread) a group's Gloo context connects through: on which
// address or interface it listens, shared by every group of the process that listens there.
#pragma once

#include <gloo/transport/device.h>

#include <memory>
#include <string>

#include "gloo/gloo_backend.h"

namespace ddp::detail {

// The device for `placement`'s ranks, whose store host is `master_addr` ("" under file:// init):
// on interface `ifname` when it is not empty (the group's settings: DDP_SOCKET_IFNAME, else
// GLOO_SOCKET_IFNAME); else the loopback address when the master is
// local or every rank shares one network namespace; else the local address toward the master, or
// this host's name. The first call also checks which Gloo the process binds (gloo/binding.h),
// ignores SIGPIPE unless the program handles it, and explains Gloo's terminations. Throws IOError
// naming what to set when no address can be chosen or the socket cannot be opened.
std::shared_ptr<gloo::transport::Device> shared_device(const std::string& master_addr, const std::string& ifname,
                                                       const GlooPlacement& placement);

}  // namespace ddp::detail

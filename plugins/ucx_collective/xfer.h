// One UCX tag send or receive of an operation, polled rather than called
// back: completion is read with ucp_request_check_status, so no UCX callback
// ever points into an operation that the caller may have freed.
#ifndef LOOM_UCX_XFER_H
#define LOOM_UCX_XFER_H

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>

namespace loom_ucx {

struct Xfer {
  void *req = nullptr;  // the UCX request while in flight
  bool posted = false;
  bool done = false;
  bool is_recv = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;  // bytes received

  // Polls once; true when finished (status and length are then set).
  bool poll();
  bool pending() const { return posted && !done; }
};

// Posts a send (contiguous bytes) on ep. Never fails: a send UCX refuses
// at once is finished with that error.
void post_send(ucp_ep_h ep, Xfer &x, uint64_t tag, const void *buf, size_t len);
// Posts a receive of at most len bytes matching tag under mask.
void post_recv(ucp_worker_h worker, Xfer &x, uint64_t tag, uint64_t mask, void *buf, size_t len);

// A request of an operation that ended (or was freed) before UCX finished
// it; the communicator keeps it until UCX does, or until comm_destroy.
struct Orphan {
  void *req;
  bool is_recv;
};

}  // namespace loom_ucx

#endif  // LOOM_UCX_XFER_H

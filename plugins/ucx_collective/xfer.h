/* SPDX-License-Identifier: Apache-2.0 */
// One UCX tag send or receive of an operation, polled rather than called
// back: completion is read with ucp_request_check_status, so no UCX callback
// ever points into an operation that the caller may have freed. A large
// message between ranks of one host may instead travel by cross-memory
// attach (cma.h): a descriptor and an acknowledgement over UCX, the data read
// straight from the sender's memory; the Xfer hides the difference.
//
// A posted Xfer must not move until it is done (UCX writes into it).
#ifndef LOOM_UCX_XFER_H
#define LOOM_UCX_XFER_H

#include <sys/types.h>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>

namespace loom_ucx {

// The cross-memory-attach descriptor (in place of the data) and its answer.
struct CmaDescriptor {
  uint32_t magic;
  uint32_t reserved;
  uint64_t address;
  uint64_t length;
};
struct CmaAck {
  uint32_t magic;
  int32_t error;  // 0, or the errno of the receiver's failed read
};
constexpr uint32_t kCmaMagic = 0x4c434d41;  // "LCMA"

// The receiving end of a cross-memory-attach message may hand the sender's
// bytes to a consumer instead of reading them into one buffer: the ring's
// reduce-scatter reads a whole block in cache-sized pieces and reduces each
// piece as it arrives (ring_pipeline.cpp). consume() runs inside poll(), in
// place of the read; it returns 0 or the errno of the failure (ECANCELED:
// it stopped because the communicator was aborted).
class CmaSink {
 public:
  virtual int consume(pid_t sender, uint64_t address, uint64_t length) = 0;

 protected:
  ~CmaSink() = default;
};

struct Xfer {
  enum Mode : uint8_t { kPlain, kCmaSend, kCmaRecv };
  void *req = nullptr;  // the UCX request while in flight
  bool posted = false;
  bool done = false;
  bool is_recv = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;  // bytes received

  // Cross-memory attach only.
  Mode mode = kPlain;
  void *req2 = nullptr;     // the acknowledgement: received (send side) or sent (receive side)
  bool read_done = false;   // receive side: the data is in place, the answer is on its way
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;    // receive side: where the answer goes
  uint64_t ack_tag = 0;
  pid_t pid = 0;            // receive side: the sender
  void *buf = nullptr;      // receive side: where the data goes, at most cap bytes
  size_t cap = 0;
  CmaSink *sink = nullptr;  // receive side: takes the data instead of buf (set after posting)
  int read_errno = 0;       // receive side: why the read failed
  ucs_status_t send_status = UCS_OK;
  CmaDescriptor desc{};
  CmaAck ack{};

  // Polls once; true when finished (status and length are then set).
  bool poll();
  bool pending() const { return posted && !done; }
  // Whether data may still land in this rank's memory (a receive).
  bool receiving() const { return pending() && is_recv && !read_done; }
  // Cancels what UCX is still receiving for it, so it ends soon.
  void cancel();
  // Hands what is still in flight back to UCX, which finishes it without us
  // (nothing is written into the Xfer afterwards), and marks it done.
  void abandon();
};

// Posts a send (contiguous bytes) on ep. Never fails: a send UCX refuses
// at once is finished with that error.
void post_send(ucp_ep_h ep, Xfer &x, uint64_t tag, const void *buf, size_t len);
// Posts a receive of at most len bytes matching tag under mask.
void post_recv(ucp_worker_h worker, Xfer &x, uint64_t tag, uint64_t mask, void *buf, size_t len);
// The same by cross-memory attach; the acknowledgement travels under
// ack_tag, which the sender receives on `worker` and the receiver sends on ep.
void post_send_cma(ucp_worker_h worker, ucp_ep_h ep, Xfer &x, uint64_t tag, uint64_t ack_tag, const void *buf,
                   size_t len);
void post_recv_cma(ucp_worker_h worker, ucp_ep_h ep, Xfer &x, uint64_t tag, uint64_t ack_tag, pid_t sender,
                   void *buf, size_t len);

// A request of an operation that ended (or was freed) before UCX finished
// it; the communicator keeps it until UCX does, or until comm_destroy.
struct Orphan {
  void *req;
  bool is_recv;
};

}  // namespace loom_ucx

#endif  // LOOM_UCX_XFER_H

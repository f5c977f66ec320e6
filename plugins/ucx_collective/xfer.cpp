// SPDX-License-Identifier: Apache-2.0
// Posting and polling UCX tag operations, plain or by cross-memory attach.
#include "xfer.h"

#include <cerrno>

#include "cma.h"

namespace loom_ucx {
namespace {

ucs_status_ptr_t send_nbx(ucp_ep_h ep, const void *buf, size_t len, uint64_t tag) {
  ucp_request_param_t param;
  param.op_attr_mask = 0;
  return ucp_tag_send_nbx(ep, buf, len, tag, &param);
}

// UCX 1.13 does not fill recv_info on immediate completion (checked: the
// length stays unset), so always take a request and read the length from it.
ucs_status_ptr_t recv_nbx(ucp_worker_h worker, void *buf, size_t len, uint64_t tag, uint64_t mask) {
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  return ucp_tag_recv_nbx(worker, buf, len, tag, mask, &param);
}

// A posted request: *req set, or the status of one that ended at once.
ucs_status_t adopt(ucs_status_ptr_t r, void **req) {
  if (UCS_PTR_IS_PTR(r)) {
    *req = r;
    return UCS_INPROGRESS;
  }
  *req = nullptr;
  return UCS_PTR_STATUS(r);  // UCS_OK for NULL
}

// The status of a finished request, freed; UCS_INPROGRESS while it runs.
ucs_status_t finish_send(void **req) {
  const ucs_status_t s = ucp_request_check_status(*req);
  if (s == UCS_INPROGRESS) return s;
  ucp_request_free(*req);
  *req = nullptr;
  return s;
}
ucs_status_t finish_recv(void **req, size_t *length) {
  ucp_tag_recv_info_t info{};
  const ucs_status_t s = ucp_tag_recv_request_test(*req, &info);
  if (s == UCS_INPROGRESS) return s;
  *length = info.length;
  ucp_request_free(*req);
  *req = nullptr;
  return s;
}

ucs_status_t status_of_errno(int err) {
  if (err == ESRCH) return UCS_ERR_CONNECTION_RESET;  // the sender is gone
  if (err == EPERM || err == EACCES) return UCS_ERR_UNSUPPORTED;  // not allowed to read it
  if (err == ECANCELED) return UCS_ERR_CANCELED;                  // a sink stopped for an abort
  return UCS_ERR_INVALID_ADDR;
}

}  // namespace

bool Xfer::poll() {
  if (done || !posted) return done;
  if (mode == kPlain) {
    const ucs_status_t s = is_recv ? finish_recv(&req, &length) : finish_send(&req);
    if (s == UCS_INPROGRESS) return false;
    status = s;
    done = true;
    return true;
  }
  if (mode == kCmaSend) {
    if (req) {
      const ucs_status_t s = finish_send(&req);
      if (s != UCS_INPROGRESS && s != UCS_OK) {
        send_status = s;
        if (req2) ucp_request_cancel(worker, req2);  // no answer will come
      }
    }
    if (req2) {
      size_t got = 0;
      const ucs_status_t s = finish_recv(&req2, &got);
      if (s == UCS_INPROGRESS) return false;
      if (s != UCS_OK && send_status == UCS_OK) send_status = s;
      if (s == UCS_OK && (got != sizeof ack || ack.magic != kCmaMagic) && send_status == UCS_OK)
        send_status = UCS_ERR_IO_ERROR;
    }
    if (req) return false;
    status = send_status != UCS_OK ? send_status : ack.error ? status_of_errno(ack.error) : UCS_OK;
    done = true;
    return true;
  }
  // kCmaRecv: the descriptor, then the read, then the answer.
  if (!read_done) {
    size_t got = 0;
    const ucs_status_t s = finish_recv(&req, &got);
    if (s == UCS_INPROGRESS) return false;
    if (s != UCS_OK || got != sizeof desc || desc.magic != kCmaMagic) {
      // Failed, or the sender sent data, not a descriptor: its arguments
      // differ from ours, which the length shows the caller.
      status = s;
      length = got;
      done = true;
      return true;
    }
    int err = 0;
    if (desc.length > cap) {
      status = UCS_ERR_MESSAGE_TRUNCATED;
    } else {
      err = sink ? sink->consume(pid, desc.address, desc.length) : cma_read(pid, desc.address, buf, desc.length);
      status = err ? status_of_errno(err) : UCS_OK;
      read_errno = err;
    }
    length = size_t(desc.length);
    read_done = true;
    // ESRCH: nobody to answer. ECANCELED: this rank aborted, and an aborted
    // operation answers nothing, whichever way its data travels.
    if (err == ESRCH || err == ECANCELED) {
      done = true;
      return true;
    }
    ack = CmaAck{kCmaMagic, err};
    if (adopt(send_nbx(ep, &ack, sizeof ack, ack_tag), &req2) != UCS_INPROGRESS) {
      done = true;
      return true;
    }
  }
  if (req2 && finish_send(&req2) == UCS_INPROGRESS) return false;  // an answer that fails: the peer died
  done = true;
  return true;
}

void Xfer::cancel() {
  if (!pending()) return;
  if ((mode == kPlain && is_recv) || (mode == kCmaRecv && !read_done)) {
    if (req) ucp_request_cancel(worker, req);
  } else if (mode == kCmaSend && req2) {
    ucp_request_cancel(worker, req2);
  }
}

void Xfer::abandon() {
  if (!pending()) return;
  cancel();
  if (req) ucp_request_free(req);
  if (req2) ucp_request_free(req2);
  req = req2 = nullptr;
  done = true;
}

void post_send(ucp_ep_h ep, Xfer &x, uint64_t tag, const void *buf, size_t len) {
  x = Xfer{};
  x.posted = true;
  const ucs_status_t s = adopt(send_nbx(ep, buf, len, tag), &x.req);
  if (s != UCS_INPROGRESS) {  // a send UCX refuses at once ends with that error
    x.done = true;
    x.status = s;
  }
}

void post_recv(ucp_worker_h worker, Xfer &x, uint64_t tag, uint64_t mask, void *buf, size_t len) {
  x = Xfer{};
  x.posted = true;
  x.is_recv = true;
  x.worker = worker;
  const ucs_status_t s = adopt(recv_nbx(worker, buf, len, tag, mask), &x.req);
  if (s != UCS_INPROGRESS) {
    x.done = true;
    x.status = s;
  }
}

void post_send_cma(ucp_worker_h worker, ucp_ep_h ep, Xfer &x, uint64_t tag, uint64_t ack_tag, const void *buf,
                   size_t len) {
  x = Xfer{};
  x.posted = true;
  x.mode = Xfer::kCmaSend;
  x.worker = worker;
  x.desc = CmaDescriptor{kCmaMagic, 0, reinterpret_cast<uintptr_t>(buf), len};
  // The answer's receive first, so it can never arrive unexpected.
  ucs_status_t s = adopt(recv_nbx(worker, &x.ack, sizeof x.ack, ack_tag, ~uint64_t(0)), &x.req2);
  if (s != UCS_INPROGRESS) {
    x.done = true;
    x.status = s;
    return;
  }
  s = adopt(send_nbx(ep, &x.desc, sizeof x.desc, tag), &x.req);
  if (s != UCS_INPROGRESS && s != UCS_OK) {
    x.send_status = s;
    ucp_request_cancel(worker, x.req2);
  }
}

void post_recv_cma(ucp_worker_h worker, ucp_ep_h ep, Xfer &x, uint64_t tag, uint64_t ack_tag, pid_t sender,
                   void *buf, size_t len) {
  x = Xfer{};
  x.posted = true;
  x.is_recv = true;
  x.mode = Xfer::kCmaRecv;
  x.worker = worker;
  x.ep = ep;
  x.ack_tag = ack_tag;
  x.pid = sender;
  x.buf = buf;
  x.cap = len;
  // Data sent in its place (other arguments on the sender) ends truncated
  // or short: a mismatch that the caller reports.
  const ucs_status_t s = adopt(recv_nbx(worker, &x.desc, sizeof x.desc, tag, ~uint64_t(0)), &x.req);
  if (s != UCS_INPROGRESS) {
    x.done = true;
    x.status = s;
  }
}

}  // namespace loom_ucx

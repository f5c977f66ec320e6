// Posting and polling UCX tag operations.
#include "xfer.h"

namespace loom_ucx {

bool Xfer::poll() {
  if (done || !posted) return done;
  ucs_status_t s;
  if (is_recv) {
    ucp_tag_recv_info_t info{};
    s = ucp_tag_recv_request_test(req, &info);
    if (s == UCS_INPROGRESS) return false;
    length = info.length;
  } else {
    s = ucp_request_check_status(req);
    if (s == UCS_INPROGRESS) return false;
  }
  ucp_request_free(req);
  req = nullptr;
  status = s;
  done = true;
  return true;
}

void post_send(ucp_ep_h ep, Xfer &x, uint64_t tag, const void *buf, size_t len) {
  x = Xfer{};
  x.posted = true;
  ucp_request_param_t param;
  param.op_attr_mask = 0;
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep, buf, len, tag, &param);
  if (r == nullptr) {
    x.done = true;
  } else if (UCS_PTR_IS_ERR(r)) {
    x.done = true;
    x.status = UCS_PTR_STATUS(r);
  } else {
    x.req = r;
  }
}

void post_recv(ucp_worker_h worker, Xfer &x, uint64_t tag, uint64_t mask, void *buf, size_t len) {
  x = Xfer{};
  x.posted = true;
  x.is_recv = true;
  // UCX 1.13 does not fill recv_info on immediate completion (checked: the
  // length stays unset), so always take a request and read the length from it.
  ucp_request_param_t param;
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker, buf, len, tag, mask, &param);
  if (UCS_PTR_IS_ERR(r)) {
    x.done = true;
    x.status = UCS_PTR_STATUS(r);
  } else {
    x.req = r;
  }
}

}  // namespace loom_ucx

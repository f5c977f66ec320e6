// SPDX-License-Identifier: Apache-2.0
// Opening the collective, creating the communicator, posting and waiting.
#include "group.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "error.h"

namespace loom_ddp {
namespace {

// Elements per request: well inside the int counts of MPI-based backends.
constexpr uint64_t kMaxChunk = uint64_t(1) << 30;

}  // namespace

Clock::time_point deadline_after(int64_t timeout_ms) {
  constexpr int64_t kMaxMs = int64_t(10) * 365 * 24 * 3600 * 1000;  // ten years
  return Clock::now() + std::chrono::milliseconds(std::min(std::max<int64_t>(timeout_ms, 0), kMaxMs));
}

loom_status Group::open(const loom_host_v1 *host, const char *name, int32_t rank, int32_t size, int64_t timeout_ms,
                        DLDevice device, void *stream) {
  close();
  broken_ = LOOM_OK;
  detail_.clear();
  host_ = host;
  name_ = name;
  size_ = size;
  if (!LOOM_HOST_HAS(host, open_plugin) || !LOOM_HOST_HAS(host, close_plugin))
    return fail(LOOM_ERR_UNAVAILABLE,
                "the host offers no open_plugin service, so the ddp strategy cannot reach "
                "collective plugin '%s'",
                name);
  const void *vtable = nullptr;
  void *instance = nullptr;
  loom_status s = host->open_plugin(host->host_ctx, LOOM_KIND_COLLECTIVE, name, &vtable, &instance);
  if (s != LOOM_OK || vtable == nullptr || instance == nullptr) {
    if (s == LOOM_OK) {
      if (instance) host->close_plugin(host->host_ctx, instance);
      s = LOOM_ERR_INTERNAL;
    }
    return fail(s, "the host could not open collective plugin '%s' (%s); its log above says why", name,
                loom_status_name(s));
  }
  vt_ = static_cast<const loom_collective_v1 *>(vtable);
  instance_ = static_cast<loom_collective_ctx *>(instance);
  if (vt_->struct_size < LOOM_COLLECTIVE_V1_0_SIZE) {
    const uint32_t got = vt_->struct_size;
    close();
    return fail(LOOM_ERR_INTERNAL, "collective plugin '%s' came with a vtable of %u bytes, smaller than v1's %u", name,
                got, LOOM_COLLECTIVE_V1_0_SIZE);
  }

  // ABI 1.7: a collective may leave operations out; ddp needs these three.
  const uint64_t needed = LOOM_OP_ALLREDUCE | LOOM_OP_BROADCAST | LOOM_OP_BARRIER;
  if (vt_->struct_size >= LOOM_COLLECTIVE_V1_7_SIZE && (vt_->absent_ops & needed) != 0) {
    const uint64_t absent = vt_->absent_ops & needed;
    close();
    return fail(LOOM_ERR_UNSUPPORTED,
                "collective plugin '%s' leaves out%s%s%s, which ddp needs (allreduce, broadcast and barrier); "
                "choose a collective that offers them (`loom plugins info NAME` lists its operations)",
                name, (absent & LOOM_OP_ALLREDUCE) ? " allreduce" : "", (absent & LOOM_OP_BROADCAST) ? " broadcast" : "",
                (absent & LOOM_OP_BARRIER) ? " barrier" : "");
  }
  comm_errors_ = vt_->struct_size >= LOOM_COLLECTIVE_V1_7_SIZE && vt_->comm_last_error != nullptr;

  // The host's own exchange (ABI 1.7) where it has one; else ours over the store.
  const loom_oob_v1 *oob = nullptr;
  if (LOOM_HOST_HAS(host, oob_open) && LOOM_HOST_HAS(host, oob_close)) {
    s = host->oob_open(host->host_ctx, "ddp", rank, size, &host_oob_);
    if (s != LOOM_OK) {
      close();
      return fail(s, "the host could not open an out-of-band exchange for %d ranks (%s); its log above says why", size,
                  loom_status_name(s));
    }
    oob = host_oob_;
  } else {
    oob_ = std::make_unique<StoreOob>(host, rank, size);
    oob = oob_->table();
  }
  loom_comm_config_v1 config;
  std::memset(&config, 0, sizeof config);
  config.struct_size = sizeof config;
  config.rank = rank;
  config.size = size;
  const bool cuda = device.device_type == kDLCUDA;
  config.device_type = cuda ? LOOM_DEVICE_CUDA : LOOM_DEVICE_CPU;
  config.device_id = cuda ? device.device_id : 0;
  config.stream = cuda ? stream : nullptr;
  config.oob = oob;
  config.timeout_ms = timeout_ms;
  config.name = "ddp";
  loom_comm *comm = nullptr;
  s = vt_->comm_create(instance_, &config, &comm);
  if (s != LOOM_OK || comm == nullptr) {
    const char *text = vt_->last_error(instance_);
    std::string why = text ? text : "no message";
    if (oob_ && !oob_->error().empty() && why.find(oob_->error()) == std::string::npos)
      why += " (" + oob_->error() + ")";
    if (s == LOOM_OK) s = LOOM_ERR_INTERNAL;
    close();
    return fail(s,
                "creating the communicator of %d ranks (this is rank %d, buffers in %s memory) with collective plugin "
                "'%s' failed (%s): %s",
                size, rank, cuda ? "CUDA device" : "host", name, loom_status_name(s), why.c_str());
  }
  comm_ = comm;
  return LOOM_OK;
}

void Group::free_all() {
  for (auto &requests : ops_) {
    for (loom_request *&r : requests) {
      if (r) vt_->request_free(r);
      r = nullptr;
    }
  }
  ops_.clear();
  pending_ = 0;
}

loom_status Group::break_group(loom_status s) {
  // First: the next call may overwrite it.
  const char *text = comm_errors_ ? vt_->comm_last_error(comm_) : vt_->last_error(instance_);
  detail_ = text ? text : "no message";
  broken_ = s;
  vt_->comm_abort(comm_);
  free_all();
  return s;
}

loom_status Group::close() {
  loom_status s = LOOM_OK;
  if (comm_) {
    if (pending_ > 0) {  // only after an exception: the ranks are out of step
      vt_->comm_abort(comm_);
      free_all();
    }
    s = vt_->comm_destroy(comm_);
    if (s != LOOM_OK) {
      const char *text = vt_->last_error(instance_);
      detail_ = text ? text : "no message";
    }
    comm_ = nullptr;
  }
  if (instance_) host_->close_plugin(host_->host_ctx, instance_);
  instance_ = nullptr;
  vt_ = nullptr;
  oob_.reset();
  if (host_oob_) host_->oob_close(host_->host_ctx, host_oob_);
  host_oob_ = nullptr;
  comm_errors_ = false;
  ops_.clear();
  pending_ = 0;
  return s;
}

loom_status Group::check_usable(size_t *op) {
  if (!comm_) return LOOM_ERR_INTERNAL;
  if (broken_ != LOOM_OK) return broken_;
  if (pending_ == 0) ops_.clear();  // indices restart once nothing is in flight
  ops_.emplace_back();
  *op = ops_.size() - 1;
  return LOOM_OK;
}

template <class PostOne>
loom_status Group::post_chunked(uint64_t count, size_t elem, PostOne &&post_one, size_t *op) {
  LOOM_CXX_TRY(check_usable(op));
  uint64_t offset = 0;
  do {
    const uint64_t n = std::min(count - offset, kMaxChunk);
    loom_request *request = nullptr;
    const loom_status s = post_one(offset * elem, n, &request);
    if (s != LOOM_OK) return break_group(s);
    ops_[*op].push_back(request);
    ++pending_;
    offset += n;
  } while (offset < count);
  return LOOM_OK;
}

loom_status Group::allreduce(void *buf, uint64_t count, loom_dtype dtype, loom_reduce_op reduce, size_t *op) {
  auto *base = static_cast<unsigned char *>(buf);
  return post_chunked(
      count, loom_dtype_size(dtype),
      [&](uint64_t at, uint64_t n, loom_request **r) {
        return vt_->allreduce(comm_, base + at, base + at, n, dtype, reduce, r);
      },
      op);
}

loom_status Group::broadcast(void *buf, uint64_t count, loom_dtype dtype, int32_t root, size_t *op) {
  auto *base = static_cast<unsigned char *>(buf);
  return post_chunked(
      count, loom_dtype_size(dtype),
      [&](uint64_t at, uint64_t n, loom_request **r) {
        return vt_->broadcast(comm_, base + at, base + at, n, dtype, root, r);
      },
      op);
}

loom_status Group::barrier(size_t *op) {
  return post_chunked(
      1, 1, [&](uint64_t, uint64_t, loom_request **r) { return vt_->barrier(comm_, r); }, op);
}

loom_status Group::wait(size_t op, Clock::time_point deadline) {
  if (!comm_ || op >= ops_.size()) return LOOM_ERR_INTERNAL;
  if (broken_ != LOOM_OK) return broken_;
  for (loom_request *&request : ops_[op]) {
    if (!request) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const loom_status s = vt_->wait(request, std::max<int64_t>(left, 0));
    if (s != LOOM_OK) return break_group(s);
    vt_->request_free(request);
    request = nullptr;
    --pending_;
  }
  return LOOM_OK;
}

}  // namespace loom_ddp

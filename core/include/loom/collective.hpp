// SPDX-License-Identifier: Apache-2.0
// loom/collective.hpp: C++ handles over a collective plugin's C vtable.
//
// Collective is one initialised plugin instance, Communicator one
// communicator of it, Request one posted operation. Each handle releases its
// C object when destroyed (request_free, comm_destroy, fini), so a plugin's
// objects are always freed by that plugin. Plugins never see these types.
//
// Methods return Status rather than throw: collective failures (TIMEOUT,
// PEER_FAILED) are normal events that callers such as the collaborative
// strategy handle. Thread safety follows loom/collective.h: one thread at a
// time per communicator, except Communicator::abort.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "loom/collective.h"
#include "loom/plugin_record.hpp"
#include "loom/status.hpp"

namespace loom {

class Collective;
class Communicator;

class Request {
 public:
  Request() = default;
  ~Request() { reset(); }
  Request(Request&& other) noexcept { *this = std::move(other); }
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  bool valid() const { return request_ != nullptr; }
  // Never blocks: *done is true once finished, and the result is its status.
  Status test(bool* done);
  // Waits at most timeout_ms (LOOM_TIMEOUT_DEFAULT: the communicator's).
  Status wait(int64_t timeout_ms = LOOM_TIMEOUT_DEFAULT);
  // Frees the request (it must have finished, or its communicator aborted).
  // Every request must be reset or destroyed before its communicator.
  void reset();

 private:
  friend class Communicator;
  // Not owning: a request must be reset before its communicator is
  // destroyed (the plugin contract), and the communicator owns the plugin.
  const Collective* owner_ = nullptr;
  loom_comm* comm_ = nullptr;  // whose comm_last_error explains a failed test or wait
  loom_request* request_ = nullptr;
};

// How to build a communicator.
struct CommOptions {
  int32_t rank = 0;
  int32_t size = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::string name = "world";
  // Out-of-band allgather among the members; empty: the job's store is used
  // (or nothing, where the job has none, for self-bootstrapping plugins).
  std::function<Status(const void* send, size_t len, void* recv, int64_t timeout_ms)> oob;
  int32_t device_type = LOOM_DEVICE_CPU;
  int32_t device_id = 0;
  void* stream = nullptr;
};

class Communicator {
 public:
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const Collective& collective() const { return *owner_; }

  // Non-blocking forms: post, and on OK hand the request to *request.
  Status iallreduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                    Request* request);
  Status ibroadcast(const void* send, void* recv, uint64_t count, loom_dtype dtype, int32_t root,
                    Request* request);
  Status ireduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                 int32_t root, Request* request);
  Status iallgather(const void* send, void* recv, uint64_t sendcount, loom_dtype dtype, Request* request);
  Status ireduce_scatter(const void* send, void* recv, uint64_t recvcount, loom_dtype dtype, loom_reduce_op op,
                         Request* request);
  Status ialltoall(const void* send, void* recv, uint64_t count, loom_dtype dtype, Request* request);
  Status ibarrier(Request* request);
  Status isend(const void* buf, uint64_t count, loom_dtype dtype, int32_t peer, Request* request);
  Status irecv(void* buf, uint64_t count, loom_dtype dtype, int32_t peer, Request* request);
  // scale x the sum over the members, for floating dtypes; every member
  // passes the same scale (ABI 1.3, loom_collective_v1.allreduce_scaled).
  // LOOM_ERR_UNSUPPORTED when the plugin does not offer it
  // (offers_scaled_allreduce()): sum with allreduce and scale the result.
  Status iallreduce_scaled(const void* send, void* recv, uint64_t count, loom_dtype dtype, double scale,
                           Request* request);
  // What this member has moved on the communicator, as the plugin counts it
  // (ABI 1.11, loom_collective_v1.comm_stats); LOOM_ERR_UNSUPPORTED when the
  // plugin does not count (offers_stats()).
  Status stats(loom_comm_stats_v1* out) const;
  bool offers_stats() const;

  // Blocking forms: post, then wait for the communicator's timeout; or, when
  // the plugin declares LOOM_CAP_INLINE_COMPLETION, one call with request ==
  // NULL that completes within that timeout (no request object). A blocking
  // call that times out aborts the communicator (its operation can no longer
  // be finished in step with the peers): build a new one.
  //
  // Defined here, so that the inline case compiles into the caller as one
  // flag test and one indirect call: for small messages the wrapper's own
  // call and frame were a measurable part of the plugin boundary's cost.
  // Everything else (errors, post + wait) is out of line.
  Status allreduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op) {
    if (absent_ & LOOM_OP_ALLREDUCE) return absent_op("allreduce");
    if (inline_completion_)
      return finished(vtable_->allreduce(comm_, send, recv, count, dtype, op, nullptr), "allreduce");
    return post_wait_allreduce(send, recv, count, dtype, op);
  }
  Status broadcast(const void* send, void* recv, uint64_t count, loom_dtype dtype, int32_t root) {
    if (absent_ & LOOM_OP_BROADCAST) return absent_op("broadcast");
    if (inline_completion_)
      return finished(vtable_->broadcast(comm_, send, recv, count, dtype, root, nullptr), "broadcast");
    return post_wait_broadcast(send, recv, count, dtype, root);
  }
  Status reduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op, int32_t root) {
    if (absent_ & LOOM_OP_REDUCE) return absent_op("reduce");
    if (inline_completion_)
      return finished(vtable_->reduce(comm_, send, recv, count, dtype, op, root, nullptr), "reduce");
    return post_wait_reduce(send, recv, count, dtype, op, root);
  }
  Status allgather(const void* send, void* recv, uint64_t sendcount, loom_dtype dtype) {
    if (absent_ & LOOM_OP_ALLGATHER) return absent_op("allgather");
    if (inline_completion_)
      return finished(vtable_->allgather(comm_, send, recv, sendcount, dtype, nullptr), "allgather");
    return post_wait_allgather(send, recv, sendcount, dtype);
  }
  Status reduce_scatter(const void* send, void* recv, uint64_t recvcount, loom_dtype dtype, loom_reduce_op op) {
    if (absent_ & LOOM_OP_REDUCE_SCATTER) return absent_op("reduce_scatter");
    if (inline_completion_)
      return finished(vtable_->reduce_scatter(comm_, send, recv, recvcount, dtype, op, nullptr), "reduce_scatter");
    return post_wait_reduce_scatter(send, recv, recvcount, dtype, op);
  }
  Status alltoall(const void* send, void* recv, uint64_t count, loom_dtype dtype) {
    if (absent_ & LOOM_OP_ALLTOALL) return absent_op("alltoall");
    if (inline_completion_) return finished(vtable_->alltoall(comm_, send, recv, count, dtype, nullptr), "alltoall");
    return post_wait_alltoall(send, recv, count, dtype);
  }
  Status barrier() {
    if (absent_ & LOOM_OP_BARRIER) return absent_op("barrier");
    if (inline_completion_) return finished(vtable_->barrier(comm_, nullptr), "barrier");
    return post_wait_barrier();
  }
  Status send(const void* buf, uint64_t count, loom_dtype dtype, int32_t peer) {
    if (absent_ & LOOM_OP_SEND_RECV) return absent_op("send");
    if (inline_completion_) return finished(vtable_->send(comm_, buf, count, dtype, peer, nullptr), "send");
    return post_wait_send(buf, count, dtype, peer);
  }
  Status recv(void* buf, uint64_t count, loom_dtype dtype, int32_t peer) {
    if (absent_ & LOOM_OP_SEND_RECV) return absent_op("recv");
    if (inline_completion_) return finished(vtable_->recv(comm_, buf, count, dtype, peer, nullptr), "recv");
    return post_wait_recv(buf, count, dtype, peer);
  }
  // Post + wait always (a large-vector operation: the boundary's cost does
  // not show).
  Status allreduce_scaled(const void* send, void* recv, uint64_t count, loom_dtype dtype, double scale);
  // Whether the plugin offers allreduce_scaled (capability bit and function).
  bool offers_scaled_allreduce() const;

  // Unblocks every waiter; any thread.
  Status abort();

  // Whether the blocking forms complete inline (request == NULL).
  bool completes_inline() const { return inline_completion_; }
  // The plugin's communicator, for calls straight into collective().vtable()
  // (conformance, benchmarks); owned by this object.
  loom_comm* handle() const { return comm_; }

 private:
  friend class Collective;
  Communicator(std::shared_ptr<const Collective> owner, loom_comm* comm, const CommOptions& options);
  Status posted(loom_status code, loom_request* raw, Request* request) const;
  Status blocking(Status posted, Request* request) const;
  // The result of an inline (request == NULL) call.
  Status finished(loom_status code, const char* call) const {
    return code == LOOM_OK ? Status() : inline_failed(code, call);
  }
  Status inline_failed(loom_status code, const char* call) const;
  // LOOM_ERR_UNSUPPORTED for an operation the plugin lists in absent_ops:
  // its vtable entry may be NULL, so it is never called.
  Status absent_op(const char* op) const;
  // The blocking forms for a plugin without inline completion: post + wait.
  Status post_wait_allreduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op);
  Status post_wait_broadcast(const void* send, void* recv, uint64_t count, loom_dtype dtype, int32_t root);
  Status post_wait_reduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                          int32_t root);
  Status post_wait_allgather(const void* send, void* recv, uint64_t sendcount, loom_dtype dtype);
  Status post_wait_reduce_scatter(const void* send, void* recv, uint64_t recvcount, loom_dtype dtype,
                                  loom_reduce_op op);
  Status post_wait_alltoall(const void* send, void* recv, uint64_t count, loom_dtype dtype);
  Status post_wait_barrier();
  Status post_wait_send(const void* buf, uint64_t count, loom_dtype dtype, int32_t peer);
  Status post_wait_recv(void* buf, uint64_t count, loom_dtype dtype, int32_t peer);

  std::shared_ptr<const Collective> owner_;
  loom_comm* comm_;
  int32_t rank_;
  int32_t size_;
  std::chrono::milliseconds timeout_;
  const loom_collective_v1* vtable_;  // owner_'s, one load closer for the inline path
  // Read once from the plugin's capabilities and negotiated ABI (>= 1.1).
  bool inline_completion_;
  uint64_t absent_;  // the plugin's absent_ops (ABI 1.7), else 0
};

class Collective : public std::enable_shared_from_this<Collective> {
 public:
  virtual ~Collective() = default;

  const PluginDescriptor& descriptor() const { return descriptor_; }
  const std::string& path() const { return path_; }
  const loom_collective_v1& vtable() const { return *vtable_; }
  loom_collective_ctx* ctx() const { return ctx_; }
  bool has_capability(uint64_t cap) const { return (descriptor_.capabilities & cap) == cap; }

  // Builds a communicator (blocking, collective over the members).
  Status create_comm(const CommOptions& options, std::unique_ptr<Communicator>* comm);
  // Status(code, plugin's last_error) for a failed call on this thread.
  // Whether the plugin offers every operation in ops (LOOM_OP_* bits).
  bool offers(uint64_t ops) const { return (descriptor_.absent_ops & ops) == 0; }

  // The status of a failed call, with the plugin's message: the
  // communicator's own (comm_last_error, ABI 1.7) when comm is given and the
  // plugin has one, else the calling thread's (last_error).
  Status error(loom_status code, const char* call, loom_comm* comm = nullptr) const;

 protected:
  Collective(const loom_collective_v1* vtable, loom_collective_ctx* ctx, PluginDescriptor descriptor,
             std::string path)
      : vtable_(vtable), ctx_(ctx), descriptor_(std::move(descriptor)), path_(std::move(path)) {}
  // The default out-of-band exchange (the job's store), or empty.
  virtual std::function<Status(const void*, size_t, void*, int64_t)> default_oob(const CommOptions& options) = 0;

  const loom_collective_v1* vtable_;
  loom_collective_ctx* ctx_;
  PluginDescriptor descriptor_;
  std::string path_;
};

// Human names: "f32", "sum"; and parsers for them (nullopt-like 0 on failure).
const char* dtype_name(loom_dtype dtype);
const char* reduce_op_name(loom_reduce_op op);
loom_dtype parse_dtype(const std::string& word);
loom_reduce_op parse_reduce_op(const std::string& word);

}  // namespace loom

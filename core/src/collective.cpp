// SPDX-License-Identifier: Apache-2.0
#include "loom/collective.hpp"

namespace loom {

// ---- Request ----------------------------------------------------------------

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    comm_ = other.comm_;
    request_ = other.request_;
    other.request_ = nullptr;
  }
  return *this;
}

void Request::reset() {
  if (request_ != nullptr) owner_->vtable().request_free(request_);
  request_ = nullptr;
  owner_ = nullptr;
  comm_ = nullptr;
}

Status Request::test(bool* done) {
  if (request_ == nullptr) return Status(LOOM_ERR_INVALID_ARGUMENT, "test on an empty request");
  int32_t finished = 0;
  loom_status code = owner_->vtable().test(request_, &finished);
  *done = finished != 0;
  return code == LOOM_OK ? Status::ok() : owner_->error(code, "test", comm_);
}

Status Request::wait(int64_t timeout_ms) {
  if (request_ == nullptr) return Status(LOOM_ERR_INVALID_ARGUMENT, "wait on an empty request");
  loom_status code = owner_->vtable().wait(request_, timeout_ms);
  return code == LOOM_OK ? Status::ok() : owner_->error(code, "wait", comm_);
}

// ---- Communicator -------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<const Collective> owner, loom_comm* comm, const CommOptions& options)
    : owner_(std::move(owner)),
      comm_(comm),
      rank_(options.rank),
      size_(options.size),
      timeout_(options.timeout),
      vtable_(&owner_->vtable()),
      // A 1.0 plugin knows nothing of bit 6, so the bit counts only with 1.1.
      inline_completion_(owner_->has_capability(LOOM_CAP_INLINE_COMPLETION) &&
                         owner_->descriptor().abi_version >= LOOM_ABI_MAKE(1, 1)),
      absent_(owner_->descriptor().absent_ops) {}

Communicator::~Communicator() { owner_->vtable().comm_destroy(comm_); }

Status Communicator::posted(loom_status code, loom_request* raw, Request* request) const {
  if (code != LOOM_OK) return owner_->error(code, "post", comm_);
  request->reset();
  request->owner_ = owner_.get();
  request->comm_ = comm_;
  request->request_ = raw;
  return Status::ok();
}

Status Communicator::blocking(Status posted, Request* request) const {
  if (!posted.is_ok()) return posted;
  Status done = request->wait(LOOM_TIMEOUT_DEFAULT);
  if (done.code() == LOOM_ERR_TIMEOUT) {
    // Nobody will wait for this operation again, and a request may be freed
    // unfinished only on an aborted communicator: the timeout ends it.
    owner_->vtable().comm_abort(comm_);
  }
  return done;
}

Status Communicator::absent_op(const char* op) const {
  return Status(LOOM_ERR_UNSUPPORTED, "collective plugin '" + owner_->descriptor().name + "' leaves out " + op +
                                          " (its absent_ops); choose a collective that offers it (`loom plugins "
                                          "info NAME` lists each one's operations)");
}

Status Communicator::inline_failed(loom_status code, const char* call) const {
  Status done = owner_->error(code, call, comm_);  // read last_error before another call replaces it
  // As in blocking(): the plugin may already have aborted (nothing is left to
  // wait on), and abort is idempotent, so the outcome is the same either way.
  if (code == LOOM_ERR_TIMEOUT) owner_->vtable().comm_abort(comm_);
  return done;
}

// The call must run before raw is read: two statements, not two arguments.
#define LOOM_POST(bit, name, call)                   \
  if (absent_ & (bit)) return absent_op(name);        \
  loom_request* raw = nullptr;                        \
  loom_status code = owner_->vtable().call;           \
  return posted(code, raw, request)

Status Communicator::iallreduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                                Request* request) {
  LOOM_POST(LOOM_OP_ALLREDUCE, "allreduce", allreduce(comm_, send, recv, count, dtype, op, &raw));
}
Status Communicator::ibroadcast(const void* send, void* recv, uint64_t count, loom_dtype dtype, int32_t root,
                                Request* request) {
  LOOM_POST(LOOM_OP_BROADCAST, "broadcast", broadcast(comm_, send, recv, count, dtype, root, &raw));
}
Status Communicator::ireduce(const void* send, void* recv, uint64_t count, loom_dtype dtype, loom_reduce_op op,
                             int32_t root, Request* request) {
  LOOM_POST(LOOM_OP_REDUCE, "reduce", reduce(comm_, send, recv, count, dtype, op, root, &raw));
}
Status Communicator::iallgather(const void* send, void* recv, uint64_t sendcount, loom_dtype dtype, Request* request) {
  LOOM_POST(LOOM_OP_ALLGATHER, "allgather", allgather(comm_, send, recv, sendcount, dtype, &raw));
}
Status Communicator::ireduce_scatter(const void* send, void* recv, uint64_t recvcount, loom_dtype dtype,
                                     loom_reduce_op op, Request* request) {
  LOOM_POST(LOOM_OP_REDUCE_SCATTER, "reduce_scatter", reduce_scatter(comm_, send, recv, recvcount, dtype, op, &raw));
}
Status Communicator::ialltoall(const void* send, void* recv, uint64_t count, loom_dtype dtype, Request* request) {
  LOOM_POST(LOOM_OP_ALLTOALL, "alltoall", alltoall(comm_, send, recv, count, dtype, &raw));
}
Status Communicator::ibarrier(Request* request) { LOOM_POST(LOOM_OP_BARRIER, "barrier", barrier(comm_, &raw)); }
Status Communicator::isend(const void* buf, uint64_t count, loom_dtype dtype, int32_t peer, Request* request) {
  LOOM_POST(LOOM_OP_SEND_RECV, "send", send(comm_, buf, count, dtype, peer, &raw));
}
Status Communicator::irecv(void* buf, uint64_t count, loom_dtype dtype, int32_t peer, Request* request) {
  LOOM_POST(LOOM_OP_SEND_RECV, "recv", recv(comm_, buf, count, dtype, peer, &raw));
}
bool Communicator::offers_scaled_allreduce() const {
  // The loader refused plugins that set the bit without the function.
  return owner_->has_capability(LOOM_CAP_SCALED_ALLREDUCE) && vtable_->struct_size >= LOOM_COLLECTIVE_V1_3_SIZE &&
         vtable_->allreduce_scaled != nullptr;
}
Status Communicator::iallreduce_scaled(const void* send, void* recv, uint64_t count, loom_dtype dtype, double scale,
                                       Request* request) {
  if (!offers_scaled_allreduce())
    return Status(LOOM_ERR_UNSUPPORTED, "collective plugin '" + owner_->descriptor().name +
                                            "' does not offer allreduce_scaled (ABI 1.3, capability "
                                            "scaled-allreduce); use allreduce with SUM and scale the result");
  LOOM_POST(0, "allreduce_scaled", allreduce_scaled(comm_, send, recv, count, dtype, scale, &raw));
}
#undef LOOM_POST
bool Communicator::offers_stats() const { return owner_->descriptor().comm_stats; }
Status Communicator::stats(loom_comm_stats_v1* out) const {
  if (!offers_stats())
    return Status(LOOM_ERR_UNSUPPORTED, "collective plugin '" + owner_->descriptor().name +
                                            "' does not count its traffic (no comm_stats, ABI 1.11)");
  *out = loom_comm_stats_v1{};
  out->struct_size = sizeof *out;
  const loom_status s = vtable_->comm_stats(comm_, out);
  if (s != LOOM_OK) return Status(s, "comm_stats on collective plugin '" + owner_->descriptor().name + "' failed");
  return Status();
}

// The blocking forms' post + wait (the inline case is in the header). A
// blocking call has no request to hand out: it lives on this frame.
#define LOOM_POST_WAIT(post_call) \
  Request r;                      \
  return blocking(post_call, &r)

Status Communicator::allreduce_scaled(const void* send, void* recv, uint64_t count, loom_dtype dtype,
                                      double scale) {
  LOOM_POST_WAIT(iallreduce_scaled(send, recv, count, dtype, scale, &r));
}
Status Communicator::post_wait_allreduce(const void* send, void* recv, uint64_t count, loom_dtype dtype,
                                         loom_reduce_op op) {
  LOOM_POST_WAIT(iallreduce(send, recv, count, dtype, op, &r));
}
Status Communicator::post_wait_broadcast(const void* send, void* recv, uint64_t count, loom_dtype dtype,
                                         int32_t root) {
  LOOM_POST_WAIT(ibroadcast(send, recv, count, dtype, root, &r));
}
Status Communicator::post_wait_reduce(const void* send, void* recv, uint64_t count, loom_dtype dtype,
                                      loom_reduce_op op, int32_t root) {
  LOOM_POST_WAIT(ireduce(send, recv, count, dtype, op, root, &r));
}
Status Communicator::post_wait_allgather(const void* send, void* recv, uint64_t sendcount, loom_dtype dtype) {
  LOOM_POST_WAIT(iallgather(send, recv, sendcount, dtype, &r));
}
Status Communicator::post_wait_reduce_scatter(const void* send, void* recv, uint64_t recvcount, loom_dtype dtype,
                                              loom_reduce_op op) {
  LOOM_POST_WAIT(ireduce_scatter(send, recv, recvcount, dtype, op, &r));
}
Status Communicator::post_wait_alltoall(const void* send, void* recv, uint64_t count, loom_dtype dtype) {
  LOOM_POST_WAIT(ialltoall(send, recv, count, dtype, &r));
}
Status Communicator::post_wait_barrier() { LOOM_POST_WAIT(ibarrier(&r)); }
Status Communicator::post_wait_send(const void* buf, uint64_t count, loom_dtype dtype, int32_t peer) {
  LOOM_POST_WAIT(isend(buf, count, dtype, peer, &r));
}
Status Communicator::post_wait_recv(void* buf, uint64_t count, loom_dtype dtype, int32_t peer) {
  LOOM_POST_WAIT(irecv(buf, count, dtype, peer, &r));
}
#undef LOOM_POST_WAIT

Status Communicator::abort() {
  loom_status code = owner_->vtable().comm_abort(comm_);
  return code == LOOM_OK ? Status::ok() : owner_->error(code, "comm_abort");  // last_error: any thread
}

// ---- Collective -----------------------------------------------------------------

Status Collective::error(loom_status code, const char* call, loom_comm* comm) const {
  const char* message = comm != nullptr && descriptor_.comm_last_error ? vtable_->comm_last_error(comm)
                                                                        : vtable_->last_error(ctx_);
  std::string text = message && *message ? message : std::string(call) + " failed";
  return Status(code, text);
}

namespace {

struct OobThunk {
  std::function<Status(const void*, size_t, void*, int64_t)> fn;
  static loom_status call(void* user, const void* send, size_t len, void* recv, int64_t timeout_ms) {
    try {
      return static_cast<OobThunk*>(user)->fn(send, len, recv, timeout_ms).code();
    } catch (...) {  // nothing may unwind through the plugin
      return LOOM_ERR_INTERNAL;
    }
  }
};

}  // namespace

Status Collective::create_comm(const CommOptions& options, std::unique_ptr<Communicator>* comm) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return Status(LOOM_ERR_INVALID_ARGUMENT, "rank " + std::to_string(options.rank) + " of size " +
                                                 std::to_string(options.size) + " is not a valid member");
  }
  OobThunk thunk{options.oob ? options.oob : default_oob(options)};
  loom_oob_v1 oob{sizeof(loom_oob_v1), &thunk, &OobThunk::call};
  loom_comm_config_v1 config{};
  config.struct_size = sizeof config;
  config.rank = options.rank;
  config.size = options.size;
  config.device_type = options.device_type;
  config.oob = thunk.fn ? &oob : nullptr;
  config.timeout_ms = options.timeout.count();
  config.name = options.name.c_str();
  config.device_id = options.device_id;
  config.stream = options.stream;
  loom_comm* raw = nullptr;
  loom_status code = vtable_->comm_create(ctx_, &config, &raw);
  if (code != LOOM_OK) return error(code, "comm_create");
  comm->reset(new Communicator(shared_from_this(), raw, options));
  return Status::ok();
}

// ---- Names ----------------------------------------------------------------------

namespace {
const std::pair<loom_dtype, const char*> kDtypes[] = {
    {LOOM_DTYPE_F16, "f16"}, {LOOM_DTYPE_BF16, "bf16"}, {LOOM_DTYPE_F32, "f32"}, {LOOM_DTYPE_F64, "f64"},
    {LOOM_DTYPE_I8, "i8"},   {LOOM_DTYPE_U8, "u8"},     {LOOM_DTYPE_I32, "i32"}, {LOOM_DTYPE_I64, "i64"}};
const std::pair<loom_reduce_op, const char*> kOps[] = {{LOOM_REDUCE_SUM, "sum"},
                                                       {LOOM_REDUCE_PROD, "prod"},
                                                       {LOOM_REDUCE_MIN, "min"},
                                                       {LOOM_REDUCE_MAX, "max"},
                                                       {LOOM_REDUCE_AVG, "avg"}};
}  // namespace

const char* dtype_name(loom_dtype dtype) {
  for (const auto& [d, n] : kDtypes) if (d == dtype) return n;
  return "unknown";
}
const char* reduce_op_name(loom_reduce_op op) {
  for (const auto& [o, n] : kOps) if (o == op) return n;
  return "unknown";
}
loom_dtype parse_dtype(const std::string& word) {
  for (const auto& [d, n] : kDtypes) if (word == n) return d;
  return 0;
}
loom_reduce_op parse_reduce_op(const std::string& word) {
  for (const auto& [o, n] : kOps) if (word == n) return o;
  return 0;
}

}  // namespace loom

// SPDX-License-Identifier: Apache-2.0
// run_op.cpp: blocking and non-blocking completion with bounded waits.
#include "run_op.hpp"

#include <chrono>
#include <thread>

#include "world.hpp"

namespace conformance {

const char* mode_label(Mode mode) {
  switch (mode) {
    case Mode::kBlocking: return "blocking";
    case Mode::kPostWait: return "postwait";
    default: return "nonblocking";
  }
}

const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes{Mode::kBlocking, Mode::kPostWait, Mode::kNonBlocking};
  return modes;
}

bool redundant_mode(Mode mode) { return mode == Mode::kPostWait && !World::comm().completes_inline(); }

namespace {

// Post, then wait() at once; a request that is still pending is abandoned.
loom::Status post_wait(const PostCall& post, int64_t timeout_ms) {
  loom::Request request;
  loom::Status posted = post(&request);
  if (!posted.is_ok()) return posted;
  if (!request.valid()) return loom::Status(LOOM_ERR_INTERNAL, "the post returned OK but handed out no request");
  loom::Status waited = request.wait(timeout_ms);
  if (waited.code() == LOOM_ERR_TIMEOUT) abandon(std::move(request));
  return waited;
}

}  // namespace

loom::Status run(Mode mode, const BlockingCall& blocking, const PostCall& post) {
  if (mode == Mode::kBlocking) return blocking();
  if (mode == Mode::kPostWait) return post_wait(post, World::timeout_ms());
  loom::Request request;
  loom::Status posted = post(&request);
  if (!posted.is_ok()) return posted;
  if (!request.valid()) return loom::Status(LOOM_ERR_INTERNAL, "the post returned OK but handed out no request");
  return complete(request, World::timeout_ms());
}

loom::Status complete_all(const std::vector<loom::Request*>& requests, int64_t timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<bool> done(requests.size(), false);
  std::vector<loom::Status> tested(requests.size());
  std::vector<bool> contract_broken(requests.size(), false);
  size_t remaining = requests.size();
  for (int spin = 0; remaining > 0; ++spin) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      bool finished = false;
      loom::Status s = requests[i]->test(&finished);
      if (!finished && !s.is_ok()) {  // test() must return OK while the operation runs
        tested[i] = loom::Status(LOOM_ERR_INTERNAL, "test() returned " + s.to_string() + " with done = 0");
        contract_broken[i] = true;
        finished = true;
      } else if (finished) {
        tested[i] = s;
      }
      if (finished) {
        done[i] = true;
        --remaining;
      }
    }
    if (remaining == 0 || Clock::now() > deadline) break;
    // Give the CPU to peers on an oversubscribed node once the fast path failed.
    if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    else std::this_thread::yield();
  }
  loom::Status first;
  for (size_t i = 0; i < requests.size(); ++i) {
    loom::Status result;
    if (!done[i]) {
      result = loom::Status(LOOM_ERR_TIMEOUT,
                            "test() did not report done within " + std::to_string(timeout_ms) + " ms");
      abandon(std::move(*requests[i]));
    } else {
      // Once test() said done, wait() must return at once with the same status.
      const loom::Status waited = requests[i]->wait(timeout_ms);
      if (contract_broken[i]) {
        result = tested[i];
      } else if (waited.code() != tested[i].code()) {
        result = loom::Status(LOOM_ERR_INTERNAL, "test() finished with " + tested[i].to_string() +
                                                     " but wait() then returned " + waited.to_string());
      } else {
        result = tested[i];
      }
      if (waited.code() == LOOM_ERR_TIMEOUT) abandon(std::move(*requests[i]));
      else requests[i]->reset();
    }
    if (first.is_ok() && !result.is_ok()) first = result;
  }
  return first;
}

void abandon(loom::Request&& request) {
  if (request.valid()) new loom::Request(std::move(request));  // deliberately never freed
}

loom::Status ring_exchange(loom::Communicator& comm, Mode mode, const void* send, void* recv, uint64_t count,
                           loom_dtype dtype, int64_t timeout_ms) {
  const int32_t next = (comm.rank() + 1) % comm.size();
  const int32_t prev = (comm.rank() + comm.size() - 1) % comm.size();
  if (mode == Mode::kNonBlocking) {
    loom::Request r, s;
    loom::Status posted = comm.irecv(recv, count, dtype, prev, &r);
    if (!posted.is_ok()) return posted;
    posted = comm.isend(send, count, dtype, next, &s);
    if (!posted.is_ok()) {
      loom::Status cleanup = complete(r, 1000);  // cannot finish without the send: abandoned
      (void)cleanup;
      return posted;
    }
    return complete_all({&r, &s}, timeout_ms);
  }
  auto do_send = [&] {
    if (mode == Mode::kBlocking) return comm.send(send, count, dtype, next);
    return post_wait([&](loom::Request* q) { return comm.isend(send, count, dtype, next, q); }, timeout_ms);
  };
  auto do_recv = [&] {
    if (mode == Mode::kBlocking) return comm.recv(recv, count, dtype, prev);
    return post_wait([&](loom::Request* q) { return comm.irecv(recv, count, dtype, prev, q); }, timeout_ms);
  };
  if (comm.rank() == 0) {
    loom::Status s = do_send();
    loom::Status r = do_recv();
    return s.is_ok() ? r : s;
  }
  loom::Status r = do_recv();
  loom::Status s = do_send();
  return r.is_ok() ? s : r;
}

}  // namespace conformance

// SPDX-License-Identifier: Apache-2.0
// run_op.hpp: how a case drives an operation to completion, blocking or not,
// always within the suite's timeout (a mismatch gives TIMEOUT, not a hang).
//
// Thread safety: one thread per communicator, as loom/collective.h requires.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "loom/collective.hpp"

namespace conformance {

// kBlocking: the Communicator's blocking form, which for a plugin declaring
// LOOM_CAP_INLINE_COMPLETION is one call with request == NULL.
// kPostWait: post, then wait() at once, the blocking form of the other
// plugins; for those it repeats kBlocking, so such cases skip (SKIP_REDUNDANT).
// kNonBlocking: post, test() until done, then wait().
enum class Mode { kBlocking, kPostWait, kNonBlocking };
const char* mode_label(Mode mode);  // "blocking" / "postwait" / "nonblocking"
inline void PrintTo(Mode mode, std::ostream* os) { *os << mode_label(mode); }
// Every mode, in the order above: what data cases run in.
const std::vector<Mode>& all_modes();
// True for kPostWait on a plugin without inline completion.
bool redundant_mode(Mode mode);
#define CONFORMANCE_SKIP_REDUNDANT(mode) \
  if (redundant_mode(mode)) GTEST_SKIP() << "postwait repeats blocking for a plugin without inline completion"

using BlockingCall = std::function<loom::Status()>;
using PostCall = std::function<loom::Status(loom::Request*)>;

// kBlocking: calls blocking(). kPostWait: post(&request), then wait().
// kNonBlocking: post(&request), then test() until done (bounded by
// timeout_ms), then wait(), whose status must equal the one test() reported.
loom::Status run(Mode mode, const BlockingCall& blocking, const PostCall& post);

// Polls test() on every request, round robin, until all are done or
// timeout_ms passes, then wait()s each and frees it. The first failure wins;
// a request that never finished is abandoned (see below) and gives TIMEOUT.
loom::Status complete_all(const std::vector<loom::Request*>& requests, int64_t timeout_ms);
inline loom::Status complete(loom::Request& request, int64_t timeout_ms) {
  return complete_all({&request}, timeout_ms);
}

// Keeps an unfinished request alive for the rest of the process: the
// contract only allows freeing a finished request (or one of an aborted
// communicator), and one broken case must not crash the suite.
void abandon(loom::Request&& request);

// Point to point in a ring: sends `count` elements of send to rank + 1 and
// receives as many from rank - 1 into recv. Non-blocking: both posted, then
// completed together. Blocking and post-wait (size > 1): rank 0 sends then
// receives, the others receive then send, so no rank needs a buffered send.
loom::Status ring_exchange(loom::Communicator& comm, Mode mode, const void* send, void* recv, uint64_t count,
                           loom_dtype dtype, int64_t timeout_ms);

}  // namespace conformance

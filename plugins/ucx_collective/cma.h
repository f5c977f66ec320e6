/* SPDX-License-Identifier: Apache-2.0 */
// Single-copy transfers between processes of one host (Linux cross-memory
// attach, process_vm_readv), for large messages.
//
// Why not UCX's own CMA: UCX 1.13 uses CMA only for endpoints without error
// handling; with UCP_ERR_HANDLING_MODE_PEER (needed to survive dead peers)
// large messages go through the shared-memory FIFO, copied twice. Here the
// sender tag-sends a small descriptor (address, length) instead of the data;
// the receiver reads the data straight from the sender's memory into its
// own buffer and answers with an acknowledgement, after which the sender's
// buffer is free again. Both sides decide alike whether a message goes this
// way: by its size and by whether the two ranks share a host, a PID
// namespace and a user (exchanged in comm_create), so a disagreement can
// only come from differing arguments, which the receiver sees as a wrong
// length (INVALID_ARGUMENT), as before. A dead sender makes the read fail
// (ESRCH) and a dead receiver is found by UCX's keepalive, as for any
// transfer.
#ifndef LOOM_UCX_CMA_H
#define LOOM_UCX_CMA_H

#include <sys/types.h>

#include <cstdint>

namespace loom_ucx {

// What a rank tells the others about itself in comm_create. pid 0: this
// process cannot use cross-memory attach (Yama ptrace_scope above 0, or the
// syscall is filtered).
struct CmaIdentity {
  int32_t pid;
  uint32_t uid;
  uint64_t pid_namespace;  // inode of /proc/self/ns/pid
  char boot_id[40];        // /proc/sys/kernel/random/boot_id: one per host and boot
};
static_assert(sizeof(CmaIdentity) == 56, "CmaIdentity is a wire format");

// This process's identity; pid 0 when a test read of its own memory fails.
CmaIdentity cma_self();

// Whether messages between processes a and b may go by cross-memory attach.
// Symmetric, so both ends agree.
bool cma_between(const CmaIdentity &a, const CmaIdentity &b);

// Whether a and b run on one host (one boot) in one PID namespace, so that
// a process id of one names the same process for the other; cma.pid may be
// 0 (cross-memory attach refused) and the answer still true.
bool same_pid_space(const CmaIdentity &a, const CmaIdentity &b);

// Reads len bytes at remote address `from` of process pid into `to`.
// Returns 0 or the errno of the failure.
int cma_read(pid_t pid, uint64_t from, void *to, uint64_t len);

}  // namespace loom_ucx

#endif  // LOOM_UCX_CMA_H

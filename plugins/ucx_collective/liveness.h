/* SPDX-License-Identifier: Apache-2.0 */
// Whether a member's process on this host still runs, read from /proc.
//
// Why the plugin looks itself: on shared memory, UCX's keepalive decides a
// peer is alive when /proc/PID/stat still shows the start time it saw at
// connect, and an exited process that its parent has not reaped yet (a
// zombie) keeps that file. A rank whose launcher waits on another child
// first then looks alive to UCX for as long as the launcher waits: a swarm
// peer waited out its 30 s deadline on a mate that had exited (CI, session
// 33). A zombie's state letter is Z, which UCX does not read; this does.
#ifndef LOOM_UCX_LIVENESS_H
#define LOOM_UCX_LIVENESS_H

#include <sys/types.h>

#include <cstdint>

namespace loom_ucx {

// A process as first seen: pid 0 means not watched (another host, another
// PID namespace, or /proc unreadable for it).
struct ProcessWatch {
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/PID/stat field 22: tells a reused pid apart
};

// Starts watching pid; an unwatched ProcessWatch when its /proc entry cannot be read.
ProcessWatch watch_process(pid_t pid);

enum class ProcessState {
  kRunning,   // or sleeping, stopped: anything that may still answer
  kExited,    // a zombie: exited, not yet reaped
  kGone,      // no such process, or the pid now names another one
  kUnknown,   // /proc could not be read for another reason (permissions)
};

ProcessState process_state(const ProcessWatch &w);

// The state letter and start time of /proc/PID/stat's text (the command
// name, in parentheses, may itself hold spaces and parentheses); false when
// the text is not in that format. Exposed for tests.
bool parse_proc_stat(const char *text, char *state, uint64_t *start_time);

}  // namespace loom_ucx

#endif  // LOOM_UCX_LIVENESS_H

/* SPDX-License-Identifier: Apache-2.0 */
// Names the calling thread, so that top -H, ps -L, /proc/PID/task/*/comm
// and gdb tell a peer's threads apart (every one read "loom" before, and
// a peer's CPU time could not be split by what spent it).
#ifndef LOOM_COLLAB_THREAD_NAME_H
#define LOOM_COLLAB_THREAD_NAME_H

#include <pthread.h>

namespace loom_collab {

// name: at most 15 characters (the kernel's limit); a longer one is left
// unset rather than cut.
inline void name_this_thread(const char *name) { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace loom_collab

#endif

// SPDX-License-Identifier: Apache-2.0
// /proc/PID/stat, read for the liveness of members on this host (liveness.h).
#include "liveness.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace loom_ucx {
namespace {

// The state letter and start time in /proc/PID/stat; errno when it could
// not be read (EPROTO: not in the expected format), else 0.
int read_stat(pid_t pid, char *state, uint64_t *start_time) {
  char path[64], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n;
  do n = ::read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  if (err) return err;
  buf[n] = '\0';
  return parse_proc_stat(buf, state, start_time) ? 0 : EPROTO;
}

}  // namespace

bool parse_proc_stat(const char *text, char *state, uint64_t *start_time) {
  const char *p = std::strrchr(text, ')');  // the name ends at the last one
  if (!p) return false;
  // After the name: state (field 3), then fields 4 to 21, then starttime.
  char s = 0;
  uint64_t start = 0;
  if (std::sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %" SCNu64, &s,
                  &start) != 2)
    return false;
  *state = s;
  *start_time = start;
  return true;
}

ProcessWatch watch_process(pid_t pid) {
  ProcessWatch w;
  char state = 0;
  uint64_t start = 0;
  if (pid <= 0 || read_stat(pid, &state, &start) != 0) return w;
  w.pid = pid;
  w.start_time = start;
  return w;
}

ProcessState process_state(const ProcessWatch &w) {
  if (w.pid <= 0) return ProcessState::kUnknown;
  char state = 0;
  uint64_t start = 0;
  if (const int err = read_stat(w.pid, &state, &start))
    return err == ENOENT || err == ESRCH ? ProcessState::kGone : ProcessState::kUnknown;
  if (start != w.start_time) return ProcessState::kGone;  // the pid was reused
  return state == 'Z' || state == 'X' ? ProcessState::kExited : ProcessState::kRunning;
}

}  // namespace loom_ucx

// SPDX-License-Identifier: Apache-2.0
// The ucx plugin's reading of /proc/PID/stat (plugins/ucx_collective/
// liveness.h): a running process, a zombie, a reaped one, a reused pid, and
// command names that hold spaces and parentheses.
#include "liveness.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace loom_ucx {
namespace {

TEST(Liveness, ParsesTheStateAndStartTimeAfterTheLastParenthesis) {
  char state = 0;
  uint64_t start = 0;
  ASSERT_TRUE(parse_proc_stat("42 (a) b (c)) Z 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654321 0 0", &state,
                              &start));
  EXPECT_EQ(state, 'Z');
  EXPECT_EQ(start, 987654321u);
  EXPECT_FALSE(parse_proc_stat("42 no parenthesis S 1", &state, &start));
  EXPECT_FALSE(parse_proc_stat("42 (cut) S 1 2", &state, &start));
}

TEST(Liveness, ARunningProcessThenItsZombieThenNothing) {
  const ProcessWatch self = watch_process(getpid());
  ASSERT_EQ(self.pid, getpid());
  EXPECT_EQ(process_state(self), ProcessState::kRunning);

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  const ProcessWatch w = watch_process(child);
  ASSERT_EQ(w.pid, child);
  EXPECT_EQ(process_state(w), ProcessState::kRunning);
  kill(child, SIGKILL);
  ProcessState st = ProcessState::kRunning;
  for (int i = 0; i < 500 && st == ProcessState::kRunning; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = process_state(w);
  }
  EXPECT_EQ(st, ProcessState::kExited) << "a killed, unreaped child is a zombie";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(process_state(w), ProcessState::kGone);
}

TEST(Liveness, APidThatNamesAnotherProcessIsGone) {
  ProcessWatch w = watch_process(getpid());
  ASSERT_NE(w.pid, 0);
  w.start_time += 1;  // as if the pid had been reused since
  EXPECT_EQ(process_state(w), ProcessState::kGone);
  EXPECT_EQ(watch_process(0).pid, 0);
  EXPECT_EQ(process_state(ProcessWatch{}), ProcessState::kUnknown);
}

}  // namespace
}  // namespace loom_ucx

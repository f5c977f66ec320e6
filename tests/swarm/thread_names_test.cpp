// SPDX-License-Identifier: Apache-2.0
// A running peer's threads carry the names the collab strategy gives them
// (thread_name.h), so that top -H and ps -L split its CPU by what spends it.
#include <gtest/gtest.h>

#include <csignal>
#include <dirent.h>

#include <set>

#include "swarm.hpp"

namespace loom::swarm {
namespace {

// The names of a process's threads, from /proc/PID/task/*/comm.
std::multiset<std::string> thread_names(int pid) {
  std::multiset<std::string> names;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (!dir) return names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::string name = read_text(tasks + "/" + e->d_name + "/comm");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    if (!name.empty()) names.insert(name);
  }
  closedir(dir);
  return names;
}

TEST(ThreadNames, APeersThreadsCarryTheirNames) {
  Scratch scratch;
  auto peers = start_teacher_swarm(scratch, 2, teacher_round_sets("thread-names", 2, 1 << 20));
  ASSERT_EQ(peers.size(), 2u) << peers[0]->tail();
  for (auto& p : peers)
    ASSERT_TRUE(wait_until([&] { return p->log().find("averaged gradients of") != std::string::npos; }, seconds(60)))
        << p->tail();
  const auto names = thread_names(peers[0]->pid());
  std::string all;
  for (const auto& n : names) all += n + " ";
  EXPECT_EQ(read_text("/proc/" + std::to_string(peers[0]->pid()) + "/comm"), "loom\n") << "not the peer's process";
  EXPECT_EQ(names.count("collab-bg"), 1u) << all;     // progress: reads, publishes
  EXPECT_EQ(names.count("collab-serve"), 1u) << all;  // the state server's front
  EXPECT_EQ(names.count("collab-sum"), 1u) << all;    // its digests
  EXPECT_GE(names.count("loom"), 1u) << all;          // the training thread keeps the process's name
  for (auto& p : peers) p->signal(SIGTERM);
  for (auto& p : peers) EXPECT_EQ(p->wait_exit(seconds(30)), 0) << p->tail();
}

}  // namespace
}  // namespace loom::swarm

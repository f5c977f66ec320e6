// SPDX-License-Identifier: Apache-2.0
// Where a `loom launch` job listens: --master-addr must be an address of this
// machine (exit code 2 otherwise), and with the default 127.0.0.1 and the
// ucx collective told listen = "127.0.0.1", no rank holds a listening
// socket on any other address.
#include <gtest/gtest.h>

#include <signal.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "../support/listening.hpp"
#include "loom/launch.hpp"
#include "../support/subprocess.hpp"
#include "test_paths.hpp"
#include "../train/train_support.hpp"

namespace loom::test {
namespace {

using namespace std::chrono_literals;

// The processes whose parent is pid (the launcher's ranks).
std::vector<int> children_of(int pid) {
  std::vector<int> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* e = readdir(proc)) {
    const int child = std::atoi(e->d_name);
    if (child <= 0) continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');  // the command may hold spaces
    if (paren == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && ppid == pid) found.push_back(child);
  }
  closedir(proc);
  return found;
}

TEST(Launch, AMasterAddrThatIsNoAddressOfThisMachineExitsWithCode2) {
  for (const char* addr : {"198.51.100.7", "no-such-host.invalid"}) {
    auto r = run_process({kLoomBinary, "launch", "-n", "2", "--master-addr", addr, "--", "true"}, {}, 30s);
    EXPECT_EQ(r.exit_code, 2) << addr << ": " << r.err;
    EXPECT_NE(r.err.find(std::string("--master-addr '") + addr + "' is not valid"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("127.0.0.1"), std::string::npos) << r.err;
  }
}

// A connection to 127.0.0.1:port, or -1.
int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  ::close(fd);
  return -1;
}

// Sends junk on a fresh connection: whether the server closed it within 10 s.
bool junk_is_dropped(int port, const std::string& junk) {
  const int fd = connect_loopback(port);
  if (fd < 0) return false;
  ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  char byte;
  const bool closed = ::poll(&p, 1, 10000) == 1 && ::recv(fd, &byte, 1, 0) <= 0;
  ::close(fd);
  return closed;
}

// The launcher's store is reachable by anyone on its address: junk sent to
// it drops that connection only, and the job trains on to its end.
TEST(Launch, TheStoreDropsJunkClientsAndTheJobStillTrains) {
  TempDir dir;
  const std::string cfg = (dir.path / "t.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\nmax_steps = 20\nthreads = 1\nlog_every = 10\n"
                        "output_dir = \"" << (dir.path / "run").string()
                     << "\"\n[task]\nsamples = 512\nhidden = 8\n[strategy]\nname = \"ddp\"\n[collective]\nname = "
                        "\"ucx\"\n[collective.options]\nlisten = \"127.0.0.1\"\n";
  const std::string log = (dir.path / "launch.log").string();
  const int port = pick_free_port();
  Child launcher({kLoomBinary, "launch", "-n", "2", "--master-port", std::to_string(port), "--", kLoomBinary, "train", cfg},
                 kNoJob, log);
  int idle = -1;  // held open all along, as a stray client might
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (idle < 0 && std::chrono::steady_clock::now() < deadline) {
    idle = connect_loopback(port);
    if (idle < 0) std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(idle, 0) << "the launcher's store never accepted a connection";
  const std::string u64_max(8, '\xff');
  EXPECT_TRUE(junk_is_dropped(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));       // no query type
  EXPECT_TRUE(junk_is_dropped(port, std::string(1, '\0') + u64_max));              // SET with a 16 EiB key
  EXPECT_TRUE(junk_is_dropped(port, std::string(1, '\5') + u64_max));              // WAIT on 2^64 keys
  std::string random(4096, '\0');
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>((i * 2654435761u) >> 13);
  EXPECT_TRUE(junk_is_dropped(port, random));
  const int status = launcher.wait(120s);
  ::close(idle);
  const std::string out = run_process({"/bin/cat", log}).out;
  ASSERT_NE(status, -1) << "the job did not end:\n" << out;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_NE(out.find("rendezvous store: dropped a connection"), std::string::npos) << out;
}

// The rendezvous store is served by the launcher itself (c10d 1.13's own
// server, in rank 0, would listen on every interface): it must be on
// 127.0.0.1 too, and the ranks hold only UCX's listeners, there whether the
// collective is told listen = "127.0.0.1" or takes it from --master-addr.
class LaunchListen : public testing::TestWithParam<bool> {};

TEST_P(LaunchListen, AUcxJobOnLoopbackListensOnlyOnLoopback) {
  TempDir dir;
  const std::string cfg = (dir.path / "t.toml").string();
  std::ofstream(cfg) << "[trainer]\ntask = \"teacher\"\nmax_steps = 1000000\nthreads = 1\nlog_every = 1000\n"
                        "output_dir = \"" << (dir.path / "run").string()
                     << "\"\n[task]\nsamples = 512\nhidden = 8\n[strategy]\nname = \"ddp\"\n[collective]\nname = "
                        "\"ucx\"\n"
                     << (GetParam() ? "[collective.options]\nlisten = \"127.0.0.1\"\n" : "");
  const std::string log = (dir.path / "launch.log").string();
  Child launcher({kLoomBinary, "launch", "-n", "2", "--", kLoomBinary, "train", cfg}, kNoJob, log);
  // Sample the sockets while the job runs, until the store (the launcher)
  // and UCX's listener (every rank) have shown up.
  std::vector<ListeningSocket> seen;
  std::vector<int> ranks;
  std::map<int, std::set<std::string>> per_rank;
  const auto deadline = std::chrono::steady_clock::now() + 90s;  // ranks take ~30 s to start on a loaded machine
  while (std::chrono::steady_clock::now() < deadline && launcher.running()) {
    if (ranks.size() < 2) ranks = children_of(launcher.pid());
    std::vector<int> pids = ranks;
    pids.push_back(launcher.pid());
    std::string why;
    for (const auto& s : listening_sockets(pids, &why)) {
      if (per_rank[s.pid].insert(s.protocol + " " + s.host + ":" + std::to_string(s.port)).second) seen.push_back(s);
    }
    ASSERT_TRUE(why.empty()) << why;
    if (ranks.size() == 2 && !per_rank[ranks[0]].empty() && !per_rank[ranks[1]].empty() &&
        !per_rank[launcher.pid()].empty()) {
      break;
    }
    std::this_thread::sleep_for(300ms);
  }
  const bool ran = launcher.running();
  for (int pid : ranks) ::kill(pid, SIGKILL);
  launcher.kill(SIGKILL);
  ASSERT_TRUE(ran) << "the job ended early:\n" << run_process({"/bin/cat", log}).out;
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& s : seen) {
    EXPECT_TRUE(is_loopback(s.host)) << "bound beyond 127.0.0.1: " << s.line;
    std::printf("[ sockets  ] %s\n", s.line.c_str());
  }
  EXPECT_FALSE(per_rank[launcher.pid()].empty()) << "ss did not show the launcher's store";
  EXPECT_GE(seen.size(), 3u) << "ss did not show the store and UCX's listeners";
}

INSTANTIATE_TEST_SUITE_P(Collective, LaunchListen, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "ToldListen" : "ListenFromMasterAddr");
                         });

}  // namespace
}  // namespace loom::test

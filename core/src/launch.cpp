// SPDX-License-Identifier: Apache-2.0
#include "loom/launch.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>

#include "listen_address.h"
#include "loom/status.hpp"
#include "stop.hpp"
#include "store_server.hpp"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;        // read ends of its stdout and stderr
  std::string out_line, err_line;  // partial lines not yet printed
  bool running = true;
  int status = 0;
};

// A stop request (Ctrl-C, SIGTERM) to the launcher is forwarded to the ranks.
volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int signo) { g_stop_signal = signo; }

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));
    return std::string("was killed by ") + (abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(WTERMSIG(status)));
  }
  return "ended with status " + std::to_string(status);
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// Prints complete lines of buf with the rank prefix; keeps the rest.
void flush_lines(std::string* buf, int rank, std::ostream& os, bool all) {
  size_t start = 0, nl;
  while ((nl = buf->find('\n', start)) != std::string::npos) {
    os << "[rank " << rank << "] " << buf->substr(start, nl - start) << '\n';
    start = nl + 1;
  }
  buf->erase(0, start);
  if (all && !buf->empty()) {
    os << "[rank " << rank << "] " << *buf << '\n';
    buf->clear();
  }
  os.flush();
}

bool on_path(const std::string& command) {
  if (command.find('/') != std::string::npos) return access(command.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (access(((dir.empty() ? "." : dir) + "/" + command).c_str(), X_OK) == 0) return true;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return false;
}

void start_rank(Rank* r, const LaunchOptions& o, int port) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw Error::runtime(std::string("cannot create pipes: ") + std::strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) throw Error::runtime(std::string("cannot fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so stopping a rank stops what it started too
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // and a launcher killed outright takes its ranks along
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    setenv("RANK", std::to_string(r->rank).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(r->rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
    setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("LOOM_STORE_HOSTED", "1", 1);  // the launcher serves the store: every rank is a client
    // Every rank runs here, so the store's address is one they all reach:
    // the collectives listen only there too, unless told otherwise.
    setenv("LOOM_LISTEN", o.master_addr.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the child's own call
  close(out[1]);
  close(err[1]);
  r->pid = pid;
  r->out = out[0];
  r->err = err[0];
}

void signal_all(std::vector<Rank>& ranks, int signo) {
  for (auto& r : ranks) {
    if (r.running) killpg(r.pid, signo);
  }
}

// Whether nothing holds TCP port `port` on any IPv4 or IPv6 address now
// (bound without SO_REUSEADDR, so a port in TIME_WAIT counts as taken).
bool port_is_free(int port) {
  const int fd4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd4 < 0) return false;
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(static_cast<uint16_t>(port));
  const bool free4 = bind(fd4, reinterpret_cast<sockaddr*>(&a4), sizeof a4) == 0;
  close(fd4);
  if (!free4) return false;
  const int fd6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd6 < 0) return errno == EAFNOSUPPORT;  // no IPv6 here: nothing can hold it there
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_any;
  a6.sin6_port = htons(static_cast<uint16_t>(port));
  // EADDRNOTAVAIL: IPv6 is switched off, so nothing can hold the port there.
  const bool free6 = bind(fd6, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0 || errno == EADDRNOTAVAIL;
  close(fd6);
  return free6;
}

}  // namespace

// Why not port 0: the kernel hands out a port from its ephemeral range, and
// between this choice and rank 0's TCPStore bind any outgoing connection on
// the machine (other jobs' ranks connecting to their stores) may be given
// the same port, so parallel jobs failed with "Address already in use".
// Ports below the ephemeral range are never given to outgoing connections:
// pick a random one there that no socket holds now (checked by binding it on
// every address, as the store will).
int pick_free_port() {
  int eph_low = 32768, eph_high = 60999;  // Linux defaults
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    int lo = 0, hi = 0;
    if (std::fscanf(f, "%d %d", &lo, &hi) == 2 && lo > 0 && hi >= lo) eph_low = lo, eph_high = hi;
    std::fclose(f);
  }
  // Ports from 10000 up stay clear of the well-known services; a range
  // squeezed below that falls back to the ports above the ephemeral range.
  int first = 10000, last = eph_low - 1;
  if (last - first < 1000) first = std::max(1024, eph_high + 1), last = 65535;
  std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  std::uniform_int_distribution<int> pick(first, std::max(first, last));
  for (int attempt = 0; attempt < 200 && first <= last; ++attempt) {
    const int port = pick(rng);
    if (port_is_free(port)) return port;
  }
  // Everything tried was taken: let the kernel choose (racy, but works).
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error::runtime(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw Error::runtime(std::string("cannot find a free port: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

LaunchResult launch(const LaunchOptions& o) {
  if (o.nproc < 1 || o.nproc > 1024) throw Error::usage("-n must be from 1 to 1024, not " + std::to_string(o.nproc));
  if (o.command.empty()) throw Error::usage("no command to launch: give it after --, as in: loom launch -n 2 -- CMD ARGS");
  if (!on_path(o.command[0])) {
    throw Error::usage("cannot find the command '" + excerpt(o.command[0]) + "' (not executable or not on PATH)");
  }
  // The launcher serves the store at this address: a typo or another
  // machine's address is a usage error now, not a failed bind later.
  loom_net::ListenAddress addr;
  std::string why;
  if (!loom_net::resolve_listen_address(o.master_addr, AF_UNSPEC, std::chrono::seconds(5), &addr, &why)) {
    throw Error::usage("--master-addr '" + excerpt(o.master_addr) + "' is not valid: " + why +
                       "; use an address of this machine that the ranks reach the rendezvous store by (default "
                       "127.0.0.1) or a name that resolves to one");
  }
  // The store listens only on that address (c10d 1.13's own server would
  // take every interface); the ranks connect to it as clients. A port picked
  // here may be taken before the bind: then another is picked.
  std::unique_ptr<StoreServer> store;
  for (int attempt = 0; !store; ++attempt) {
    const int port = o.master_port > 0 ? o.master_port : pick_free_port();
    try {
      StoreServer::Limits limits;
      limits.max_connections = 2 * static_cast<size_t>(o.nproc) + 32;  // two per c10d client, and room to spare
      store = std::make_unique<StoreServer>(reinterpret_cast<const sockaddr*>(&addr.addr), addr.len, port, limits);
    } catch (const Error& e) {
      if (o.master_port > 0 || attempt >= 5) {
        throw Error::runtime(std::string(e.what()) + " (--master-addr " + addr.text + ")");
      }
    }
  }
  const int port = store->port();

  struct sigaction stop {}, old_int {}, old_term {};
  stop.sa_handler = on_stop_signal;
  sigemptyset(&stop.sa_mask);
  g_stop_signal = 0;
  sigaction(SIGINT, &stop, &old_int);
  sigaction(SIGTERM, &stop, &old_term);

  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  LaunchResult result;
  for (int i = 0; i < o.nproc; ++i) {
    ranks[i].rank = i;
    try {
      start_rank(&ranks[i], o, port);
    } catch (...) {
      for (int j = 0; j < i; ++j) {  // no orphans: end the ranks already started
        killpg(ranks[j].pid, SIGKILL);
        waitpid(ranks[j].pid, nullptr, 0);
      }
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      throw;
    }
  }
  store->start();  // after the forks: no thread of ours runs in a child before its exec
  const auto started = Clock::now();
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL deadline once stopping
  bool stopping = false;
  Clock::time_point drain_until = Clock::time_point::max();
  auto stop_all = [&](const std::string& why) {
    if (stopping) return;
    stopping = true;
    if (!why.empty()) std::cerr << "loom launch: " << why << "\n";
    signal_all(ranks, SIGTERM);
    kill_at = Clock::now() + o.grace;
  };

  for (;;) {
    // Read what the ranks printed.
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> owners;  // (rank, is stdout)
    for (auto& r : ranks) {
      if (r.out >= 0) fds.push_back({r.out, POLLIN, 0}), owners.push_back({&r, true});
      if (r.err >= 0) fds.push_back({r.err, POLLIN, 0}), owners.push_back({&r, false});
    }
    if (!fds.empty() && poll(fds.data(), fds.size(), 50) > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [r, is_out] = owners[i];
        char buf[8192];
        ssize_t n = read(fds[i].fd, buf, sizeof buf);
        std::string& line = is_out ? r->out_line : r->err_line;
        if (n > 0) {
          line.append(buf, static_cast<size_t>(n));
          flush_lines(&line, r->rank, is_out ? std::cout : std::cerr, false);
        } else if (n == 0 || errno != EINTR) {
          flush_lines(&line, r->rank, is_out ? std::cout : std::cerr, true);
          close(fds[i].fd);
          (is_out ? r->out : r->err) = -1;
        }
      }
    } else if (fds.empty()) {
      usleep(20000);
    }
    // Reap the ranks that ended.
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got != r.pid) continue;
      r.running = false;
      r.status = status;
      killpg(r.pid, SIGKILL);  // whatever the rank left behind in its group
      if (!succeeded(status) && !stopping) {
        std::string what = "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " + describe(status);
        result.failures.push_back(what);
        if (!o.keep_going) stop_all(what + "; stopping the other ranks");
        else std::cerr << "loom launch: " << what << "; the other ranks go on (--keep-going)\n";
      }
    }
    bool any_running = false, any_open = false;
    for (const auto& r : ranks) {
      any_running = any_running || r.running;
      any_open = any_open || r.out >= 0 || r.err >= 0;
    }
    if (!any_running && !any_open) break;
    if (!any_running) {
      // Drain the last output, but not forever: something outside the
      // ranks' groups may still hold a pipe open.
      if (drain_until == Clock::time_point::max()) drain_until = Clock::now() + o.grace;
      if (Clock::now() < drain_until) continue;
      break;
    }
    if (g_stop_signal != 0 && !stopping) {
      result.failures.push_back("launcher got " + signal_name(g_stop_signal));
      stop_all("stopping every rank (" + signal_name(g_stop_signal) + ")");
    }
    if (o.timeout.count() > 0 && !stopping && Clock::now() - started > o.timeout) {
      std::string what = "the job ran past --timeout " + std::to_string(o.timeout.count() / 1000) + " s";
      result.failures.push_back(what);
      stop_all(what + "; stopping every rank");
    }
    if (stopping && Clock::now() >= kill_at) {
      signal_all(ranks, SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  for (auto& r : ranks) {
    if (r.out >= 0) close(r.out);
    if (r.err >= 0) close(r.err);
  }
  for (const auto& r : ranks) {
    if (!succeeded(r.status)) result.exit_code = 1;
  }
  return result;
}

}  // namespace loom

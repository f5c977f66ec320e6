// SPDX-License-Identifier: Apache-2.0
// job.cpp: child processes, their output and their end.
#include "job.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "loom/launch.hpp"

namespace ucx_test {

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Job::Job(int size, const std::string& scenario, const std::vector<std::string>& extra) {
  // Below the ephemeral range, so no outgoing connection takes it first.
  const int port = loom::pick_free_port();
  store_ = loom::make_tcp_store("127.0.0.1", port, true, size + 1, std::chrono::seconds(30));
  ranks_.resize(size_t(size));
  for (int r = 0; r < size; ++r) {
    std::vector<std::string> args = {UCX_RANK_PATH,         "--rank",     std::to_string(r), "--size",
                                     std::to_string(size), "--port",     std::to_string(port), "--scenario",
                                     scenario};
    args.insert(args.end(), extra.begin(), extra.end());
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the driver
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    ranks_[size_t(r)].pid = pid;
    ranks_[size_t(r)].fd = fds[0];
  }
}

Job::~Job() {
  for (Child& c : ranks_) {
    if (!c.exited && c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      reap(c, true);
    }
    if (c.fd >= 0) close(c.fd);
  }
}

void Job::reap(Child& c, bool block) {
  if (c.exited || c.pid <= 0) return;
  int status = 0;
  if (waitpid(c.pid, &status, block ? 0 : WNOHANG) == c.pid) {
    c.exited = true;
    c.status = status;
  }
}

void Job::pump(std::chrono::milliseconds wait) {
  std::vector<pollfd> fds;
  for (Child& c : ranks_)
    if (c.fd >= 0) fds.push_back(pollfd{c.fd, POLLIN, 0});
  if (!fds.empty()) poll(fds.data(), fds.size(), int(wait.count()));
  else std::this_thread::sleep_for(wait);
  for (Child& c : ranks_) {
    if (!c.held) reap(c, false);
    if (c.fd < 0) continue;
    char buf[4096];
    for (;;) {
      const ssize_t n = read(c.fd, buf, sizeof buf);
      if (n > 0) {
        c.out.append(buf, size_t(n));
        c.partial.append(buf, size_t(n));
        size_t nl;
        while ((nl = c.partial.find('\n')) != std::string::npos) {
          std::istringstream line(c.partial.substr(0, nl));
          c.partial.erase(0, nl + 1);
          std::string word, key;
          if (line >> word >> key && word == "RESULT") {
            std::string value;
            std::getline(line >> std::ws, value);
            c.results[key] = value;
          }
        }
        continue;
      }
      if (n == 0) {  // the child closed its end: it has exited
        close(c.fd);
        c.fd = -1;
      }
      break;
    }
  }
}

bool Job::wait_for(int rank, const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Child& c = ranks_[size_t(rank)];
  for (;;) {
    if (c.results.count(key)) return true;
    if ((c.exited && c.fd < 0) || Clock::now() >= deadline) return false;
    pump(std::chrono::milliseconds(20));
  }
}

int64_t Job::kill(int rank) {
  Child& c = ranks_[size_t(rank)];
  const int64_t at = monotonic_ns();
  if (!c.exited) ::kill(c.pid, SIGKILL);
  return at;
}

int Job::wait_exit(int rank, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Child& c = ranks_[size_t(rank)];
  c.held = false;
  while (!(c.exited && c.fd < 0)) {
    if (Clock::now() >= deadline) {
      ::kill(c.pid, SIGKILL);
      reap(c, true);
      pump(std::chrono::milliseconds(0));
      return -1;
    }
    pump(std::chrono::milliseconds(20));
  }
  return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1;
}

std::string Job::result(int rank, const std::string& key) const {
  const auto& results = ranks_[size_t(rank)].results;
  auto it = results.find(key);
  return it == results.end() ? "" : it->second;
}

}  // namespace ucx_test

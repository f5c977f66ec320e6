// SPDX-License-Identifier: Apache-2.0
#include "swarm.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "test_paths.hpp"
#include "train/dump_reader.hpp"
#include "train/train_support.hpp"

namespace loom::swarm {

Scratch::Scratch() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/loom-swarm-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  dir_ = buf.data();
}

Scratch::~Scratch() {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test != nullptr && test->result()->Failed()) {
    std::fprintf(stderr, "swarm test failed: the peers' logs are kept in %s\n", dir_.c_str());
    return;
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string unique_run_id(const std::string& tag) { return "swarm-" + tag + "-" + std::to_string(::getpid()); }

std::vector<std::string> slowed(std::vector<std::string> sets, int delay_ms) {
  sets.insert(sets.end(), {"trainer.task_library=" LOOM_ROGUE_TASK, "trainer.task=rogue", "task.mode=slow",
                           "task.after=0", "task.delay_ms=" + std::to_string(delay_ms)});
  return sets;
}

std::string digits_config() { return std::string(LOOM_SOURCE_DIR) + "/examples/configs/digits-collab.toml"; }
std::string teacher_config() { return std::string(LOOM_SOURCE_DIR) + "/examples/configs/teacher.toml"; }

std::vector<std::unique_ptr<Peer>> start_swarm(const Scratch& scratch, int n, const std::string& config,
                                               const std::vector<std::string>& sets, const std::string& prefix,
                                               bool dump_final) {
  std::vector<std::unique_ptr<Peer>> peers;
  peers.push_back(std::make_unique<Peer>(scratch, prefix + "0", config, sets, std::map<std::string, std::string>{},
                                         dump_final));
  if (!wait_until([&] { return !peers[0]->address().empty(); }, seconds(30))) return peers;
  for (int i = 1; i < n; ++i)
    peers.push_back(std::make_unique<Peer>(scratch, prefix + std::to_string(i), config, sets,
                                           std::map<std::string, std::string>{{"LOOM_INITIAL_PEERS", peers[0]->address()}},
                                           dump_final));
  return peers;
}

DigitsRun run_digits_swarm(const Scratch& scratch, int n, const std::vector<std::string>& sets,
                           const std::string& prefix, int64_t steps) {
  DigitsRun out;
  auto peers = start_swarm(scratch, n, digits_config(), sets, prefix);
  if (peers.size() != size_t(n)) {
    ADD_FAILURE() << peers[0]->tail();
    return out;
  }
  double sum = 0;
  for (auto& p : peers) {
    const int code = p->wait_exit(seconds(180));
    out.logs.push_back(p->log());
    const auto final = final_result(out.logs.back());
    if (code != 0 || !final) {
      ADD_FAILURE() << prefix << ": " << p->name() << " exited " << code << "\n" << p->tail();
      return DigitsRun{};
    }
    EXPECT_EQ(final->steps, steps) << p->name();
    sum += final->accuracy;
  }
  out.accuracy = sum / n;
  out.difference = 0;
  for (int i = 1; i < n; ++i)
    out.difference = std::max(out.difference, max_parameter_difference(peers[0]->final_dir(), peers[size_t(i)]->final_dir()));
  return out;
}

std::vector<std::string> teacher_round_sets(const std::string& tag, int peers, int64_t target) {
  return {"trainer.max_steps=30",
          "trainer.threads=1",
          "trainer.val_every=0",
          "trainer.checkpoint_every=0",
          "trainer.log_every=10",
          "strategy.name=collab",
          "strategy.options.target_batch_size=" + std::to_string(target),
          "strategy.options.listen=127.0.0.1",
          "strategy.options.verbose=true",
          "strategy.options.min_peers=" + std::to_string(peers),
          "strategy.options.run_id=" + unique_run_id(tag)};
}

std::vector<std::unique_ptr<Peer>> start_teacher_swarm(const Scratch& scratch, int n, const std::vector<std::string>& sets) {
  return start_swarm(scratch, n, teacher_config(), sets, "p", false);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Peer::Peer(const Scratch& scratch, const std::string& name, const std::string& config,
           const std::vector<std::string>& sets, std::map<std::string, std::string> env, bool dump_final)
    : name_(name),
      log_path_(scratch.path(name + ".log")),
      output_dir_(scratch.path(name)),
      final_dir_(dump_final ? scratch.path(name + "-final") : "") {
  // One thread unless the test says otherwise: peers share the machine's
  // cores, and without it Debian's OpenBLAS keeps a second thread spinning
  // between the BLAS calls of a peer whose steps are slow (a whole core per
  // peer of a slowed test, for nothing).
  std::vector<std::string> argv = {kLoomBinary, "train", config, "--set", "trainer.output_dir=" + output_dir_,
                                   "--set", "trainer.threads=1"};
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  if (dump_final) {
    argv.push_back("--dump-final");
    argv.push_back(final_dir_);
  }
  env.emplace("LOOM_INITIAL_PEERS", "");  // only where the test says so
  started_ = Clock::now();
  child_ = std::make_unique<loom::test::Child>(argv, env, log_path_);
}

std::string Peer::log() const { return read_text(log_path_); }

void Peer::kill() {
  child_->kill(SIGKILL);
  child_->wait(seconds(10));
}

void Peer::signal(int signo) { child_->kill(signo); }

int Peer::wait_exit(milliseconds timeout) {
  int status = child_->wait(timeout);
  if (status == -1) {
    kill();
    return -1;
  }
  // Whatever a test checks: no peer steps past trainer.max_steps (a peer
  // that caught up with the swarm's last epoch once logged "step 101/100").
  static const std::regex step_re(R"(step ([0-9]+)/([0-9]+) )");
  const std::string text = log();
  for (auto it = std::sregex_iterator(text.begin(), text.end(), step_re); it != std::sregex_iterator(); ++it)
    if (std::stoll((*it)[1].str()) > std::stoll((*it)[2].str()))
      ADD_FAILURE() << name_ << " logged \"" << it->str() << "\": a step past max_steps\n" << tail();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string Peer::address() const {
  static const std::regex re(R"(listening on (127\.0\.0\.1:[0-9]+))");
  std::smatch m;
  const std::string text = log();
  return std::regex_search(text, m, re) ? m[1].str() : std::string();
}

std::string Peer::tail(size_t lines) const {
  const std::string text = log();
  size_t at = text.size();
  for (size_t n = 0; n <= lines && at > 0; ++n) {
    size_t nl = text.rfind('\n', at - 1);
    if (nl == std::string::npos) return "--- " + name_ + " ---\n" + text;
    at = nl;
  }
  return "--- " + name_ + " (end) ---" + text.substr(at);
}

std::string rogue_binary() {
  return (std::filesystem::path(kLoomBinary).parent_path() / "loom_swarm_rogue").string();
}

std::string rogue_dht_address(const std::string& log_path, milliseconds timeout) {
  std::string address;
  wait_until(
      [&] {
        const std::string text = read_text(log_path);
        const auto at = text.find("rogue dht ");
        const auto end = at == std::string::npos ? std::string::npos : text.find('\n', at);
        if (end == std::string::npos) return false;
        address = text.substr(at + 10, end - at - 10);
        return true;
      },
      timeout);
  return address;
}

std::string state_address(const Peer& p) {
  static const std::regex re(R"(state over TCP port ([0-9]+))");
  std::smatch m;
  const std::string log = p.log(), dht = p.address();
  if (!std::regex_search(log, m, re)) return dht;
  return dht.substr(0, dht.rfind(':') + 1) + m[1].str();
}

std::string rogue_peer_id(const std::string& log_path) {
  const std::string text = read_text(log_path);
  const auto at = text.find("rogue peer ");
  const auto end = at == std::string::npos ? std::string::npos : text.find('\n', at);
  return end == std::string::npos ? "" : text.substr(at + 11, end - at - 11);
}

std::string own_peer_id(const std::string& log) {
  std::smatch m;
  static const std::regex re("peer ([0-9]+) of run '");
  return std::regex_search(log, m, re) ? m[1].str() : "";
}

Peer* sort_by_peer_id(std::vector<std::unique_ptr<Peer>>& peers) {
  for (auto& p : peers)
    if (!wait_until([&] { return !own_peer_id(p->log()).empty(); }, seconds(30))) return p.get();
  std::sort(peers.begin(), peers.end(), [](const auto& a, const auto& b) {
    return std::stoull(own_peer_id(a->log())) < std::stoull(own_peer_id(b->log()));
  });
  return nullptr;
}

bool wait_until(const std::function<bool()>& pred, milliseconds timeout, milliseconds poll) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

CommunicatorsBuilt communicators_built(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m,
                         std::regex(R"(built (\d+) communicators: (\d+) exchanged addresses through their group's )"
                                    R"(hub, (\d+) through the DHT; (\d+) exchanges failed; \d+ went on to the DHT )"
                                    R"(after the hub failed; (\d+) parts came to this peer's hub)")))
    return {};
  return {std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), std::stoll(m[4]), std::stoll(m[5])};
}

std::vector<Averaged> averaged_rounds(const std::string& log) {
  static const std::regex re(
      R"(epoch ([0-9]+): averaged gradients of ([0-9]+) samples with ([0-9]+) peers [^\n]*\(matchmaking [0-9.]+ ms(, group and communicator prepared ahead)?)");
  std::vector<Averaged> out;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it)
    out.push_back({std::stoll((*it)[1]), std::stoll((*it)[2]), std::stoi((*it)[3]), (*it)[4].matched});
  return out;
}

std::vector<int64_t> finished_epochs(const std::string& log) {
  static const std::regex stepped(R"(epoch ([0-9]+): (averaged gradients of|.*proceeding with local gradients))");
  static const std::regex followed(R"(the swarm finished epoch ([0-9]+) without this peer)");
  std::vector<int64_t> out;
  for (const std::regex* re : {&stepped, &followed})
    for (std::sregex_iterator it(log.begin(), log.end(), *re), end; it != end; ++it)
      out.push_back(std::stoll((*it)[1]));
  return out;
}

int64_t last_finished_epoch(const std::string& log) {
  int64_t best = -1;
  for (int64_t e : finished_epochs(log)) best = std::max(best, e);
  return best;
}

std::vector<Loaded> loaded_states(const std::string& log) {
  static const std::regex re(R"(loaded the state of epoch ([0-9]+) from peer [0-9]+ \(([0-9]+) bytes in ([0-9.]+) s\))");
  std::vector<Loaded> out;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it)
    out.push_back({std::stoll((*it)[1]), std::stoull((*it)[2]), std::stod((*it)[3])});
  return out;
}

std::optional<Final> final_result(const std::string& log) {
  static const std::regex re(R"(final accuracy: ([0-9.]+) after ([0-9]+) steps)");
  std::smatch m;
  if (!std::regex_search(log, m, re)) return std::nullopt;
  return Final{std::stod(m[1]), std::stoll(m[2])};
}

double max_parameter_difference(const std::string& dir_a, const std::string& dir_b, const char* section) {
  std::map<std::string, std::vector<float>> a, b;
  try {
    a = loom::test::read_params(dir_a, section);
    b = loom::test::read_params(dir_b, section);
  } catch (const std::exception&) {
    return INFINITY;
  }
  if (a.empty() || a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) return INFINITY;
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::fabs(double(va[i]) - double(it->second[i])));
  }
  return worst;
}

std::map<int64_t, double> read_metric(const std::string& output_dir, const std::string& metric) {
  return loom::test::read_metric_csv(output_dir, metric);
}

int unused_port() {
  for (int tries = 0; tries < 50; ++tries) {
    int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = 0;
    if (::bind(udp, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(udp, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
    int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
    bool tcp_free = port != 0 && ::bind(tcp, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(tcp);
    ::close(udp);
    if (tcp_free) return port;
  }
  throw std::runtime_error("no free loopback port");
}

}  // namespace loom::swarm

// SPDX-License-Identifier: Apache-2.0
#include "check_kit.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <tuple>

#include "loom/plugin_record.hpp"
#include "loom/status.hpp"
#include "table.hpp"

namespace loom::cli {
namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

Target resolve_target(const std::string& target, const std::string& kind) {
  Target t;
  if (!kind.empty()) t.kind = *parse_kind(kind);  // CLI11 already checked the word
  const bool is_path = target.find('/') != std::string::npos ||
                       (target.size() > 3 && target.compare(target.size() - 3, 3, ".so") == 0);
  if (!is_path) {
    t.name = target;
    return t;
  }
  std::error_code ec;
  const fs::path path = fs::absolute(target, ec);
  if (ec || !fs::is_regular_file(path, ec)) throw Error::usage("no plugin file " + target + " (not a readable file)");
  static const std::regex kFile("lib([a-z0-9_]+)_(collective|strategy)\\.so");
  std::smatch m;
  const std::string file = path.filename().string();
  if (!std::regex_match(file, m, kFile)) {
    throw Error::usage("the file " + target +
                       " is not named as a plugin: lib<name>_<kind>.so, with kind collective or strategy");
  }
  const loom_kind named = *parse_kind(m[2]);
  if (t.kind != 0 && t.kind != named)
    throw Error::usage("--kind " + kind + " contradicts the file name " + file + " (a " + m[2].str() + ")");
  t.name = m[1];
  t.kind = named;
  t.folder = path.parent_path().string();
  return t;
}

std::string find_beside_loom(const std::string& name, std::string* looked) {
  std::vector<fs::path> tried;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    tried.push_back(self.parent_path() / name);  // a build tree: bin/
    tried.push_back(self.parent_path() / LOOM_BINDIR_TO_KIT / name);
  }
  for (const auto& p : tried)
    if (access(p.c_str(), X_OK) == 0) return fs::weakly_canonical(p).string();
  looked->clear();
  for (const auto& p : tried) *looked += (looked->empty() ? "" : ", ") + p.lexically_normal().string();
  return "";
}

std::string find_kit() {
  if (const char* env = std::getenv("LOOM_CONFORMANCE"); env && *env) {
    if (access(env, X_OK) == 0) return env;
    throw Error::usage(std::string("LOOM_CONFORMANCE=") + env + " is not an executable file");
  }
  std::string where;
  if (std::string kit = find_beside_loom("loom_conformance", &where); !kit.empty()) return kit;
  throw Error::runtime("the conformance kit (loom_conformance) is not installed here (looked for " + where +
                       "); it ships with the Loom SDK package, or set LOOM_CONFORMANCE to its path");
}

namespace {

// Runs argv and returns its standard output; Error::runtime if it cannot
// start, exits non-zero or runs past the deadline (then it is killed).
std::string capture(const std::vector<std::string>& argv, std::chrono::seconds limit) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw Error::runtime("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw Error::runtime("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, int(left.count())) : 0;
    if (ready <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(fds[0]);
      throw Error::runtime(argv[0] + " did not answer within " + std::to_string(limit.count()) + " s");
    }
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error::runtime(argv[0] + " failed to list its cases");
  return out;
}

const std::map<std::string, std::string>& suite_ops() {
  static const std::map<std::string, std::string> kOps = {
      {"Allreduce", "allreduce"},         {"LargeAllreduce", "allreduce"},
      {"Reduce", "reduce"},               {"ReduceScatter", "reduce_scatter"},
      {"Broadcast", "broadcast"},         {"Allgather", "allgather"},
      {"Alltoall", "alltoall"},           {"SendRecvRing", "send/recv"},
      {"SendRecvOrder", "send/recv"},     {"Barrier", "barrier"},
      {"ScaledAllreduce", "allreduce_scaled"}, {"ScaledAllreduceArguments", "allreduce_scaled"}};
  return kOps;
}

}  // namespace

std::vector<std::string> list_cases(const std::string& kit) {
  std::istringstream lines(capture({kit, "--gtest_list_tests"}, std::chrono::seconds(60)));
  std::vector<std::string> cases;
  std::string line, suite;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line[0] != ' ') {
      suite = line.substr(0, line.find('.'));
    } else {
      const auto begin = line.find_first_not_of(' ');
      cases.push_back(suite + "." + line.substr(begin, line.find(' ', begin) - begin));
    }
  }
  return cases;
}

std::set<std::string> parse_ops(const std::vector<std::string>& words) {
  static const std::map<std::string, std::string> kWords = {
      {"allreduce", "allreduce"},   {"broadcast", "broadcast"},         {"reduce", "reduce"},
      {"allgather", "allgather"},   {"reduce_scatter", "reduce_scatter"}, {"alltoall", "alltoall"},
      {"barrier", "barrier"},       {"send_recv", "send/recv"},         {"send/recv", "send/recv"},
      {"allreduce_scaled", "allreduce_scaled"}};
  std::set<std::string> ops;
  for (const auto& w : words) {
    auto it = kWords.find(w);
    if (it == kWords.end()) {
      throw Error::usage("--op " + w + " is not an operation; valid: allreduce, broadcast, reduce, allgather, "
                         "reduce_scatter, alltoall, barrier, send_recv, allreduce_scaled");
    }
    ops.insert(it->second);
  }
  return ops;
}

std::string case_op(const std::string& suite, const std::string& test) {
  if (auto it = suite_ops().find(suite); it != suite_ops().end()) return it->second;
  const std::string param = test.substr(test.find('/') == std::string::npos ? test.size() : test.find('/') + 1);
  if (suite == "ZeroCount") {
    for (const char* op : {"reduce_scatter", "allreduce", "allgather", "alltoall", "broadcast", "reduce"})
      if (param.rfind(std::string(op) + "_", 0) == 0) return op;
    if (param.rfind("sendrecv", 0) == 0) return "send/recv";
  }
  if (suite == "Timeout" || suite == "Abort" || suite == "BlockingTimeout")
    return param == "recv" ? "send/recv" : param == "allreduce" ? "allreduce" : "(all)";
  return "(all)";
}

std::string case_dtype(const std::string& test) {
  static const std::regex kDtype("(^|[/_])(f16|bf16|f32|f64|i8|u8|i32|i64)(_|$)");
  std::smatch m;
  return std::regex_search(test, m, kDtype) ? m[2].str() : "-";
}

KitReport read_reports(const std::string& prefix, int nproc) {
  KitReport report;
  std::map<std::pair<std::string, std::string>, size_t> at;
  for (int r = 0; r < nproc; ++r) {
    std::ifstream in(prefix + "." + std::to_string(r) + ".jsonl");
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) continue;  // a rank killed mid-line
      KitCase c{j.value("suite", ""), j.value("test", ""), j.value("result", ""), j.value("message", "")};
      auto key = std::make_pair(c.suite, c.test);
      auto it = at.find(key);
      if (it == at.end()) {
        at[key] = report.cases_run.size();
        report.cases_run.push_back(c);
      } else if (c.result == "failed" && report.cases_run[it->second].result != "failed") {
        report.cases_run[it->second] = c;  // a failure on any rank fails the case
        report.cases_run[it->second].message = "rank " + std::to_string(r) + ": " + c.message;
      }
    }
  }
  for (const auto& c : report.cases_run) {
    ++report.cases;
    if (c.result == "failed") ++report.failed;
    else if (c.result == "skipped") ++report.skipped;
    else ++report.passed;
  }
  return report;
}

void print_report(const KitReport& report, std::ostream& out) {
  struct Row {
    int passed = 0, failed = 0, skipped = 0;
    std::string note;
  };
  // (rule, op, dtype), in the order the kit ran them.
  std::vector<std::tuple<std::string, std::string, std::string>> order;
  std::map<std::tuple<std::string, std::string, std::string>, Row> rows;
  for (const auto& c : report.cases_run) {
    const std::string rule = c.suite + "." + c.test.substr(0, c.test.find('/'));
    const auto key = std::make_tuple(rule, case_op(c.suite, c.test), case_dtype(c.test));
    if (!rows.count(key)) order.push_back(key);
    Row& row = rows[key];
    if (c.result == "failed") ++row.failed;
    else if (c.result == "skipped") ++row.skipped;
    else ++row.passed;
    // The first failure says most; else the first skip's reason.
    if ((c.result == "failed" && row.failed == 1) || (c.result == "skipped" && row.note.empty() && row.failed == 0)) {
      std::string first = c.message.substr(0, c.message.find('\n'));
      if (first.size() > 100) first = first.substr(0, 97) + "...";
      row.note = first;
    }
  }
  Table table({"RULE", "OPERATION", "DTYPE", "PASSED", "FAILED", "SKIPPED", "NOTE"});
  for (const auto& key : order) {
    const Row& r = rows[key];
    table.add({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::to_string(r.passed),
               std::to_string(r.failed), std::to_string(r.skipped), r.note});
  }
  table.print(out);
}

}  // namespace loom::cli

// SPDX-License-Identifier: Apache-2.0
#include "listening.hpp"

#include <regex>
#include <sstream>

#include "subprocess.hpp"

namespace loom::test {

std::vector<ListeningSocket> listening_sockets(const std::vector<int>& pids, std::string* why) {
  // -H: no header; -n: numeric; -p: the owning processes (pid=), which a
  // root test process sees for every process.
  auto r = run_process({"/usr/bin/env", "ss", "-H", "-l", "-n", "-t", "-u", "-p"}, {}, std::chrono::seconds(20));
  if (r.timed_out || r.exit_code != 0) {
    *why = "ss -lntup failed (exit " + std::to_string(r.exit_code) + "): " + r.err;
    return {};
  }
  // udp UNCONN 0 0 127.0.0.1:4000 0.0.0.0:* users:(("loom",pid=12,fd=5))
  static const std::regex line_re(R"(^(tcp|udp)\s+\S+\s+\d+\s+\d+\s+(\S+):(\d+)\s+\S+\s*(.*)$)");
  static const std::regex pid_re(R"(pid=(\d+),)");
  std::vector<ListeningSocket> found;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    std::string host = m[2];
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    const size_t zone = host.find('%');  // "127.0.0.1%lo" when bound to a device
    if (zone != std::string::npos) host.erase(zone);
    const std::string users = m[4];
    for (auto it = std::sregex_iterator(users.begin(), users.end(), pid_re); it != std::sregex_iterator(); ++it) {
      const int pid = std::stoi((*it)[1]);
      for (int want : pids)
        if (pid == want) found.push_back({m[1], host, std::stoi(m[3]), pid, line});
    }
  }
  return found;
}

bool is_loopback(const std::string& host) { return host == "::1" || host.rfind("127.", 0) == 0; }

}  // namespace loom::test

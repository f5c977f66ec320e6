// SPDX-License-Identifier: Apache-2.0
// The listening sockets of given processes, as `ss -lntup` (iproute2) shows
// them: for tests that check every socket binds only where configured.
#pragma once

#include <string>
#include <vector>

namespace loom::test {

struct ListeningSocket {
  std::string protocol;  // "tcp" or "udp"
  std::string host;      // the bound address: "127.0.0.1", "::1", "*", "0.0.0.0", "192.0.2.2", ...
  int port = 0;
  int pid = 0;
  std::string line;      // ss's whole line, for failure messages
};

// Every listening TCP and unconnected UDP socket that one of pids holds.
// Sets *why and returns an empty list when ss cannot be run.
std::vector<ListeningSocket> listening_sockets(const std::vector<int>& pids, std::string* why);

// Whether host is a loopback address (127.0.0.0/8 or ::1).
bool is_loopback(const std::string& host);

}  // namespace loom::test

// SPDX-License-Identifier: Apache-2.0
#include "udp_buffer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>

namespace loom_collab {

std::vector<int> udp_sockets_bound_to(uint16_t port) {
  std::vector<int> out;
  DIR *dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (dirent *e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == ::dirfd(dir)) continue;
    int type = 0;
    socklen_t len = sizeof type;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_DGRAM &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &alen) == 0 && addr.ss_family == AF_INET &&
        ntohs(reinterpret_cast<const sockaddr_in *>(&addr)->sin_port) == port)
      out.push_back(fd);
  }
  ::closedir(dir);
  return out;
}

bool raise_udp_receive_buffer(uint16_t port, int bytes) {
  bool raised = false;
  for (int fd : udp_sockets_bound_to(port))
    raised = ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) == 0 || raised;
  return raised;
}

}  // namespace loom_collab

/* SPDX-License-Identifier: Apache-2.0 */
// A UDP socket's receive buffer, for sockets a library keeps to itself
// (OpenDHT's UdpSocket): found by the port it is bound to.
#ifndef LOOM_COLLAB_UDP_BUFFER_H
#define LOOM_COLLAB_UDP_BUFFER_H

#include <cstdint>
#include <vector>

namespace loom_collab {

// This process's IPv4 UDP sockets bound to `port` (descriptors).
std::vector<int> udp_sockets_bound_to(uint16_t port);
// Asks every IPv4 UDP socket of this process bound to `port` for a receive
// buffer of `bytes` (the kernel caps it at net.core.rmem_max). False when
// no such socket was found or none took it.
bool raise_udp_receive_buffer(uint16_t port, int bytes);

}  // namespace loom_collab

#endif

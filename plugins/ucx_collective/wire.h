/* SPDX-License-Identifier: Apache-2.0 */
// What travels between ranks: the 64-bit tags, the header every collective
// sends on its first message to a peer, and the control messages.
//
// Why tag matching (not active messages): collectives here are fixed
// schedules of (peer, step) messages whose receives can be posted before the
// data arrives, straight into the user's buffer or a reduction slot; tag
// matching gives exactly that zero-copy placement, and UCX keeps early
// arrivals in its unexpected queue, so no rank waits for a receiver to be
// ready. Active messages would need our own queueing and a copy out of UCX's
// buffers for every message.
//
// Tag layout, most significant first:
//   16 bits  the receiver's communicator id. All communicators of a plugin
//            instance share one UCX worker, so the id is what keeps them
//            apart; each rank picks its own id and tells the others in the
//            out-of-band exchange, so no agreement is needed, and ids are
//            handed out round robin so a late message of a destroyed
//            communicator cannot match a new one (65536 creations later).
//    2 bits  class: collective, point to point, control, and the
//            acknowledgement of a cross-memory-attach transfer (cma.h),
//            which carries the low 46 bits of the tag it answers with the
//            answering rank as sender.
//   16 bits  the sender's rank (UCX matches on tags only, not on senders).
//   30 bits  collective: operation sequence (16) and message index within
//            the operation (14), so that every message of an operation has
//            a tag of its own and no matching depends on arrival order;
//            point to point: a per-pair sequence, so messages between two
//            ranks are received in posting order whatever their size.
#ifndef LOOM_UCX_WIRE_H
#define LOOM_UCX_WIRE_H

#include <cstdint>

namespace loom_ucx {

enum TagClass : uint64_t { kClassCollective = 0, kClassP2P = 1, kClassControl = 2, kClassCmaAck = 3 };

constexpr int kMaxRanks = 1 << 16;
constexpr uint32_t kSubBits = 14;
constexpr uint32_t kSubMask = (1u << kSubBits) - 1;

constexpr uint64_t make_tag(uint16_t comm_id, TagClass cls, uint32_t src, uint32_t low30) {
  return (uint64_t(comm_id) << 48) | (uint64_t(cls) << 46) | (uint64_t(src & 0xffffu) << 30) |
         (uint64_t(low30) & 0x3fffffffu);
}

// Message `sub` of operation `seq`. Sub 0 is always the first message from a
// sender to a receiver in an operation and starts with a WireHeader. Indices
// past 14 bits wrap: only a few messages per link are ever in flight.
constexpr uint64_t collective_tag(uint16_t comm_id, uint32_t src, uint32_t seq, uint32_t sub) {
  const uint32_t s = sub <= kSubMask ? sub : 1 + (sub - 1) % kSubMask;
  return make_tag(comm_id, kClassCollective, src, ((seq & 0xffffu) << kSubBits) | s);
}

constexpr uint64_t p2p_tag(uint16_t comm_id, uint32_t src, uint32_t seq) {
  return make_tag(comm_id, kClassP2P, src, seq);
}

// The answer to a cross-memory-attach message sent to rank `from` under
// `tag`, as its sender receives it (on its own communicator id).
constexpr uint64_t cma_ack_tag(uint16_t sender_comm_id, uint32_t from, uint64_t tag) {
  return make_tag(sender_comm_id, kClassCmaAck, from, uint32_t(tag & 0x3fffffffu));
}

constexpr uint64_t kFullMask = ~uint64_t(0);
constexpr uint64_t kCommMask = uint64_t(0xffff) << 48;                // every message of a communicator
constexpr uint64_t kControlMask = kCommMask | (uint64_t(3) << 46);    // its control messages, from anyone

// Operation kinds, as the header names them.
enum OpKind : uint8_t {
  kOpAllreduce = 1,
  kOpBroadcast,
  kOpReduce,
  kOpAllgather,
  kOpReduceScatter,
  kOpAlltoall,
  kOpBarrier,
};

const char *op_kind_name(uint8_t kind);

// Sent on the first message from each sender to each receiver of a
// collective, and checked by the receiver before it uses any data from that
// sender: arguments that differ across ranks become INVALID_ARGUMENT instead
// of a wrong result. 40 bytes, fixed layout, host byte order (peers run on
// one architecture).
struct WireHeader {
  uint32_t magic;
  uint8_t op;
  uint8_t dtype;
  uint8_t reduce_op;  // 0 for operations without one
  uint8_t algorithm;
  uint64_t count;
  int32_t root;       // -1 for operations without one
  uint32_t seq;
  uint64_t chunk_bytes;
  uint64_t scale_bits;  // a scaled allreduce's scale (its IEEE bits, so every rank checks it is the same), else 0
};
static_assert(sizeof(WireHeader) == 40, "WireHeader is a wire format");
constexpr uint32_t kHeaderMagic = 0x4c554358;  // "LUCX"

// Control messages: a rank tells the others that an operation's arguments
// disagree (so they fail it at once instead of timing out) or that a peer
// died (so ranks that never talk to it fail promptly too).
enum ControlType : uint32_t { kControlInvalid = 1, kControlPeerFailed = 2 };
struct ControlMessage {
  uint32_t magic;
  uint32_t type;
  uint32_t seq;     // kControlInvalid: the operation
  int32_t subject;  // kControlPeerFailed: the rank that died
  int32_t from;     // who reports it
  int32_t reserved;
};
static_assert(sizeof(ControlMessage) == 24, "ControlMessage is a wire format");

}  // namespace loom_ucx

#endif  // LOOM_UCX_WIRE_H

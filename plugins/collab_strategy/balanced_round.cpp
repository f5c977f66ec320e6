// SPDX-License-Identifier: Apache-2.0
// A group's mean with parts sized by link rate (balance_bandwidth,
// bandwidth.h): the reduce-scatter and the allgather of sliced_round.cpp by
// point-to-point blocks of any size, so that a member on a slow link owns a
// small part (or none) and moves less. Every member computes the same parts
// from the rates the weight exchange brought.
//
// The two halves are pipelined chunk by chunk: an owner averages a chunk of
// its part as soon as every member's copy of it arrived and sends the
// result on while later chunks still arrive, so a member's link carries
// its sends and its receives at once. In two strict phases a member would
// send in one and receive in the other, and a duplex link would idle half
// the round: on one at a quarter of the others' rate that is slower than a
// ring allreduce whatever the parts.
//
// A member keeps at most kWindow of its copies in flight to each other
// member. Over TCP a block's data queues in the connection it shares with
// the handshakes of the blocks coming the other way (UCX's rendezvous asks
// the sender for each one): with every copy posted at once, a slow link's
// results could not start before its copies had all left, the two halves ran
// one after the other, and the round took twice its link's time (measured:
// 4.6 s where the ring allreduce took 4.3 s). Between two members blocks
// match in posting order, so a member's results to another follow all its
// copies to it.
//
// The copies' times show this peer's link rate for the next rounds.
#include <algorithm>
#include <cstdio>

#include "bandwidth.h"
#include "peer.h"

namespace loom_collab {
namespace {

constexpr uint64_t kChunkValues = (256 << 10) / sizeof(float);  // 256 KiB a block
constexpr uint64_t kWindow = 2;  // copies in flight to each member

uint64_t chunks_of(uint64_t len) { return (len + kChunkValues - 1) / kChunkValues; }

// One posted block and what it is for.
struct Posted {
  loom_request *request = nullptr;
  int32_t peer = 0;
  uint64_t bytes = 0;
  uint64_t chunk = 0;
  enum Kind { copy_out, copy_in, result_out, result_in } kind = copy_out;
  double done_at = -1;  // seconds from the start; -1 while it moves
};

}  // namespace

bool Peer::balanced_average(GroupComm &comm, const float *values, uint64_t numel, const MemberWeights &members,
                            float *out, Clock::time_point deadline, std::string *why) {
  const int32_t n = comm.size(), r = comm.rank();
  const std::vector<double> fractions = balanced_fractions(members.rate);
  const std::vector<uint64_t> at = part_offsets(fractions, numel);
  auto part = [&](int32_t j) { return at[size_t(j) + 1] - at[size_t(j)]; };
  auto chunk_len = [&](int32_t j, uint64_t c) { return std::min(kChunkValues, part(j) - c * kChunkValues); };
  const uint64_t mine = part(r), my_chunks = chunks_of(mine);
  balance_copies_.resize(size_t(n) * mine);
  balance_result_.resize(numel);  // out may be values, which the copies are sent from
  slice_mean_.assign(mine, 0.0f);

  std::vector<Posted> blocks;
  const auto start = Clock::now();
  auto post = [&](Posted p, void *data, bool send) {
    if (comm.post_block({p.peer, data, p.bytes}, send, &p.request, why) != LOOM_OK) return false;
    blocks.push_back(p);
    return true;
  };
  uint64_t expected = 0, finished = 0;
  auto fail = [&] {
    // Says how far the blocks got: a member lost mid-round shows as some
    // of them moved, the rest failed or still waiting.
    *why = "the mean by parts stopped with " + std::to_string(finished) + " of " + std::to_string(expected) +
           " blocks moved: " + *why;
    std::vector<loom_request *> moving;
    for (const auto &b : blocks)
      if (b.request) moving.push_back(b.request);
    comm.abandon_blocks(&moving);
    return false;
  };
  // Every block this member moves: from each other member its copies of
  // this part and its results; to each, its copies and this part's results.
  for (int32_t j = 0; j < n; ++j)
    if (j != r) expected += 2 * (my_chunks + chunks_of(part(j)));
  // Receives first, in the order each sender posts: its copies of this
  // member's chunks, then its results for its own part.
  for (int32_t i = 0; i < n; ++i) {
    if (i == r) continue;
    for (uint64_t c = 0; c < my_chunks; ++c) {
      float *to = balance_copies_.data() + size_t(i) * mine + c * kChunkValues;
      if (!post({nullptr, i, chunk_len(r, c) * sizeof(float), c, Posted::copy_in}, to, false)) return fail();
    }
    for (uint64_t c = 0; c < chunks_of(part(i)); ++c) {
      float *to = balance_result_.data() + at[size_t(i)] + c * kChunkValues;
      if (!post({nullptr, i, chunk_len(i, c) * sizeof(float), c, Posted::result_in}, to, false)) return fail();
    }
  }
  // Copies out, kWindow at a time per member; results out once averaged and
  // once every copy to that member is posted.
  std::vector<uint64_t> copies_posted(size_t(n), 0), copies_moving(size_t(n), 0), results_posted(size_t(n), 0);
  auto post_more = [&]() -> bool {
    for (int32_t j = 0; j < n; ++j) {
      if (j == r) continue;
      const uint64_t total = chunks_of(part(j));
      while (copies_posted[size_t(j)] < total && copies_moving[size_t(j)] < kWindow) {
        const uint64_t c = copies_posted[size_t(j)]++;
        auto *from = const_cast<float *>(values + at[size_t(j)] + c * kChunkValues);
        if (!post({nullptr, j, chunk_len(j, c) * sizeof(float), c, Posted::copy_out}, from, true)) return false;
        ++copies_moving[size_t(j)];
      }
    }
    return true;
  };
  if (!post_more()) return fail();
  std::copy(values + at[size_t(r)], values + at[size_t(r)] + mine, balance_copies_.data() + size_t(r) * mine);

  // copies_in[c]: how many members' copies of chunk c are here.
  std::vector<int32_t> copies_in(my_chunks, 0);
  uint64_t next = 0;  // the next chunk of this member's part to average
  std::vector<const float *> copies(static_cast<size_t>(n));
  unsigned idle = 0;
  while (finished < expected || next < my_chunks) {
    bool moved = false;
    for (size_t b = 0; b < blocks.size(); ++b) {
      if (blocks[b].request == nullptr) continue;
      bool done = false;
      if (comm.test_block(&blocks[b].request, &done, why) != LOOM_OK) return fail();
      if (!done) continue;
      ++finished;
      blocks[b].done_at = std::chrono::duration<double>(Clock::now() - start).count();
      moved = true;
      if (blocks[b].kind == Posted::copy_in) ++copies_in[blocks[b].chunk];
      if (blocks[b].kind == Posted::copy_out) --copies_moving[size_t(blocks[b].peer)];
    }
    if (!post_more()) return fail();
    // Average each chunk whose copies are all here, in order, and send it on.
    while (next < my_chunks && copies_in[next] == n - 1) {
      const uint64_t off = next * kChunkValues, len = chunk_len(r, next);
      for (int32_t j = 0; j < n; ++j) copies[size_t(j)] = balance_copies_.data() + size_t(j) * mine + off;
      combine_copies(copies, members.weight, len, slice_mean_.data() + off, "part (a chunk of it)");
      ++next;
      moved = true;
    }
    for (int32_t j = 0; j < n; ++j) {
      if (j == r || copies_posted[size_t(j)] < chunks_of(part(j))) continue;
      for (uint64_t &c = results_posted[size_t(j)]; c < next; ++c) {
        if (!post({nullptr, j, chunk_len(r, c) * sizeof(float), c, Posted::result_out},
                  slice_mean_.data() + c * kChunkValues, true))
          return fail();
        moved = true;
      }
    }
    if (Clock::now() >= deadline) {
      *why = "the blocks of the mean by parts were not all moved by the round's deadline";
      return fail();
    }
    if (!moved && comm.member_left(why)) return fail();
    // The collective progresses inside test. Over a slow link the blocks
    // take seconds: after a spell of yielding, nap so as not to take a core
    // from training (50 us is nothing beside such a block).
    idle = moved ? 0 : idle + 1;
    if (idle > 0) {
      if (idle < 2000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::copy(slice_mean_.begin(), slice_mean_.end(), balance_result_.data() + at[size_t(r)]);
  std::copy(balance_result_.begin(), balance_result_.end(), out);

  // The link's rates, from the copies (posted at once at the start): per
  // member, its chunks' bytes over the last one's time, summed.
  std::vector<double> out_bytes(size_t(n), 0), out_secs(size_t(n), 0), in_bytes(size_t(n), 0), in_secs(size_t(n), 0);
  for (const auto &b : blocks) {
    if (b.kind == Posted::copy_out) {
      out_bytes[size_t(b.peer)] += double(b.bytes);
      out_secs[size_t(b.peer)] = std::max(out_secs[size_t(b.peer)], b.done_at);
    } else if (b.kind == Posted::copy_in) {
      in_bytes[size_t(b.peer)] += double(b.bytes);
      in_secs[size_t(b.peer)] = std::max(in_secs[size_t(b.peer)], b.done_at);
    }
  }
  std::vector<TimedBlock> outs, ins;
  for (int32_t j = 0; j < n; ++j) {
    if (out_bytes[size_t(j)] > 0) outs.push_back({uint64_t(out_bytes[size_t(j)]), out_secs[size_t(j)]});
    if (in_bytes[size_t(j)] > 0) ins.push_back({uint64_t(in_bytes[size_t(j)]), in_secs[size_t(j)]});
  }
  const double out_rate = phase_rate(outs), in_rate = phase_rate(ins);
  link_rate_.observe(out_rate, in_rate);
  if (opt_.verbose) {
    std::string parts;
    char item[96];
    for (int32_t j = 0; j < n; ++j) {
      std::snprintf(item, sizeof item, "%s%.3f (%.1f MB/s)", j ? ", " : "", fractions[size_t(j)],
                    members.rate[size_t(j)] / 1e6);
      parts += item;
    }
    std::snprintf(item, sizeof item, "; this peer is rank %d, its link showed %.1f MB/s out, %.1f in", int(r),
                  out_rate / 1e6, in_rate / 1e6);
    detail("parts by link rate: " + parts + item);
  }
  return true;
}

}  // namespace loom_collab

// SPDX-License-Identifier: Apache-2.0
// The oob record (records.h): a member's part of a communicator's exchange,
// its trailing zeros trimmed on the wire, its state server, and what
// out-of-range fields get.
#include <gtest/gtest.h>

#include "records.h"
#include "records_support.hpp"

namespace loom_collab {
namespace {

using namespace records_test;

TEST(Records, AnOobSlotTravelsWithoutItsTrailingZeros) {
  // The ucx plugin's exchange: a 4,096-byte slot holding a few hundred bytes.
  OobRecord o = sample_oob();
  o.payload.assign(4096, 0);
  for (size_t i = 0; i < 300; ++i) o.payload[i] = static_cast<uint8_t>(i % 251 + 1);
  o.payload[150] = 0;  // a zero inside stays
  const Bytes b = encode(kRun, o, me());
  EXPECT_LT(b.size(), 300u + 150u + 4 + o.state_host.size()) << "the trailing zeros went on the wire";
  std::string why;
  auto back = decode_oob(kRun, b.data(), b.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->payload, o.payload);
  o.payload.assign(4096, 0);  // nothing but zeros
  const Bytes zeros = encode(kRun, o, me());
  back = decode_oob(kRun, zeros.data(), zeros.size(), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->payload, o.payload);
  // A count of trimmed zeros past the payload limit is refused, naming it.
  Bytes p = payload_of(zeros);
  const size_t count_at = p.size() - 4 - (2 + o.state_host.size()) - 2;  // before the state host and port
  for (int i = 0; i < 4; ++i) p[count_at + size_t(i)] = 0xff;
  const Bytes forged = frame(zeros[5], p);
  EXPECT_FALSE(decode_oob(kRun, forged.data(), forged.size(), &why));
  EXPECT_NE(why.find("trimmed zeros, above 49152"), std::string::npos) << why;
}

TEST(Records, OobRoundTripUpToThePayloadLimit) {
  for (size_t n : {size_t{0}, size_t{5}, kMaxOobPayload}) {
    OobRecord o = sample_oob();
    o.payload.assign(n, 0);
    for (size_t i = 0; i < n; ++i) o.payload[i] = static_cast<uint8_t>(i * 7);
    const Bytes b = encode(kRun, o, me());
    std::string why;
    auto back = decode_oob(kRun, b.data(), b.size(), &why);
    ASSERT_TRUE(back) << why;
    EXPECT_EQ(back->group_hash, o.group_hash);
    EXPECT_EQ(back->rank, o.rank);
    EXPECT_EQ(back->size, o.size);
    EXPECT_EQ(back->payload, o.payload);
    EXPECT_EQ(back->state_host, "10.0.0.7") << "where the member's state server listens";
    EXPECT_EQ(back->state_port, 7001);
  }
}

Bytes oob_payload(uint32_t rank, uint32_t size, uint32_t claimed, size_t actual) {
  Frame f;
  f.u64(1);
  f.u32(rank);
  f.u32(size);
  f.u32(claimed);
  f.b.resize(f.b.size() + actual);
  return f.b;
}

TEST(Records, RejectsOutOfRangeOobFields) {
  std::string why;
  auto bad = [&](const Bytes &payload) {
    const Bytes b = frame(4, payload);
    EXPECT_FALSE(decode_oob(kRun, b.data(), b.size(), &why));
    return why;
  };
  EXPECT_EQ(bad(oob_payload(4, 4, 0, 0)), "rank 4 not below size 4");
  EXPECT_EQ(bad(oob_payload(0, 0, 0, 0)), "rank 0 not below size 0");
  EXPECT_EQ(bad(oob_payload(0, 5000, 0, 0)), "size 5000 above 4096");
  EXPECT_EQ(bad(oob_payload(0, 2, kMaxOobPayload + 1, kMaxOobPayload + 1)),
            "oob payload of 49153 bytes, above 49152");
  EXPECT_NE(bad(oob_payload(0, 2, 10, 4)).find("payload ends inside data"), std::string::npos);
  // 4 bytes of payload, the count of trimmed zeros (0), an empty state
  // host and port 0, then 6 too many.
  EXPECT_EQ(bad(oob_payload(0, 2, 4, 18)), "6 unread bytes at the end of the payload");
  // A state host past 255 bytes.
  Bytes long_host = oob_payload(0, 2, 0, 4);
  long_host.push_back(0);  // its length, 256, little-endian
  long_host.push_back(1);
  long_host.resize(long_host.size() + 256 + 2, 'h');
  EXPECT_EQ(bad(long_host), "state host is 256 bytes, longer than 255");
}

}  // namespace
}  // namespace loom_collab

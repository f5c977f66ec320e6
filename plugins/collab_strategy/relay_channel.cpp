// SPDX-License-Identifier: Apache-2.0
#include "relay_channel.h"

#include <cmath>
#include <cstring>

namespace loom_collab {

using namespace wire;

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "relay values travel as little-endian f32, copied as they are");

const char *to_string(RelayStatus s) {
  switch (s) {
    case RelayStatus::contribution:
      return "contribution";
    case RelayStatus::averaged:
      return "averaged";
    case RelayStatus::missed:
      return "missed";
    case RelayStatus::refused:
      return "refused";
    case RelayStatus::resync:
      return "resync";
  }
  return "unknown";
}

namespace {

uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
double from_bits(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

std::string io_words(Io r, int err) {
  switch (r) {
    case Io::timeout:
      return "timed out";
    case Io::cancelled:
      return "cancelled";
    case Io::closed:
      return "the other side closed the connection";
    case Io::reset:
      return "connection error: " + errno_text(err);
    case Io::ok:
      break;
  }
  return "ok";
}

}  // namespace

bool RelayChannel::send_frame(const uint8_t *p, size_t n, const IoLimits &lim, Io *io, std::string *why) {
  int err = 0;
  if (out_) {
    Bytes frame;
    out_->frame(p, n, false, &frame);
    iovec iov{frame.data(), frame.size()};
    *io = write_all(fd_, &iov, 1, lim, &err);
  } else {
    uint8_t head[8];
    put32(head, uint32_t(n));
    put32(head + 4, crc(p, n));
    iovec iov[2] = {{head, sizeof head}, {const_cast<uint8_t *>(p), n}};
    *io = write_all(fd_, iov, 2, lim, &err);
  }
  if (*io != Io::ok) *why = "sending: " + io_words(*io, err);
  return *io == Io::ok;
}

bool RelayChannel::send(const RelayMessage &m, const IoLimits &lim, Io *io, std::string *why) {
  uint8_t h[kRelayHeaderSize] = {};
  put32(h, kRelayMagic);
  put16(h + 4, uint16_t(m.kind));
  put16(h + 6, uint16_t(m.status));
  put64(h + 8, uint64_t(m.epoch));
  put64(h + 16, bits(m.weight));
  put64(h + 24, bits(m.norm));
  put64(h + 32, m.values.size());
  put64(h + 40, m.peer);
  put32(h + 48, crc(h, 48));
  h[52] = uint8_t(m.codec);
  if (!send_frame(h, sizeof h, lim, io, why)) return false;
  const auto *bytes = reinterpret_cast<const uint8_t *>(m.values.data());
  size_t total = m.values.size() * sizeof(float);
  std::vector<uint8_t> encoded;
  if (m.codec != Codec::none) {
    encoded.resize(encoded_bytes(m.codec, m.values.size()));
    encode(m.codec, m.values.data(), m.values.size(), encoded.data());
    bytes = encoded.data();
    total = encoded.size();
  }
  for (size_t off = 0; off < total; off += kRelayFrameBytes)
    if (!send_frame(bytes + off, std::min(kRelayFrameBytes, total - off), lim, io, why)) return false;
  return true;
}

bool RelayChannel::recv_frame(uint8_t *p, size_t n, const IoLimits &lim, const IoLimits *first, Io *io,
                              std::string *why) {
  uint8_t lb[4];
  size_t got = 0;
  int err = 0;
  *io = read_all(fd_, lb, 1, first ? *first : lim, &got, &err);
  if (*io == Io::ok) *io = read_all(fd_, lb + 1, 3, lim, &got, &err);
  if (*io != Io::ok) {
    *why = "reading: " + io_words(*io, err);
    return false;
  }
  const uint32_t len = get32(lb);
  if (in_) {
    if (len != n + StreamSealer::kTagBytes) {
      *why = "a frame of " + std::to_string(len) + " bytes where " + std::to_string(n + StreamSealer::kTagBytes) +
             " were due";
      return false;
    }
    Bytes cipher(len), plain;
    *io = read_all(fd_, cipher.data(), len, lim, &got, &err);
    if (*io != Io::ok) {
      *why = "reading: " + io_words(*io, err);
      return false;
    }
    bool final = false;
    if (!in_->open(cipher.data(), len, &plain, &final) || plain.size() != n || final) {
      *why = "a frame of the encrypted stream does not open (altered, reordered or not of this stream)";
      return false;
    }
    std::memcpy(p, plain.data(), n);
    wipe(plain.data(), plain.size());
    return true;
  }
  if (len != n) {
    *why = "a frame of " + std::to_string(len) + " bytes where " + std::to_string(n) + " were due";
    return false;
  }
  uint8_t cb[4];
  *io = read_all(fd_, cb, 4, lim, &got, &err);
  if (*io == Io::ok) *io = read_all(fd_, p, n, lim, &got, &err);
  if (*io != Io::ok) {
    *why = "reading: " + io_words(*io, err);
    return false;
  }
  if (crc(p, n) != get32(cb)) {
    *why = "a frame's checksum does not match (" + hex(crc(p, n)) + ", the frame says " + hex(get32(cb)) + ")";
    return false;
  }
  return true;
}

bool RelayChannel::recv(RelayMessage *m, uint64_t max_count, const IoLimits &lim, IoLimits first_byte, Io *io,
                        std::string *why) {
  uint8_t h[kRelayHeaderSize];
  if (!recv_frame(h, sizeof h, lim, &first_byte, io, why)) return false;
  if (get32(h) != kRelayMagic) {
    *why = "not a relay message: bad magic " + hex(get32(h));
    return false;
  }
  if (get32(h + 48) != crc(h, 48)) {
    *why = "a relay message header's checksum does not match";
    return false;
  }
  const uint16_t kind = get16(h + 4), status = get16(h + 6);
  if (kind != uint16_t(RelayKind::gradients) && kind != uint16_t(RelayKind::parameters)) {
    *why = "a relay message of unknown kind " + std::to_string(kind) + " (1 gradients, 2 parameters)";
    return false;
  }
  if (status > uint16_t(RelayStatus::resync)) {
    *why = "a relay message of unknown status " + std::to_string(status) +
           " (0 contribution, 1 averaged, 2 missed, 3 refused, 4 resync)";
    return false;
  }
  if (h[52] > uint8_t(Codec::blockwise8) || h[53] || h[54] || h[55]) {
    *why = "a relay message in unknown codec " + std::to_string(h[52]) + " (0 none, 1 fp16, 2 bf16, 3 blockwise8)";
    return false;
  }
  const Codec codec = Codec(h[52]);
  const uint64_t count = get64(h + 32);
  if (count > max_count) {
    *why = "a relay message of " + std::to_string(count) + " values, more than the " + std::to_string(max_count) +
           " this model has";
    return false;
  }
  m->kind = RelayKind(kind);
  m->status = RelayStatus(status);
  m->epoch = int64_t(get64(h + 8));
  m->weight = from_bits(get64(h + 16));
  m->norm = from_bits(get64(h + 24));
  m->peer = get64(h + 40);
  m->codec = codec;
  m->values.resize(count);
  m->why.clear();
  std::vector<uint8_t> encoded(codec != Codec::none ? encoded_bytes(codec, count) : 0);
  auto *bytes = codec != Codec::none ? encoded.data() : reinterpret_cast<uint8_t *>(m->values.data());
  const size_t total = codec != Codec::none ? encoded.size() : count * sizeof(float);
  for (size_t off = 0; off < total; off += kRelayFrameBytes)
    if (!recv_frame(bytes + off, std::min(kRelayFrameBytes, total - off), lim, nullptr, io, why)) return false;
  if (codec != Codec::none) decode(codec, encoded.data(), count, m->values.data());
  *io = Io::ok;
  return true;
}

}  // namespace loom_collab

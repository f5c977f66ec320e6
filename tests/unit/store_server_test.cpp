// SPDX-License-Identifier: Apache-2.0
// The launcher's store server against LibTorch's own c10d::TCPStore client
// (through make_tcp_store) and against raw sockets that speak the protocol
// badly or not at all.
#include "../../core/src/store_server.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "loom/launch.hpp"
#include "loom/store.hpp"
#include "../support/subprocess.hpp"
#include "test_paths.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::unique_ptr<StoreServer> serve_on_loopback(StoreServer::Limits limits = {}) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto server = std::make_unique<StoreServer>(reinterpret_cast<sockaddr*>(&a), sizeof a, pick_free_port(), limits);
  server->start();
  return server;
}

// A raw connection to the server, for what no c10d client would send.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { ::close(fd_); }
  bool connected() const { return connected_; }
  void send(const std::string& b) { ASSERT_EQ(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL), (ssize_t)b.size()); }
  // The next bytes (up to n) within timeout; "" on end of stream or timeout.
  std::string recv(size_t n, std::chrono::milliseconds timeout, bool* closed = nullptr) {
    pollfd p{fd_, POLLIN, 0};
    if (closed) *closed = false;
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    std::string buf(n, '\0');
    const ssize_t got = ::recv(fd_, buf.data(), n, 0);
    if (got <= 0 && closed) *closed = true;
    buf.resize(got > 0 ? static_cast<size_t>(got) : 0);
    return buf;
  }
  bool closed_by_server(std::chrono::milliseconds timeout) {
    bool closed = false;
    recv(1, timeout, &closed);
    return closed;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string u64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }
std::string str(const std::string& s) { return u64(s.size()) + s; }
// The query's byte in the c10d protocol of the LibTorch this is built with.
std::string q(const char* name) {
  const int code = StoreServer::wire_code(name);
  EXPECT_GE(code, 0) << name;
  return std::string(1, char(code));
}

TEST(StoreServer, LibTorchClientsSetGetAndAdd) {
  auto server = serve_on_loopback();
  auto a = make_tcp_store("127.0.0.1", server->port(), false, 2, 10s);
  auto b = make_tcp_store("127.0.0.1", server->port(), false, 2, 10s);
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(a->set("k", bytes("hello")).is_ok());
  });
  std::vector<uint8_t> value;
  ASSERT_TRUE(b->get("k", &value, 10s).is_ok());
  writer.join();
  EXPECT_EQ(value, bytes("hello"));
  ASSERT_TRUE(a->set("big", std::vector<uint8_t>(3 << 20, 7)).is_ok());
  ASSERT_TRUE(b->get("big", &value, 10s).is_ok());
  EXPECT_EQ(value, std::vector<uint8_t>(3 << 20, 7));
  int64_t n = 0;
  ASSERT_TRUE(a->add("n", 5, &n).is_ok());
  ASSERT_TRUE(b->add("n", -2, &n).is_ok());
  EXPECT_EQ(n, 3);
  EXPECT_EQ(b->get("never", &value, 200ms).code(), LOOM_ERR_TIMEOUT);
  ASSERT_TRUE(b->get("k", &value, 1s).is_ok());  // the connection still works after a timeout
}

// PyTorch's own TCPStore client (python3-torch) runs one sequence of queries
// against c10d's server and against this one; every answer must match, the
// queries c10d's launcher never sends (compare_set, delete_key, num_keys)
// and timeouts included.
TEST(StoreServer, AnswersEveryQueryOfPyTorchsClientAsC10dsServerDoes) {
  const std::string script = std::string(kSourceDir) + "/tests/unit/store_client.py";
  const auto reference = test::run_process({kDebianPython, script, "--serve"}, {}, 60s);
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  auto server = serve_on_loopback();
  const auto ours = test::run_process({kDebianPython, script, "127.0.0.1", std::to_string(server->port())}, {}, 60s);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  EXPECT_NE(reference.out.find("compare_set a wrong->3 b'2'"), std::string::npos) << reference.out;
  EXPECT_EQ(ours.out, reference.out);
}

TEST(StoreServer, WaitIsAnsweredWhenTheLastKeyIsSet) {
  auto server = serve_on_loopback();
  Raw waiter(server->port()), writer(server->port());
  waiter.send(q("wait") + u64(2) + str("x") + str("y"));  // WAIT x y
  writer.send(q("set") + str("x") + str("1"));             // SET x
  EXPECT_EQ(waiter.recv(1, 300ms), "") << "answered before y was set";
  writer.send(q("set") + str("y") + str("2"));  // SET y
  EXPECT_EQ(waiter.recv(1, 5s), std::string(1, 0));      // STOP_WAITING
  writer.send(q("check") + u64(2) + str("x") + str("z"));  // CHECK x z
  EXPECT_EQ(writer.recv(1, 5s), std::string(1, 1));              // NOT_READY
  writer.send(q("num_keys"));                                  // GETNUMKEYS
  EXPECT_EQ(writer.recv(8, 5s), u64(2));
}

TEST(StoreServer, JunkDropsThatConnectionOnly) {
  StoreServer::Limits limits;
  limits.partial_timeout = 300ms;
  auto server = serve_on_loopback(limits);
  auto store = make_tcp_store("127.0.0.1", server->port(), false, 1, 10s);
  ASSERT_TRUE(store->set("before", bytes("1")).is_ok());
  {
    Raw junk(server->port());
    junk.send("GET / HTTP/1.1\r\n\r\n");  // 'G' is no query type
    EXPECT_TRUE(junk.closed_by_server(5s));
  }
  {
    Raw huge(server->port());
    huge.send(q("set") + u64(1ull << 40));  // SET with a 1 TiB key
    EXPECT_TRUE(huge.closed_by_server(5s));
  }
  {
    Raw huge(server->port());
    huge.send(q("set") + str("k") + u64(1ull << 62));  // a 4 EiB value
    EXPECT_TRUE(huge.closed_by_server(5s));
  }
  {
    Raw many(server->port());
    many.send(q("wait") + u64(1ull << 32));  // WAIT on 4 billion keys
    EXPECT_TRUE(many.closed_by_server(5s));
  }
  {
    Raw partial(server->port());
    partial.send(q("set") + str("k") + u64(10) + "abc");  // and the rest never comes
    EXPECT_TRUE(partial.closed_by_server(5s));
  }
  {
    Raw missing(server->port());
    missing.send(q("get") + str("/no-such-key"));  // GET of nothing, as c10d's server drops it
    EXPECT_TRUE(missing.closed_by_server(5s));
  }
  Raw idle(server->port());  // an idle connection stays: c10d's callback connection is idle
  EXPECT_FALSE(idle.closed_by_server(1s));
  std::vector<uint8_t> value;
  ASSERT_TRUE(store->set("after", bytes("2")).is_ok());
  ASSERT_TRUE(store->get("before", &value, 5s).is_ok());
  EXPECT_EQ(value, bytes("1"));
}

TEST(StoreServer, ConnectionsBeyondTheLimitAreClosed) {
  StoreServer::Limits limits;
  limits.max_connections = 2;
  auto server = serve_on_loopback(limits);
  auto first = std::make_unique<Raw>(server->port());
  Raw second(server->port());
  EXPECT_FALSE(second.closed_by_server(300ms));
  Raw third(server->port());
  EXPECT_TRUE(third.closed_by_server(5s));
  first.reset();  // a slot frees up
  std::this_thread::sleep_for(300ms);
  Raw fourth(server->port());
  fourth.send(q("add") + str("n") + std::string("\x07\0\0\0\0\0\0\0", 8));  // ADD n 7
  EXPECT_EQ(fourth.recv(8, 5s), std::string("\x07\0\0\0\0\0\0\0", 8));
}

}  // namespace
}  // namespace loom

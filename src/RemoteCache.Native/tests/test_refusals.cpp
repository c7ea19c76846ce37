// Refusals: logged at most once per (cause, peer) and window with a count of the rest (common/refusal_log.h), and
// a tcp Connect of another wire version told which version the server speaks, as shm tells it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/refusal_log.h"
#include "harness.h"

namespace {

using namespace rctest;

constexpr uint64_t kS = 1'000'000'000;
constexpr uint64_t kStart = 5 * kS;

struct Lines {
  std::vector<std::string> lines;
  rc::RefusalLog::Sink sink() {
    return [this](const std::string& line) { lines.push_back(line); };
  }
};

TEST(RefusalLog, TheFirstOfAKindIsLoggedTheRestCountedInOneLineOnceTheWindowHasPassed) {
  Lines out;
  rc::RefusalLog log(10 * kS, 16, out.sink());
  for (int i = 0; i < 1000; ++i) log.refused("RC_E_AUTH", "ip:10.0.0.9", "refusing #" + std::to_string(i), kStart + i * 1000);
  ASSERT_EQ(out.lines.size(), 1u);
  EXPECT_EQ(out.lines[0], "refusing #0");
  log.flush(kStart + 9 * kS);  // the window has not passed
  EXPECT_EQ(out.lines.size(), 1u);
  log.refused("RC_E_AUTH", "ip:10.0.0.9", "refusing #1000", kStart + 11 * kS);  // a new window: the sum, then this one
  ASSERT_EQ(out.lines.size(), 3u);
  EXPECT_NE(out.lines[1].find("refused 999 more connection(s) within 11.0 s: RC_E_AUTH from ip:10.0.0.9; the last: refusing #999"),
            std::string::npos)
      << out.lines[1];
  EXPECT_EQ(out.lines[2], "refusing #1000");
}

TEST(RefusalLog, CausesAndPeersAreCountedApartAndAStopSumsUpEveryWindow) {
  Lines out;
  rc::RefusalLog log(10 * kS, 16, out.sink());
  log.refused("RC_E_AUTH", "ip:a", "auth a", kStart);
  log.refused("RC_E_AUTH", "ip:b", "auth b", kStart);
  log.refused("connection limit", "ip:a", "limit a", kStart);
  log.refused("RC_E_AUTH", "ip:a", "auth a again", kStart + 1);
  EXPECT_EQ(out.lines, (std::vector<std::string>{"auth a", "auth b", "limit a"}));
  log.flush(UINT64_MAX);
  ASSERT_EQ(out.lines.size(), 4u);
  EXPECT_NE(out.lines[3].find("refused 1 more connection(s)"), std::string::npos) << out.lines[3];
  log.flush(UINT64_MAX);  // nothing left
  EXPECT_EQ(out.lines.size(), 4u);
}

TEST(RefusalLog, PeersPastTheBoundAreCountedTogether) {
  Lines out;
  rc::RefusalLog log(10 * kS, 4, out.sink());
  for (int i = 0; i < 100; ++i) log.refused("silent", "ip:" + std::to_string(i), "peer " + std::to_string(i), kStart);
  // 4 peers of their own, then the first of the others logged and the remaining 95 counted under "other peers".
  ASSERT_EQ(out.lines.size(), 5u);
  log.flush(UINT64_MAX);
  ASSERT_EQ(out.lines.size(), 6u);
  EXPECT_NE(out.lines[5].find("refused 95 more connection(s)"), std::string::npos) << out.lines[5];
  EXPECT_NE(out.lines[5].find("from other peers"), std::string::npos) << out.lines[5];
}

TEST(Refusals, ATcpConnectOfAnotherWireVersionIsToldWhichVersionTheServerSpeaks) {
  const char* listen[] = {"tcp:127.0.0.1:0"};
  rc_server_options so{};
  so.listen = listen;
  so.listen_count = 1;
  so.region_size = 1 << 20;
  so.memory_limit = 4 << 20;
  rc_server* server = nullptr;
  ASSERT_EQ(rc_server_start(&so, &server), RC_OK) << rc_last_error();
  const std::string endpoint = rc_server_endpoint(server, 0);
  Fd sock;
  sock.fd = connect_tcp(endpoint);
  ASSERT_GE(sock.fd, 0);
  ConnectSpec spec;
  const auto frame = connect_frame(spec, static_cast<uint8_t>(wire::kVersion + 1));
  ASSERT_TRUE(send_all(sock.fd, frame.data(), frame.size()));
  const RawReply reply = read_connect_reply(sock.fd, 5000, wire::kVersion);
  ASSERT_TRUE(reply.received) << "the server closed the connection without a reply";
  EXPECT_EQ(reply.reply.status, RC_E_PROTOCOL);
  EXPECT_NE(reply.message().find("wire version " + std::to_string(wire::kVersion + 1) + ", this server " +
                                 std::to_string(wire::kVersion)),
            std::string::npos)
      << reply.message();
  rc_server_stop(server);
}

}  // namespace

// rc_api_version and rc_get_object_counts: the live-object counts follow every open and close,
// whatever the order, failed opens count nothing, and a refused rc_cache_close changes nothing and
// names the sessions that keep the cache open.
//
// The counts are process-wide, so every check is relative to the counts when the test started
// (ctest runs each test in its own process, but a hand-run binary runs them all in one).
#include "harness.h"

namespace {

using namespace rctest;

rc_object_counts counts() {
  rc_object_counts c{};
  EXPECT_EQ(rc_get_object_counts(&c), RC_OK) << last_error();
  return c;
}

// Counts relative to a baseline; expectations name the kind that is off.
struct CountDelta {
  int64_t caches;
  int64_t sessions;
  int64_t servers;
};

::testing::AssertionResult counts_are(const rc_object_counts& base, CountDelta want) {
  const rc_object_counts now = counts();
  const CountDelta got{static_cast<int64_t>(now.caches - base.caches), static_cast<int64_t>(now.sessions - base.sessions),
                       static_cast<int64_t>(now.servers - base.servers)};
  if (got.caches == want.caches && got.sessions == want.sessions && got.servers == want.servers)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "live objects (caches, sessions, servers) changed by (" << got.caches << ", "
                                       << got.sessions << ", " << got.servers << "), expected (" << want.caches << ", "
                                       << want.sessions << ", " << want.servers << ")";
}

std::string handle_text(const void* handle) {
  std::ostringstream o;
  o << handle;
  return o.str();
}

// An embedded server on loopback tcp, stopped at scope end unless the test stopped it.
class EmbeddedServer {
 public:
  EmbeddedServer() {
    const char* listen = "tcp:127.0.0.1:0";
    rc_server_options so{};
    so.listen = &listen;
    so.listen_count = 1;
    so.region_size = 1 * MiB;
    so.memory_limit = 16 * MiB;
    so.max_threads = 1;
    status_ = rc_server_start(&so, &server_);
    if (status_ == RC_OK) endpoint_ = rc_server_endpoint(server_, 0);
  }
  EmbeddedServer(const EmbeddedServer&) = delete;
  EmbeddedServer& operator=(const EmbeddedServer&) = delete;
  ~EmbeddedServer() {
    if (server_ != nullptr) rc_server_stop(server_);
  }

  ::testing::AssertionResult started() const {
    if (status_ == RC_OK) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "rc_server_start = " << sname(status_) << ": " << last_error();
  }
  rc_status stop() {
    const rc_status st = rc_server_stop(server_);
    server_ = nullptr;
    return st;
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  rc_server* server_ = nullptr;
  rc_status status_ = RC_OK;
  std::string endpoint_;
};

rc_cache_options small_options() { return make_options(fresh_cache_id(), rc_config{0, 1, 1, 1}, 2); }

TEST(ApiVersion, IsTheHeadersVersion) { EXPECT_EQ(rc_api_version(), static_cast<uint32_t>(RC_API_VERSION)); }

TEST(ObjectCounts, NullOutIsInvalidArgument) {
  EXPECT_EQ(rc_get_object_counts(nullptr), RC_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out"), std::string::npos) << last_error();
}

TEST(ObjectCounts, FollowOpenAndClose) {
  const rc_object_counts base = counts();
  EXPECT_TRUE(counts_are(base, {0, 0, 0}));
  {
    EmbeddedServer server;
    ASSERT_TRUE(server.started());
    EXPECT_TRUE(counts_are(base, {0, 0, 1}));

    CacheHandle cache;
    ASSERT_EQ(open_cache({server.endpoint()}, small_options(), &cache.c), RC_OK) << last_error();
    EXPECT_TRUE(counts_are(base, {1, 0, 1}));

    SessionHandle first, second;
    ASSERT_EQ(rc_session_open(cache.c, &first.s), RC_OK) << last_error();
    ASSERT_EQ(rc_session_open(cache.c, &second.s), RC_OK) << last_error();
    EXPECT_TRUE(counts_are(base, {1, 2, 1}));

    EXPECT_EQ(first.close(), RC_OK) << last_error();
    EXPECT_TRUE(counts_are(base, {1, 1, 1}));
    EXPECT_EQ(second.close(), RC_OK) << last_error();
    EXPECT_TRUE(counts_are(base, {1, 0, 1}));
    EXPECT_EQ(cache.close(), RC_OK) << last_error();
    EXPECT_TRUE(counts_are(base, {0, 0, 1}));
    EXPECT_EQ(server.stop(), RC_OK) << last_error();
  }
  EXPECT_TRUE(counts_are(base, {0, 0, 0}));
}

// The order a binding's finalizers may pick: the server first, then the session, then the cache.
TEST(ObjectCounts, ServerStoppedBeforeItsClients) {
  const rc_object_counts base = counts();
  EmbeddedServer server;
  ASSERT_TRUE(server.started());
  CacheHandle cache;
  ASSERT_EQ(open_cache({server.endpoint()}, small_options(), &cache.c), RC_OK) << last_error();
  SessionHandle session;
  ASSERT_EQ(rc_session_open(cache.c, &session.s), RC_OK) << last_error();
  EXPECT_TRUE(counts_are(base, {1, 1, 1}));

  EXPECT_EQ(server.stop(), RC_OK) << last_error();
  EXPECT_TRUE(counts_are(base, {1, 1, 0}));
  EXPECT_EQ(session.close(), RC_OK) << last_error();
  EXPECT_TRUE(counts_are(base, {1, 0, 0}));
  EXPECT_EQ(cache.close(), RC_OK) << last_error();
  EXPECT_TRUE(counts_are(base, {0, 0, 0}));
}

TEST(ObjectCounts, FailedOpensCountNothing) {
  const rc_object_counts base = counts();

  const char* bad_listen = "nonsense:1";
  rc_server_options so{};
  so.listen = &bad_listen;
  so.listen_count = 1;
  rc_server* server = nullptr;
  EXPECT_NE(rc_server_start(&so, &server), RC_OK);
  EXPECT_EQ(server, nullptr);
  EXPECT_TRUE(counts_are(base, {0, 0, 0}));

  EmbeddedServer running;
  ASSERT_TRUE(running.started());
  rc_cache_options bad_options = small_options();
  bad_options.regions_per_server = 0;
  CacheHandle cache;
  EXPECT_EQ(open_cache({running.endpoint()}, bad_options, &cache.c), RC_E_INVALID_ARGUMENT);
  EXPECT_EQ(cache.c, nullptr);
  rc_cache_options too_big = small_options();
  too_big.regions_per_server = 17;  // the server lends 16 regions
  EXPECT_EQ(open_cache({running.endpoint()}, too_big, &cache.c), RC_E_NO_MEMORY);
  EXPECT_EQ(cache.c, nullptr);
  EXPECT_TRUE(counts_are(base, {0, 0, 1}));
}

TEST(ObjectCounts, CloseOfCacheWithOpenSessionsIsRefusedAndNamesThem) {
  const rc_object_counts base = counts();
  EmbeddedServer server;
  ASSERT_TRUE(server.started());
  CacheHandle cache;
  ASSERT_EQ(open_cache({server.endpoint()}, small_options(), &cache.c), RC_OK) << last_error();
  SessionHandle first, second;
  ASSERT_EQ(rc_session_open(cache.c, &first.s), RC_OK) << last_error();
  ASSERT_EQ(rc_session_open(cache.c, &second.s), RC_OK) << last_error();

  EXPECT_EQ(rc_cache_close(cache.c), RC_E_INVALID_ARGUMENT);
  std::string error = last_error();
  EXPECT_NE(error.find("2 sessions still open"), std::string::npos) << error;
  EXPECT_NE(error.find(handle_text(first.s)), std::string::npos) << error;
  EXPECT_NE(error.find(handle_text(second.s)), std::string::npos) << error;
  EXPECT_TRUE(counts_are(base, {1, 2, 1}));

  // The refused close changed nothing: the sessions still work.
  const auto data = pattern(7, 64);
  EXPECT_EQ(sync_write(first.s, 0, data.data(), data.size()), RC_OK);
  std::vector<uint8_t> back(data.size());
  EXPECT_EQ(sync_read(second.s, 0, back.data(), back.size()), RC_OK);
  EXPECT_TRUE(back == data);

  const std::string first_text = handle_text(first.s);
  EXPECT_EQ(first.close(), RC_OK) << last_error();
  EXPECT_EQ(rc_cache_close(cache.c), RC_E_INVALID_ARGUMENT);
  error = last_error();
  EXPECT_NE(error.find("1 session still open"), std::string::npos) << error;
  EXPECT_NE(error.find(handle_text(second.s)), std::string::npos) << error;
  EXPECT_EQ(error.find(first_text), std::string::npos) << "a closed session is named: " << error;
  EXPECT_TRUE(counts_are(base, {1, 1, 1}));

  EXPECT_EQ(second.close(), RC_OK) << last_error();
  EXPECT_EQ(cache.close(), RC_OK) << last_error();
  EXPECT_TRUE(counts_are(base, {0, 0, 1}));
}

}  // namespace

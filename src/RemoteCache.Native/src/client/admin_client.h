// The client end of an admin connection (remotecache_admin.h): connects, authenticates with the
// admission key (hello, challenge, then a Ping both ends MAC), and runs one sealed request at a time,
// every call bounded by the handle's timeout. After a failure that leaves the exchange out of step
// (a timeout, a reply that does not verify, the server's refusal) the connection is broken for good.
#pragma once

#include <remotecache/remotecache_admin.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/admin_codec.h"
#include "common/status.h"
#include "transport/transport.h"

namespace rc::client {

class AdminClient {
 public:
  // Null with `status` set (and the reason as the last error) on failure.
  static std::unique_ptr<AdminClient> connect(const std::string& endpoint, std::span<const uint8_t> key,
                                              uint32_t timeout_ms, Status& status);

  // Thread-safe: calls take turns on the connection.
  Status stats(rc_server_stats& out);
  Status list_caches(rc_admin_cache* out, uint32_t max, uint32_t& count);
  Status drop_cache(uint64_t cache_id, uint32_t& dropped);
  // A lease end the server refuses (RC_E_INVALID_ARGUMENT: past its clock's bound) is not a broken
  // connection: the status and the server's reason come back.
  Status extend_lease(uint64_t cache_id, uint64_t lease_end_unix_ms, uint32_t& caches);
  // Waits for the pull's own timeout (request.timeout_ms, resolved) plus the handle's. A pull that
  // fails is not a broken connection: its status and reason come back as the result.
  Status pull_region(const wire::AdminPullRequest& request, rc_pull_result& out);

 private:
  AdminClient(std::unique_ptr<transport::MessageLink> link, std::string endpoint, uint32_t timeout_ms);

  Status authenticate(std::span<const uint8_t> key, uint64_t deadline_ns);
  // Sends one request and returns its verified reply's payload. Called with mutex_ held.
  Status call(wire::AdminOp op, const wire::AdminRequest& request, uint64_t deadline_ns,
              std::vector<std::byte>& payload);
  // The same for a request whose payload is not an AdminRequest (PullRegion).
  Status call_with(wire::AdminOp op, std::span<const std::byte> request, uint64_t deadline_ns,
                   std::vector<std::byte>& payload);
  // Marks the connection unusable and returns `status` with `why` as the last error.
  Status broken(Status status, std::string why);
  uint64_t deadline() const;

  std::mutex mutex_;
  std::unique_ptr<transport::MessageLink> link_;
  const std::string endpoint_;
  const uint32_t timeout_ms_;
  admin::SessionKey session_key_{};
  uint64_t next_seq_ = 1;
  Status broken_ = RC_OK;  // why the connection is unusable, once it is
  std::string broken_why_;
};

}  // namespace rc::client

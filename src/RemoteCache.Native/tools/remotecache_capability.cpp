// remotecache-capability: mints capabilities for servers started with --admission-key (what the cache
// manager does for its clients), for operators and tests.
//
//   remotecache-capability --key FILE --cache-id N --server ID --regions N [--ttl SECONDS]
//   remotecache-capability --key FILE --cache-id N --server ID --migration [--ttl SECONDS]
//   remotecache-capability --new-key FILE
//
// Prints the capability's text form; give it to the client (rc_cache_options.capabilities, or
// RemoteCacheOptions.Capabilities in .NET), one per server. --migration mints a migration capability
// instead (rc_capability_mint_migration): for a region pull from that server (remotecache-admin pull
// on the target), never for a client. --new-key writes 32 random bytes, readable by the owner only.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <remotecache/remotecache.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "key_file.h"
#include "size_arg.h"

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "remotecache-capability: %s\n"
               "usage: remotecache-capability --key FILE --cache-id N --server ID --regions N [--ttl SECONDS]\n"
               "       remotecache-capability --key FILE --cache-id N --server ID --migration [--ttl SECONDS]\n"
               "       remotecache-capability --new-key FILE\n"
               "  --server: the server's id (printed by remotecache-server as 'server id ...')\n"
               "  --ttl: seconds until the capability, and the lease of the cache it opens, ends (default 3600)\n"
               "  --migration: a migration capability for that server (the SOURCE of a region pull, its key):\n"
               "               it lets a target server read the live cache with that id, and admits no client\n",
               why);
  return 2;
}

int new_key(const std::string& path) {
  std::vector<uint8_t> key(32);
  rc::crypto::random_bytes(key);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "remotecache-capability: cannot create %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  const bool ok = write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size());
  close(fd);
  if (!ok) {
    std::fprintf(stderr, "remotecache-capability: cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string key_path, server, new_key_path;
  uint64_t cache_id = 0, regions = 0, ttl = 3600;
  bool have_id = false;
  bool migration = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--key" && has_value) {
      key_path = argv[++i];
    } else if (arg == "--new-key" && has_value) {
      new_key_path = argv[++i];
    } else if (arg == "--server" && has_value) {
      server = argv[++i];
    } else if (arg == "--cache-id" && has_value) {
      const auto v = rc::tools::parse_size(argv[++i]);
      if (!v) return usage("bad --cache-id");
      cache_id = *v;
      have_id = true;
    } else if (arg == "--regions" && has_value) {
      const auto v = rc::tools::parse_size(argv[++i]);
      if (!v || *v == 0 || *v > RC_MAX_REGIONS_PER_SERVER) return usage(("bad --regions (1.." + std::to_string(RC_MAX_REGIONS_PER_SERVER) + ")").c_str());
      regions = *v;
    } else if (arg == "--ttl" && has_value) {
      const auto v = rc::tools::parse_size(argv[++i]);
      if (!v || *v == 0 || *v > 10ull * 365 * 24 * 3600) return usage("bad --ttl");
      ttl = *v;
    } else if (arg == "--migration") {
      migration = true;
    } else if (arg == "--help" || arg == "-h") {
      usage("help");
      return 0;
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (!new_key_path.empty()) return new_key(new_key_path);
  if (migration && regions != 0) return usage("--migration grants no regions: leave out --regions");
  if (key_path.empty() || server.empty() || !have_id || (regions == 0 && !migration))
    return usage("--key, --cache-id, --server and --regions (or --migration) are required");
  std::string why;
  const std::vector<uint8_t> key = rc::tools::read_key_file(key_path, why);
  if (key.empty()) {
    std::fprintf(stderr, "remotecache-capability: %s\n", why.c_str());
    return 1;
  }
  const auto now_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  char text[RC_MAX_CAPABILITY_TEXT];
  const uint64_t expires = now_ms + ttl * 1000;
  const rc_status st =
      migration ? rc_capability_mint_migration(key.data(), key.size(), cache_id, server.c_str(), expires, text, sizeof text)
                : rc_capability_mint(key.data(), key.size(), cache_id, server.c_str(), static_cast<uint32_t>(regions),
                                     expires, text, sizeof text);
  if (st != RC_OK) {
    std::fprintf(stderr, "remotecache-capability: %s\n", rc_last_error());
    return 1;
  }
  std::printf("%s\n", text);
  return 0;
}

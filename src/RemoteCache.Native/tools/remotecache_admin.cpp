// remotecache-admin: asks a cache server what it holds, or drops caches, through its admin interface
// (remotecache_admin.h), authenticated with the server's admission key: what the cache manager does,
// for operators.
//
//   remotecache-admin --connect ENDPOINT --key FILE [--timeout MS] [--json] stats
//   remotecache-admin --connect ENDPOINT --key FILE [--timeout MS] [--json] caches
//   remotecache-admin --connect ENDPOINT --key FILE [--timeout MS] [--json] drop CACHE_ID
//   remotecache-admin --connect TARGET --key FILE [--timeout MS] [--json] pull CACHE_ID --source ENDPOINT
//                     --source-region N --target-region N --capability TEXT [--regions N] [--pull-timeout MS]
//                     [--max-mib-per-s N]
//
// Prints readable text, or one JSON object with --json. Exit status: 0 done, 1 the server or the
// connection failed (the reason on stderr), 2 bad arguments.
#include <remotecache/remotecache_admin.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "key_file.h"

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "remotecache-admin: %s\n"
               "usage: remotecache-admin --connect ENDPOINT --key FILE [--timeout MS] [--json] COMMAND\n"
               "  COMMAND: stats            what the server lends and holds\n"
               "           caches           every cache it holds\n"
               "           drop CACHE_ID    drops every cache with this id (their clients get RC_E_EXPIRED)\n"
               "           pull CACHE_ID    the server (the target) copies a region of the cache with this id\n"
               "                            from another server (the source) into a region of its own cache\n"
               "                            with this id (live migration); needs:\n"
               "             --source ENDPOINT   the source's endpoint as the target reaches it (tcp:, shm:, verbs:)\n"
               "             --source-region N   the region to copy, within the source's cache\n"
               "             --target-region N   the region to overwrite, within the target's cache\n"
               "             --capability TEXT   a migration capability for the source (remotecache-capability\n"
               "                                 --migration with the SOURCE's key)\n"
               "             --regions N         copy N consecutive regions from those on (default 1)\n"
               "             --pull-timeout MS   bound of the copy on the target (default %u)\n"
               "             --max-mib-per-s N   pace the copy (default: as fast as the transport goes)\n"
               "  ENDPOINT: one of the server's tcp:HOST:PORT or shm:PATH endpoints\n"
               "  --key: the server's admission key file (--admission-key of remotecache-server)\n"
               "  --timeout: bound of every step in milliseconds (default %u; a pull waits its --pull-timeout more)\n",
               why, RC_DEFAULT_PULL_TIMEOUT_MS, RC_DEFAULT_ADMIN_TIMEOUT_MS);
  return 2;
}

bool parse_u64(std::string_view text, uint64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size() && !text.empty();
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string duration(uint64_t ms) {
  const uint64_t s = ms / 1000;
  char text[64];
  if (s >= 86400)
    std::snprintf(text, sizeof text, "%llud %02lluh %02llum", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>(s / 3600 % 24), static_cast<unsigned long long>(s / 60 % 60));
  else if (s >= 3600)
    std::snprintf(text, sizeof text, "%lluh %02llum %02llus", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60), static_cast<unsigned long long>(s % 60));
  else
    std::snprintf(text, sizeof text, "%llum %02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  return text;
}

uint64_t unix_now_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// "2026-11-23T10:00:00Z (in 59m 58s)", or "none" for no lease.
std::string lease_text(uint64_t end_ms) {
  if (end_ms == 0) return "none";
  const std::time_t seconds = static_cast<std::time_t>(end_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  const uint64_t now = unix_now_ms();
  return std::string(when) + (end_ms > now ? " (in " + duration(end_ms - now) + ")" : " (ended)");
}

int failed(const char* what, rc_status status) {
  std::fprintf(stderr, "remotecache-admin: %s failed with %s: %s\n", what, rc_status_name(status), rc_last_error());
  return 1;
}

int stats(rc_admin* admin, bool json) {
  rc_server_stats s{};
  s.size = sizeof s;
  if (const rc_status st = rc_admin_stats(admin, &s); st != RC_OK) return failed("stats", st);
  if (json) {
    std::printf("{\"server_id\":%s,\"memory_limit\":%llu,\"memory_lent\":%llu,\"region_size\":%llu,\"caches\":%u,"
                "\"regions_lent\":%u,\"data_connections\":%u,\"admin_connections\":%u,\"server_threads\":%u,"
                "\"uptime_ms\":%llu}\n",
                json_string(s.server_id).c_str(), static_cast<unsigned long long>(s.memory_limit),
                static_cast<unsigned long long>(s.memory_lent), static_cast<unsigned long long>(s.region_size),
                s.caches, s.regions_lent, s.data_connections, s.admin_connections, s.server_threads,
                static_cast<unsigned long long>(s.uptime_ms));
    return 0;
  }
  const double share = s.memory_limit == 0 ? 0.0 : 100.0 * static_cast<double>(s.memory_lent) /
                                                         static_cast<double>(s.memory_limit);
  std::printf("server id        %s\n", s.server_id);
  std::printf("uptime           %s\n", duration(s.uptime_ms).c_str());
  std::printf("memory lent      %llu of %llu bytes (%.1f %%)\n", static_cast<unsigned long long>(s.memory_lent),
              static_cast<unsigned long long>(s.memory_limit), share);
  std::printf("region size      %llu bytes\n", static_cast<unsigned long long>(s.region_size));
  std::printf("caches           %u (%u regions lent)\n", s.caches, s.regions_lent);
  std::printf("connections      %u data, %u admin (at most %u admin)\n", s.data_connections, s.admin_connections,
              RC_MAX_ADMIN_CONNECTIONS);
  std::printf("server threads   %u\n", s.server_threads);
  return 0;
}

int caches(rc_admin* admin, bool json) {
  std::vector<rc_admin_cache> list(64);
  uint32_t count = 0;
  for (;;) {
    const rc_status st = rc_admin_list_caches(admin, list.data(), static_cast<uint32_t>(list.size()), &count);
    if (st != RC_OK) return failed("listing caches", st);
    if (count <= list.size()) break;
    list.resize(count + count / 4);  // caches created meanwhile
  }
  list.resize(count);
  if (json) {
    std::printf("{\"caches\":[");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const rc_admin_cache& c = list[i];
      std::printf("%s{\"cache_id\":%llu,\"regions\":%u,\"connections\":%u,\"server_threads\":%u,\"exclusive\":%s,"
                  "\"lease_end_unix_ms\":%llu}",
                  i == 0 ? "" : ",", static_cast<unsigned long long>(c.cache_id), c.regions, c.connections,
                  c.server_threads, c.exclusive != 0 ? "true" : "false",
                  static_cast<unsigned long long>(c.lease_end_unix_ms));
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("%-20s  %7s  %11s  %3s  %9s  %s\n", "CACHE ID", "REGIONS", "CONNECTIONS", "S", "EXCLUSIVE", "LEASE END");
  for (const rc_admin_cache& c : list)
    std::printf("%-20llu  %7u  %11u  %3u  %9s  %s\n", static_cast<unsigned long long>(c.cache_id), c.regions,
                c.connections, c.server_threads, c.exclusive != 0 ? "yes" : "no",
                lease_text(c.lease_end_unix_ms).c_str());
  std::printf("%zu cache%s\n", list.size(), list.size() == 1 ? "" : "s");
  return 0;
}

int drop(rc_admin* admin, uint64_t cache_id, bool json) {
  uint32_t dropped = 0;
  if (const rc_status st = rc_admin_drop_cache(admin, cache_id, &dropped); st != RC_OK)
    return failed("dropping the cache", st);
  if (json) {
    std::printf("{\"cache_id\":%llu,\"dropped\":%u}\n", static_cast<unsigned long long>(cache_id), dropped);
  } else {
    std::printf("dropped %u cache%s with id %llu\n", dropped, dropped == 1 ? "" : "s",
                static_cast<unsigned long long>(cache_id));
  }
  return 0;
}

struct PullArgs {
  std::string source;
  std::string capability;
  uint64_t source_region = UINT64_MAX;
  uint64_t target_region = UINT64_MAX;
  uint64_t timeout_ms = 0;
  uint64_t max_mib_per_s = 0;
  uint64_t regions = 1;
};

int pull(rc_admin* admin, uint64_t cache_id, const PullArgs& args, bool json) {
  rc_pull_request request{};
  request.cache_id = cache_id;
  request.source_region = static_cast<uint32_t>(args.source_region);
  request.target_region = static_cast<uint32_t>(args.target_region);
  request.source_endpoint = args.source.c_str();
  request.source_capability = args.capability.c_str();
  request.timeout_ms = static_cast<uint32_t>(args.timeout_ms);
  request.max_mib_per_s = static_cast<uint32_t>(args.max_mib_per_s);
  request.regions = static_cast<uint32_t>(args.regions);
  rc_pull_result result{};
  if (const rc_status st = rc_admin_pull_region(admin, &request, &result); st != RC_OK)
    return failed("pulling the region", st);
  const auto ms = static_cast<unsigned long long>(result.elapsed_ns / 1'000'000);
  if (json) {
    std::printf("{\"cache_id\":%llu,\"source\":%s,\"source_region\":%u,\"target_region\":%u,\"regions\":%u,"
                "\"bytes\":%llu,\"elapsed_ns\":%llu,\"one_sided\":%s}\n",
                static_cast<unsigned long long>(cache_id), json_string(args.source).c_str(), request.source_region,
                request.target_region, request.regions, static_cast<unsigned long long>(result.bytes),
                static_cast<unsigned long long>(result.elapsed_ns), result.one_sided != 0 ? "true" : "false");
  } else {
    const auto range = [&](uint32_t first) {
      return request.regions == 1 ? "region " + std::to_string(first)
                                  : "regions " + std::to_string(first) + ".." + std::to_string(first + request.regions - 1);
    };
    std::printf("pulled %s of cache %llu from %s into %s: %llu bytes in %llu ms (%s)\n", range(request.source_region).c_str(),
                static_cast<unsigned long long>(cache_id), args.source.c_str(), range(request.target_region).c_str(),
                static_cast<unsigned long long>(result.bytes), ms,
                result.one_sided != 0 ? "one-sided reads" : "batched reads");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, key_path;
  uint64_t timeout_ms = RC_DEFAULT_ADMIN_TIMEOUT_MS;
  bool json = false;
  PullArgs pull_args;
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--connect" && has_value) {
      endpoint = argv[++i];
    } else if (arg == "--key" && has_value) {
      key_path = argv[++i];
    } else if (arg == "--timeout" && has_value) {
      if (!parse_u64(argv[++i], timeout_ms) || timeout_ms == 0 || timeout_ms > UINT32_MAX)
        return usage("bad --timeout (milliseconds, at least 1)");
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--source" && has_value) {
      pull_args.source = argv[++i];
    } else if (arg == "--capability" && has_value) {
      pull_args.capability = argv[++i];
    } else if ((arg == "--source-region" || arg == "--target-region") && has_value) {
      uint64_t& region = arg == "--source-region" ? pull_args.source_region : pull_args.target_region;
      if (!parse_u64(argv[++i], region) || region >= RC_MAX_REGIONS_PER_SERVER)
        return usage(("bad " + arg + " (0.." + std::to_string(RC_MAX_REGIONS_PER_SERVER - 1) + ")").c_str());
    } else if (arg == "--regions" && has_value) {
      if (!parse_u64(argv[++i], pull_args.regions) || pull_args.regions == 0 || pull_args.regions > RC_MAX_REGIONS_PER_SERVER)
        return usage(("bad --regions (1.." + std::to_string(RC_MAX_REGIONS_PER_SERVER) + ")").c_str());
    } else if (arg == "--pull-timeout" && has_value) {
      if (!parse_u64(argv[++i], pull_args.timeout_ms) || pull_args.timeout_ms == 0 || pull_args.timeout_ms > UINT32_MAX)
        return usage("bad --pull-timeout (milliseconds, at least 1)");
    } else if (arg == "--max-mib-per-s" && has_value) {
      if (!parse_u64(argv[++i], pull_args.max_mib_per_s) || pull_args.max_mib_per_s == 0 || pull_args.max_mib_per_s > UINT32_MAX)
        return usage("bad --max-mib-per-s (MiB per second, at least 1)");
    } else if (arg == "--help" || arg == "-h") {
      usage("help");
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      return usage(("unknown argument " + arg).c_str());
    } else {
      command.push_back(arg);
    }
  }
  if (endpoint.empty() || key_path.empty()) return usage("--connect and --key are required");
  uint64_t cache_id = 0;
  if (command.empty()) return usage("no command (stats, caches, drop CACHE_ID or pull CACHE_ID ...)");
  const bool pulling = command[0] == "pull";
  if (!pulling && (!pull_args.source.empty() || !pull_args.capability.empty() || pull_args.timeout_ms != 0 ||
                   pull_args.source_region != UINT64_MAX || pull_args.target_region != UINT64_MAX))
    return usage("--source, --capability, --source-region, --target-region and --pull-timeout are for pull");
  if (command[0] == "drop" || pulling) {
    if (command.size() != 2 || !parse_u64(command[1], cache_id))
      return usage((command[0] + " needs one CACHE_ID (a number)").c_str());
    if (pulling && (pull_args.source.empty() || pull_args.capability.empty() ||
                    pull_args.source_region == UINT64_MAX || pull_args.target_region == UINT64_MAX))
      return usage("pull needs --source, --capability, --source-region and --target-region");
  } else if ((command[0] != "stats" && command[0] != "caches") || command.size() != 1) {
    return usage(("unknown command '" + command[0] + "'").c_str());
  }
  std::string why;
  const std::vector<uint8_t> key = rc::tools::read_key_file(key_path, why);
  if (key.empty()) {
    std::fprintf(stderr, "remotecache-admin: %s\n", why.c_str());
    return 1;
  }
  rc_admin* admin = nullptr;
  if (const rc_status st =
          rc_admin_connect(endpoint.c_str(), key.data(), key.size(), static_cast<uint32_t>(timeout_ms), &admin);
      st != RC_OK)
    return failed(("connecting to " + endpoint).c_str(), st);
  const int rc = command[0] == "stats"    ? stats(admin, json)
                 : command[0] == "caches" ? caches(admin, json)
                 : pulling                ? pull(admin, cache_id, pull_args, json)
                                          : drop(admin, cache_id, json);
  rc_admin_close(admin);
  return rc;
}

// remotecache-server: lends memory regions to caches over the listed endpoints until SIGTERM.
//
//   remotecache-server [--listen ENDPOINT]... [--region-size BYTES] [--memory-limit BYTES]
//                      [--threads N] [--admission-key FILE] [--server-id ID] [--max-connections N]
//                      [--max-connections-per-peer N] [--shm-mode OCTAL] [--allow-uid UID]... [--verbose]
//
// Prints "listening <endpoint>" per endpoint (port 0 resolved), its server id, how it admits
// clients, what it lends, and then "ready", so that scripts and tests can wait for it; SIGUSR1
// prints how much memory is lent right now; --verbose logs every cache created and freed; prints
// "stopped" after a clean shutdown.
#include <remotecache/remotecache.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "key_file.h"
#include "size_arg.h"

namespace {

bool parse_size(const char* text, uint64_t& out) {
  const auto value = rc::tools::parse_size(text);
  if (value) out = *value;
  return value.has_value();
}

int usage(const char* why) {
  std::fprintf(stderr,
               "remotecache-server: %s\n"
               "usage: remotecache-server [--listen ENDPOINT]... [--region-size BYTES] [--memory-limit BYTES]\n"
               "                          [--threads N] [--admission-key FILE] [--server-id ID]\n"
               "                          [--max-connections N] [--max-connections-per-peer N]\n"
               "                          [--shm-mode OCTAL] [--allow-uid UID]... [--commit-memory] [--verbose]\n"
               "  ENDPOINT: tcp:HOST:PORT (port 0 picks one), shm:SOCKET_PATH or shm:@ABSTRACT_NAME,\n"
               "            verbs:HOST:PORT; default tcp:127.0.0.1:7300\n"
               "  BYTES accept K, M and G suffixes; defaults: region 1G, limit 4G; threads: hardware threads\n"
               "  --admission-key: admit only clients with a capability signed by this key (without it the\n"
               "            server is open: anyone who reaches it may rent its memory)\n"
               "  --server-id: the identity capabilities name (default: the first endpoint as bound)\n"
               "  --max-connections / --max-connections-per-peer: defaults %u / %u (peer: IP, or uid for shm)\n"
               "  --shm-mode: permissions of shm socket files (default 600: the server's user only)\n"
               "  --allow-uid: uids besides the server's own allowed on abstract shm endpoints\n"
               "  --commit-memory: keep spare memory committed ahead (low priority, within the limit, leaving an\n"
               "            eighth of the host's free) for new caches: fills run at the transport's rate\n",
               why, RC_DEFAULT_MAX_CONNECTIONS, RC_DEFAULT_MAX_CONNECTIONS_PER_PEER);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> listen;
  rc_server_options options{};
  std::string key_path, server_id;
  std::vector<uint32_t> uids;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--listen" && has_value) {
      listen.emplace_back(argv[++i]);
    } else if (arg == "--region-size" && has_value) {
      if (!parse_size(argv[++i], options.region_size)) return usage("bad --region-size");
    } else if (arg == "--memory-limit" && has_value) {
      if (!parse_size(argv[++i], options.memory_limit)) return usage("bad --memory-limit");
    } else if (arg == "--threads" && has_value) {
      uint64_t n = 0;
      if (!parse_size(argv[++i], n) || n > 1024) return usage("bad --threads");
      options.max_threads = static_cast<uint32_t>(n);
    } else if (arg == "--admission-key" && has_value) {
      key_path = argv[++i];
    } else if (arg == "--server-id" && has_value) {
      server_id = argv[++i];
    } else if (arg == "--max-connections" && has_value) {
      uint64_t n = 0;
      if (!parse_size(argv[++i], n) || n == 0 || n > 1'000'000) return usage("bad --max-connections");
      options.max_connections = static_cast<uint32_t>(n);
    } else if (arg == "--max-connections-per-peer" && has_value) {
      uint64_t n = 0;
      if (!parse_size(argv[++i], n) || n == 0 || n > 1'000'000) return usage("bad --max-connections-per-peer");
      options.max_connections_per_peer = static_cast<uint32_t>(n);
    } else if (arg == "--shm-mode" && has_value) {
      char* end = nullptr;
      const unsigned long mode = std::strtoul(argv[++i], &end, 8);
      if (end == nullptr || *end != '\0' || mode == 0 || mode > 0777) return usage("bad --shm-mode (octal, e.g. 660)");
      options.shm_socket_mode = static_cast<uint32_t>(mode);
    } else if (arg == "--allow-uid" && has_value) {
      uint64_t n = 0;
      if (!parse_size(argv[++i], n) || n > UINT32_MAX) return usage("bad --allow-uid");
      uids.push_back(static_cast<uint32_t>(n));
    } else if (arg == "--commit-memory") {
      options.commit_memory = 1;
    } else if (arg == "--verbose") {
      rc::set_log_level(rc::LogLevel::Info);
    } else if (arg == "--help" || arg == "-h") {
      usage("help");
      return 0;
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (listen.empty()) listen.emplace_back("tcp:127.0.0.1:7300");
  // The server always explains why it closes a connection, even when RC_LOG is not set.
  if (rc::log_level() > rc::LogLevel::Warn) rc::set_log_level(rc::LogLevel::Warn);

  // Block the stop signals before any thread starts, so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  std::vector<uint8_t> key;
  if (!key_path.empty()) {
    std::string why;
    key = rc::tools::read_key_file(key_path, why);
    if (key.empty()) {
      std::fprintf(stderr, "remotecache-server: %s\n", why.c_str());
      return 1;
    }
    options.admission_key = key.data();
    options.admission_key_length = key.size();
  }
  if (!server_id.empty()) options.server_id = server_id.c_str();
  options.allowed_uids = uids.data();
  options.allowed_uid_count = uids.size();

  std::vector<const char*> raw;
  for (const auto& l : listen) raw.push_back(l.c_str());
  options.listen = raw.data();
  options.listen_count = raw.size();
  rc_server* server = nullptr;
  if (rc_server_start(&options, &server) != RC_OK) {
    std::fprintf(stderr, "remotecache-server: %s\n", rc_last_error());
    return 1;
  }
  for (size_t i = 0; const char* ep = rc_server_endpoint(server, i); ++i) std::printf("listening %s\n", ep);
  std::printf("server id %s\n", rc_server_id(server));
  if (key.empty()) {
    std::printf("admission: open (no --admission-key): any client that reaches this server may rent its memory\n");
  } else {
    std::printf("admission: by capability (key from %s)\n", key_path.c_str());
  }
  const uint64_t region = options.region_size != 0 ? options.region_size : RC_DEFAULT_REGION_SIZE;
  const uint64_t limit = options.memory_limit != 0 ? options.memory_limit : RC_DEFAULT_MEMORY_LIMIT;
  std::printf("lending regions of %llu bytes, at most %llu bytes in all\n", static_cast<unsigned long long>(region),
              static_cast<unsigned long long>(limit));
  std::printf("ready\n");
  std::fflush(stdout);

  int signal = 0;
  while (sigwait(&stop_signals, &signal) == 0 && signal == SIGUSR1) {
    std::printf("lent %llu of %llu bytes\n", static_cast<unsigned long long>(rc_server_memory_in_use(server)),
                static_cast<unsigned long long>(limit));
    std::fflush(stdout);
  }
  rc_server_stop(server);
  std::printf("stopped\n");
  std::fflush(stdout);
  return 0;
}

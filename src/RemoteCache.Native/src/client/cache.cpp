#include "client/cache.h"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "common/backoff.h"
#include "common/capability.h"
#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"

namespace rc::client {
namespace {
constexpr uint64_t kSpinNs = 30'000;
constexpr uint64_t kYieldNs = 100'000;
constexpr std::size_t kInboxOps = 4096;
// A token the caller did not give: 32 random bytes as text, so the cache is this client's alone.
constexpr std::size_t kRandomTokenBytes = 32;
}  // namespace

// ---- Worker -----------------------------------------------------------------------------------

Worker::Worker(Cache& cache, std::vector<std::unique_ptr<Channel>> channels)
    : cache_(cache), channels_(std::move(channels)), inbox_(kInboxOps), thread_([this] { run(); }) {}

Worker::~Worker() {
  stop_.store(true);
  wake_.signal();
  thread_.join();
}

void Worker::push(const Op& op) {
  while (!inbox_.try_push(op)) sched_yield();  // the client thread is draining it
  wake_if_sleeping(sleeping_, wake_);
}

bool Worker::step(const Knobs& k) {
  std::size_t n = 0;
  Op op{};
  while (n < 256 && inbox_.try_pop(op)) {
    channels_[op.server]->submit(op, k);
    ++n;
  }
  // Nothing else is coming: partly filled batches go out as soon as a slot is free.
  if (inbox_.empty_hint())
    for (auto& ch : channels_) ch->flush(k);
  for (auto& ch : channels_) n += ch->progress(k);
  return n > 0;
}

void Worker::run() {
  Backoff backoff(kSpinNs, kYieldNs);
  for (;;) {
    const Knobs k = cache_.knobs();
    if (step(k)) {
      backoff.worked();
      continue;
    }
    if (stop_.load(std::memory_order_acquire)) {
      bool idle = inbox_.empty_hint();
      for (auto& ch : channels_) idle = idle && (ch->idle() || ch->broken() != RC_OK);
      if (idle) return;
    }
    if (backoff.idle()) {
      sleep(k);
      backoff.worked();
    }
  }
}

void Worker::sleep(const Knobs& k) {
  sleeping_.store(1, std::memory_order_seq_cst);
  for (auto& ch : channels_) ch->link().arm_wait();
  bool busy = !inbox_.empty_hint() || step(k) || stop_.load();
  bool in_flight = false;
  for (auto& ch : channels_) in_flight = in_flight || !ch->idle();
  if (!busy) {
    std::vector<int> raw{wake_.fd()};
    // A broken connection's fds stay readable (end of stream): waiting on them would spin.
    for (auto& ch : channels_)
      if (ch->broken() == RC_OK) ch->link().wait_fds(raw);
    std::vector<pollfd> fds;
    for (int fd : raw) fds.push_back(pollfd{fd, POLLIN, 0});
    // While work is in flight wake up regularly so that deadlines and liveness are checked.
    ::poll(fds.data(), fds.size(), in_flight ? 1 : 100);
  }
  sleeping_.store(0, std::memory_order_relaxed);
  wake_.drain();
  for (auto& ch : channels_) ch->link().disarm_wait();
}

// ---- Cache ------------------------------------------------------------------------------------

Status Cache::validate(const rc_config& c) {
  const auto range = [](const char* what, uint32_t lo, uint32_t hi) {
    return fail(RC_E_INVALID_ARGUMENT, std::string(what) + " must be " + std::to_string(lo) + ".." + std::to_string(hi));
  };
  if (c.client_threads > RC_MAX_CLIENT_THREADS) return range("client_threads", 0, RC_MAX_CLIENT_THREADS);
  if (c.server_threads > RC_MAX_SERVER_THREADS) return range("server_threads", 0, RC_MAX_SERVER_THREADS);
  if (c.batch_size < 1 || c.batch_size > RC_MAX_BATCH_SIZE) return range("batch_size", 1, RC_MAX_BATCH_SIZE);
  if (c.queue_depth < 1 || c.queue_depth > RC_MAX_QUEUE_DEPTH) return range("queue_depth", 1, RC_MAX_QUEUE_DEPTH);
  return RC_OK;
}

std::unique_ptr<Cache> Cache::open(const std::vector<std::string>& endpoints, const rc_cache_options& options,
                                   Status& status) {
  status = validate(options.config);
  if (status != RC_OK) return nullptr;
  if (endpoints.empty() || endpoints.size() > RC_MAX_ENDPOINTS) {
    status = fail(RC_E_INVALID_ARGUMENT, "a cache needs 1.." + std::to_string(RC_MAX_ENDPOINTS) + " endpoints");
    return nullptr;
  }
  if (options.regions_per_server == 0 || options.regions_per_server > RC_MAX_REGIONS_PER_SERVER) {
    status = fail(RC_E_INVALID_ARGUMENT, "regions_per_server must be 1.." + std::to_string(RC_MAX_REGIONS_PER_SERVER));
    return nullptr;
  }
  if (options.session_capacity > RC_MAX_SESSION_CAPACITY) {
    status = fail(RC_E_INVALID_ARGUMENT, "session_capacity must be 0 (the default) or 1.." +
                                             std::to_string(RC_MAX_SESSION_CAPACITY));
    return nullptr;
  }
  if ((options.flags & ~RC_OPEN_EXCLUSIVE) != 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "unknown bits in rc_cache_options.flags");
    return nullptr;
  }
  std::unique_ptr<Cache> cache(new Cache());
  cache->options_ = options;
  cache->token_ = options.token != nullptr ? options.token : "";
  if (cache->token_.size() > wire::kTokenMax) {
    status = fail(RC_E_INVALID_ARGUMENT, "token longer than " + std::to_string(wire::kTokenMax) + " bytes");
    return nullptr;
  }
  if (cache->token_.empty()) {
    std::array<uint8_t, kRandomTokenBytes> random{};
    crypto::random_bytes(random);
    cache->token_ = crypto::base64url_encode(random);
  }
  crypto::random_bytes(cache->client_id_);
  cache->options_.token = nullptr;
  cache->options_.capabilities = nullptr;
  if (cache->options_.op_timeout_ms == 0) cache->options_.op_timeout_ms = RC_DEFAULT_OP_TIMEOUT_MS;
  if (cache->options_.connect_timeout_ms == 0) cache->options_.connect_timeout_ms = RC_DEFAULT_CONNECT_TIMEOUT_MS;
  cache->timeout_ns_ = uint64_t{cache->options_.op_timeout_ms} * 1'000'000;
  for (const auto& text : endpoints) {
    auto ep = parse_endpoint(text);
    if (!ep) {
      status = RC_E_INVALID_ARGUMENT;
      return nullptr;
    }
    cache->endpoints_.push_back(*ep);
  }
  if (options.capabilities != nullptr) {
    status = parse_capabilities(cache->endpoints_, options.capabilities, cache->capabilities_);
    if (status != RC_OK) return nullptr;
  }
  const rc_config& c = options.config;
  cache->c_ = c.client_threads;
  cache->s_ = c.server_threads;
  cache->b_ = c.batch_size;
  cache->q_ = c.queue_depth;

  // The control connections create the cache on each server and keep it alive while data
  // connections come and go with reconfigurations.
  status = cache->connect_links(c.server_threads, cache->control_);
  if (status != RC_OK) return nullptr;
  cache->control_seq_.assign(cache->control_.size(), 0);
  cache->joined_.assign(cache->control_.size(), 0);
  status = cache->check_grants(cache->control_, 0);
  if (status != RC_OK) return nullptr;
  cache->publish_layout();
  if (c.client_threads > 0) {
    status = cache->make_workers(c.client_threads, cache->workers_);
    if (status != RC_OK) return nullptr;
  }
  status = RC_OK;
  return cache;
}

Cache::~Cache() {
  workers_.reset();
  control_.clear();
}

rc_config Cache::config() const {
  return rc_config{c_.load(), s_.load(), b_.load(), q_.load()};
}

Knobs Cache::knobs() const {
  Knobs k;
  k.batch = b_.load(std::memory_order_relaxed);
  k.depth = q_.load(std::memory_order_relaxed);
  k.prefer_one_sided = s_.load(std::memory_order_relaxed) == 0 || k.batch == 1;
  k.timeout_ns = timeout_ns_;
  return k;
}

std::size_t Cache::server_count() const {
  std::lock_guard lock(mutex_);
  return endpoints_.size();
}

Status Cache::connect_all(uint32_t server_threads, std::vector<std::unique_ptr<Channel>>& out, std::size_t first,
                          std::size_t end) {
  std::vector<std::unique_ptr<transport::ClientConnection>> links;
  if (const Status st = connect_links(server_threads, links, first, end); st != RC_OK) return st;
  for (auto& link : links) out.push_back(std::make_unique<Channel>(std::move(link)));
  return RC_OK;
}

Status Cache::check_grants(const std::vector<std::unique_ptr<transport::ClientConnection>>& links,
                           std::size_t first) const {
  for (std::size_t i = 0; i < links.size(); ++i) {
    const auto& reply = links[i]->reply();
    if (reply.region_count != options_.regions_per_server)
      return fail(RC_E_PROTOCOL, endpoints_[first + i].to_string() + " granted " + std::to_string(reply.region_count) +
                                     " regions where " + std::to_string(options_.regions_per_server) + " were asked for");
  }
  return RC_OK;
}

void Cache::publish_layout() {
  auto table = std::make_shared<RegionTable>();
  for (std::size_t i = 0; i < control_.size(); ++i) {
    const auto& reply = control_[i]->reply();
    table->add_server(static_cast<uint16_t>(i), reply.region_count, reply.region_size);
  }
  capacity_.store(table->capacity(), std::memory_order_release);
  table_ = std::move(table);
}

Status Cache::connect_links(uint32_t server_threads, std::vector<std::unique_ptr<transport::ClientConnection>>& out,
                            std::size_t first, std::size_t end) {
  transport::ConnectParams params;
  params.timeout_ms = options_.connect_timeout_ms;
  params.request.cache_id = options_.cache_id;
  params.request.regions = options_.regions_per_server;
  params.request.server_threads = server_threads;
  params.request.token_length = static_cast<uint32_t>(token_.size());
  params.request.flags = (options_.flags & RC_OPEN_EXCLUSIVE) != 0 ? wire::kConnectExclusive : 0;
  std::memcpy(params.request.client_id, client_id_.data(), client_id_.size());
  std::memcpy(params.request.token, token_.data(), token_.size());
  for (std::size_t i = first; i < std::min(end, endpoints_.size()); ++i) {
    const Endpoint& ep = endpoints_[i];
    params.request.capability_length = capabilities_.empty() ? 0 : sizeof(wire::Capability);
    params.request.capability = capabilities_.empty() ? wire::Capability{} : capabilities_[i];
    Status st = RC_OK;
    auto link = transport::connect(ep, params, st);
    if (!link) return st;
    out.push_back(std::move(link));
  }
  return RC_OK;
}

Status Cache::parse_capabilities(const std::vector<Endpoint>& endpoints, const char* const* texts,
                                 std::vector<wire::Capability>& out) {
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    auto cap = texts[i] != nullptr ? capability::from_text(texts[i]) : std::nullopt;
    if (!cap)
      return fail(RC_E_INVALID_ARGUMENT, "capabilities[" + std::to_string(i) + "] (for " + endpoints[i].to_string() +
                                             ") is not a capability's text form");
    out.push_back(*cap);
  }
  return RC_OK;
}

Status Cache::renew(const char* const* capabilities) {
  std::lock_guard lock(mutex_);
  std::vector<wire::Capability> parsed;
  if (const Status st = parse_capabilities(endpoints_, capabilities, parsed); st != RC_OK) return st;
  capabilities_.swap(parsed);
  std::vector<std::unique_ptr<transport::ClientConnection>> fresh;
  if (const Status st = connect_links(s_.load(), fresh); st != RC_OK) {
    capabilities_.swap(parsed);  // later connections keep presenting the ones that worked
    return st;
  }
  // The new control connections join the caches (same client, so exclusivity holds) before the old
  // ones close with `fresh`: the caches never lose their last connection.
  control_.swap(fresh);
  control_seq_.assign(control_.size(), 0);
  return RC_OK;
}

Status Cache::grow(const std::vector<std::string>& texts, const char* const* capabilities) {
  std::lock_guard lock(mutex_);
  const std::size_t first = endpoints_.size();
  if (texts.empty()) return fail(RC_E_INVALID_ARGUMENT, "growing a cache takes at least one endpoint");
  if (first + texts.size() > RC_MAX_ENDPOINTS)
    return fail(RC_E_INVALID_ARGUMENT, "a cache has at most " + std::to_string(RC_MAX_ENDPOINTS) + " servers; it has " +
                                           std::to_string(first) + " and " + std::to_string(texts.size()) +
                                           " more were given");
  if (capabilities_.empty() != (capabilities == nullptr))
    return fail(RC_E_INVALID_ARGUMENT, capabilities_.empty()
                                           ? "this cache was opened without capabilities, so its new servers take none"
                                           : "this cache was opened with capabilities: give one for each new server");
  std::vector<Endpoint> added;
  for (const auto& text : texts) {
    auto ep = parse_endpoint(text);
    if (!ep) return RC_E_INVALID_ARGUMENT;
    added.push_back(*ep);
  }
  std::vector<wire::Capability> caps;
  if (capabilities != nullptr) {
    if (const Status st = parse_capabilities(added, capabilities, caps); st != RC_OK) return st;
  }
  // Tentatively appended so that connections (and new client threads) reach the new servers; taken
  // back if anything fails, which closes the new connections and so frees what the servers set aside.
  endpoints_.insert(endpoints_.end(), added.begin(), added.end());
  capabilities_.insert(capabilities_.end(), caps.begin(), caps.end());
  const auto undo = [&](Status st) {
    endpoints_.resize(first);
    if (!capabilities_.empty()) capabilities_.resize(first);
    return st;
  };
  std::vector<std::unique_ptr<transport::ClientConnection>> fresh;
  if (const Status st = connect_links(s_.load(), fresh, first); st != RC_OK) return undo(st);
  if (const Status st = check_grants(fresh, first); st != RC_OK) return undo(st);
  std::shared_ptr<WorkerSet> workers;
  if (c_.load() > 0) {
    if (const Status st = make_workers(c_.load(), workers); st != RC_OK) return undo(st);
  }
  for (auto& link : fresh) control_.push_back(std::move(link));
  control_seq_.resize(control_.size(), 0);
  publish_layout();
  if (workers) workers_ = std::move(workers);
  const uint64_t epoch = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
  joined_.resize(control_.size(), epoch);
  return RC_OK;
}

Status Cache::shrink(std::size_t servers) {
  std::lock_guard lock(mutex_);
  if (servers == 0 || servers > endpoints_.size())
    return fail(RC_E_INVALID_ARGUMENT, "a cache of " + std::to_string(endpoints_.size()) + " servers can keep 1.." +
                                           std::to_string(endpoints_.size()) + " of them, not " +
                                           std::to_string(servers));
  if (servers == endpoints_.size()) return RC_OK;
  std::shared_ptr<WorkerSet> workers;  // for the servers kept, made before anything changes
  if (c_.load() > 0) {
    if (const Status st = make_workers(c_.load(), workers, servers); st != RC_OK) return st;
  }
  endpoints_.resize(servers);
  if (!capabilities_.empty()) capabilities_.resize(servers);
  control_.resize(servers);  // the dropped servers free their share once the sessions have moved on
  control_seq_.resize(servers);
  joined_.resize(servers);
  publish_layout();
  if (workers) workers_ = std::move(workers);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  return RC_OK;
}

Status Cache::make_workers(uint32_t count, std::shared_ptr<WorkerSet>& out, std::size_t servers) {
  // New data connections are made before the old ones close, so the server keeps the regions.
  auto set = std::make_shared<WorkerSet>();
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<std::unique_ptr<Channel>> channels;
    const Status st = connect_all(s_.load(), channels, 0, servers);
    if (st != RC_OK) return st;
    set->workers.push_back(std::make_unique<Worker>(*this, std::move(channels)));
  }
  out = std::move(set);
  return RC_OK;
}

// Tells every server the new s through a one-entry control batch on the control connection.
Status Cache::set_server_threads(uint32_t s) {
  for (std::size_t i = 0; i < control_.size(); ++i) {
    transport::ClientConnection& link = *control_[i];
    const uint64_t seq = ++control_seq_[i];
    std::byte buffer[sizeof(wire::FrameHeader) + sizeof(wire::RequestEntry)];
    wire::BatchWriter writer(buffer);
    writer.add(wire::Op::SetServerThreads, 0, s, 0, nullptr);
    const auto frame = writer.finish(seq);
    const uint64_t deadline = now_ns() + timeout_ns_;
    Status st = RC_E_BUSY;
    while ((st = link.send_frame(frame)) == RC_E_BUSY && now_ns() < deadline) cpu_relax();
    if (st != RC_OK) return fail(st == RC_E_BUSY ? RC_E_TIMEOUT : st, "cannot reach a server to change s");
    std::span<const std::byte> response;
    while ((st = link.poll_response(response)) == RC_E_BUSY && now_ns() < deadline) cpu_relax();
    if (st != RC_OK) return fail(st == RC_E_BUSY ? RC_E_TIMEOUT : st, "no answer from a server to the new s");
    const auto h = wire::read_header(response.data());
    const bool ok = wire::header_ok(h, wire::Kind::Response, response.size()) && h.seq == seq &&
                    (h.flags & wire::kFlagAllOk) != 0;
    link.release_response();
    if (!ok) return fail(RC_E_PROTOCOL, "a server answered the new s with an error");
  }
  return RC_OK;
}

Status Cache::reconfigure(const rc_config& config) {
  if (const Status st = validate(config); st != RC_OK) return st;
  std::lock_guard lock(mutex_);
  if (config.server_threads != s_.load()) {
    if (const Status st = set_server_threads(config.server_threads); st != RC_OK) return st;
  }
  s_ = config.server_threads;  // before make_workers: new connections announce the new s
  if (config.client_threads != c_.load()) {
    std::shared_ptr<WorkerSet> fresh;
    if (config.client_threads > 0) {
      if (const Status st = make_workers(config.client_threads, fresh); st != RC_OK) return st;
    }
    workers_ = std::move(fresh);
    c_ = config.client_threads;
    epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  b_ = config.batch_size;
  q_ = config.queue_depth;
  return RC_OK;
}

Status Cache::bind(uint64_t& epoch, std::shared_ptr<const RegionTable>& table,
                   std::vector<std::unique_ptr<Channel>>& channels, std::shared_ptr<WorkerSet>& workers,
                   Worker*& worker) {
  std::lock_guard lock(mutex_);
  const uint64_t bound = epoch;  // the epoch the session's channels were made under (0: none)
  epoch = epoch_.load();
  table = table_;
  if (c_.load() == 0) {
    std::size_t keep = std::min(channels.size(), endpoints_.size());
    for (std::size_t i = 0; i < keep; ++i) {
      if (joined_[i] > bound) keep = i;
    }
    channels.resize(keep);
    const Status st = connect_all(s_.load(), channels, channels.size());
    if (st != RC_OK) {
      // Bound to nothing: the next submission tries again instead of using a partial set.
      epoch = 0;
      table.reset();
      channels.clear();
    }
    return st;
  }
  channels.clear();  // a session coming from c = 0 hands its servers to the client threads
  workers = workers_;
  const uint32_t n = workers->next.fetch_add(1);
  worker = workers->workers[n % workers->workers.size()].get();
  return RC_OK;
}

}  // namespace rc::client

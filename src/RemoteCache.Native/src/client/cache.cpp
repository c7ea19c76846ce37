#include "client/cache.h"

#include <openssl/crypto.h>

#include "client/session.h"

#include <linux/membarrier.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

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
constexpr uint64_t kQuiescencePollNs = 50'000;  // between checks of the sessions while a migration begins

// A full memory barrier on every thread of this process (Linux membarrier), so that sessions mark their
// submissions with plain stores and the rare migration pays for the ordering instead.
bool barrier_all_threads() {
  static const bool registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return registered && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}
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
  const bool drained = inbox_.empty_hint();
  for (auto& ch : channels_) {
    if (!ch) continue;  // a holder let go
    if (drained) ch->flush(k);
    n += ch->progress(k);
  }
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
      for (auto& ch : channels_) idle = idle && (!ch || ch->idle() || ch->broken() != RC_OK);
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
  for (auto& ch : channels_)
    if (ch) ch->link().arm_wait();
  bool busy = !inbox_.empty_hint() || step(k) || stop_.load();
  bool in_flight = false;
  for (auto& ch : channels_) in_flight = in_flight || (ch && !ch->idle());
  if (!busy) {
    std::vector<int> raw{wake_.fd()};
    // A broken connection's fds stay readable (end of stream): waiting on them would spin.
    for (auto& ch : channels_)
      if (ch && ch->broken() == RC_OK) ch->link().wait_fds(raw);
    std::vector<pollfd> fds;
    for (int fd : raw) fds.push_back(pollfd{fd, POLLIN, 0});
    // While work is in flight wake up regularly so that deadlines and liveness are checked.
    ::poll(fds.data(), fds.size(), in_flight ? 1 : 100);
  }
  sleeping_.store(0, std::memory_order_relaxed);
  wake_.drain();
  for (auto& ch : channels_)
    if (ch) ch->link().disarm_wait();
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
  if (options.reserved != 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "rc_cache_options.reserved must be 0");
    return nullptr;
  }
  const uint32_t seal_block = options.seal_block_size == 0 ? RC_DEFAULT_SEAL_BLOCK : options.seal_block_size;
  if (options.seal_key == nullptr && options.seal_block_size != 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "seal_block_size is set but seal_key is not: a plain cache has no blocks");
    return nullptr;
  }
  if (options.seal_key != nullptr && !seal::Layout::valid_block(seal_block)) {
    status = fail(RC_E_INVALID_ARGUMENT, "seal_block_size must be a power of two in [" + std::to_string(RC_MIN_SEAL_BLOCK) +
                                             ", " + std::to_string(RC_MAX_SEAL_BLOCK) + "], not " +
                                             std::to_string(options.seal_block_size));
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
  cache->options_.seal_key = nullptr;
  if (options.seal_key != nullptr) {
    cache->sealing_ = std::make_unique<Sealing>();
    cache->sealing_->layout = seal::Layout{seal_block};
    std::memcpy(cache->sealing_->key.data(), options.seal_key, seal::kKeyBytes);
  }
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
  cache->asked_.assign(cache->endpoints_.size(), options.regions_per_server);
  cache->awaiting_.assign(cache->endpoints_.size(), false);
  cache->shares_ = cache->endpoints_.size();
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
  cache->place_regions(0);
  cache->publish_layout();
  if (cache->sealing_ && (options.flags & RC_OPEN_EXCLUSIVE) != 0)
    cache->sealing_->pins = std::make_unique<seal::PinTable>(cache->client_capacity() / seal_block);
  if (c.client_threads > 0) {
    status = cache->make_workers(c.client_threads, cache->workers_);
    if (status != RC_OK) return nullptr;
  }
  if (cache->sealing_) {
    status = cache->check_key();
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
  return shares_;
}

Status Cache::connect_all(uint32_t server_threads, std::vector<std::unique_ptr<Channel>>& out, bool lost_ok, std::size_t first,
                          std::size_t end) {
  // Data channels go to the holders that hold a region (not to a migration's target before its commit).
  for (std::size_t i = first; i < std::min(end, endpoints_.size()); ++i) {
    if (i < in_use_.size() && !in_use_[i]) {
      out.push_back(nullptr);
      continue;
    }
    std::vector<std::unique_ptr<transport::ClientConnection>> link;
    const Status st = connect_links(server_threads, link, i, i + 1);
    if (st != RC_OK && !lost_ok) return st;
    // A holder that cannot be reached now (a failed server not replaced yet) fails its own regions' operations,
    // not the whole data path.
    out.push_back(st != RC_OK ? Channel::unreachable(RC_E_DISCONNECTED)
                  : link.front() ? std::make_unique<Channel>(std::move(link.front())) : nullptr);
  }
  return RC_OK;
}

Status Cache::check_grants(const std::vector<std::unique_ptr<transport::ClientConnection>>& links,
                           std::size_t first) const {
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (!links[i]) continue;
    const auto& reply = links[i]->reply();
    if (reply.region_count != asked_[first + i])
      return fail(RC_E_PROTOCOL, endpoints_[first + i].to_string() + " granted " + std::to_string(reply.region_count) +
                                     " regions where " + std::to_string(asked_[first + i]) + " were asked for");
  }
  return RC_OK;
}

void Cache::place_regions(std::size_t first) {
  for (std::size_t i = first; i < control_.size(); ++i) {
    const auto& reply = control_[i]->reply();
    for (uint32_t r = 0; r < reply.region_count; ++r)
      layout_.push_back(Placement{static_cast<uint16_t>(i), static_cast<uint16_t>(r), reply.region_size, false, false});
  }
}

void Cache::publish_layout() {
  auto table = std::make_shared<RegionTable>();
  in_use_.assign(endpoints_.size(), false);
  for (const Placement& p : layout_) {
    table->add_region(p.holder, p.region, p.size, p.moving, p.reads_wait);
    in_use_[p.holder] = true;
  }
  capacity_.store(table->capacity(), std::memory_order_release);
  table_ = std::move(table);
}

Status Cache::connect_links(uint32_t server_threads, std::vector<std::unique_ptr<transport::ClientConnection>>& out,
                            std::size_t first, std::size_t end) {
  transport::ConnectParams params;
  params.timeout_ms = options_.connect_timeout_ms;
  params.request.cache_id = options_.cache_id;
  params.request.server_threads = server_threads;
  params.request.token_length = static_cast<uint32_t>(token_.size());
  params.request.flags = (options_.flags & RC_OPEN_EXCLUSIVE) != 0 ? wire::kConnectExclusive : 0;
  std::memcpy(params.request.client_id, client_id_.data(), client_id_.size());
  std::memcpy(params.request.token, token_.data(), token_.size());
  for (std::size_t i = first; i < std::min(end, endpoints_.size()); ++i) {
    if (i < control_.size() && retired(i)) {
      out.push_back(nullptr);
      continue;
    }
    const Endpoint& ep = endpoints_[i];
    params.request.regions = asked_[i];
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
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    // A holder let go needs none (it keeps its old one, never presented again).
    if (retired(i) && capabilities[i] == nullptr && !capabilities_.empty()) {
      parsed.push_back(capabilities_[i]);
      continue;
    }
    std::vector<wire::Capability> one;
    if (const Status st = parse_capabilities({endpoints_[i]}, capabilities + i, one); st != RC_OK) return st;
    parsed.push_back(one.front());
  }
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
  asked_.resize(endpoints_.size(), options_.regions_per_server);
  const auto undo = [&](Status st) {
    endpoints_.resize(first);
    asked_.resize(first);
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
  awaiting_.resize(control_.size(), false);
  place_regions(first);
  shares_ += added.size();
  publish_layout();
  if (workers) workers_ = std::move(workers);
  const uint64_t epoch = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
  joined_.resize(control_.size(), epoch);
  return RC_OK;
}

Status Cache::shrink(std::size_t servers) {
  std::lock_guard lock(mutex_);
  if (servers == 0 || servers > shares_)
    return fail(RC_E_INVALID_ARGUMENT, "a cache of " + std::to_string(shares_) + " servers can keep 1.." +
                                           std::to_string(shares_) + " of them, not " + std::to_string(servers));
  if (servers == shares_) return RC_OK;
  const std::size_t kept = servers * options_.regions_per_server;
  for (std::size_t r = kept; r < layout_.size(); ++r)
    if (layout_[r].moving)
      return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(r) + " is moving: commit or abort its migration "
                                         "before shrinking the cache past it");
  layout_.resize(kept);
  shares_ = servers;
  // The servers left without a region free their share once the sessions have moved on.
  return relayout();
}

Status Cache::relayout() {
  const std::vector<bool> was_in_use = in_use_;
  std::vector<bool> used(endpoints_.size(), false);
  for (const Placement& p : layout_) used[p.holder] = true;
  for (std::size_t i = 0; i < endpoints_.size(); ++i)
    if (!used[i] && !awaiting_[i] && !retired(i)) control_[i].reset();
  // Trailing ones go altogether, so that a cache shrunk and grown back has the holders it started with.
  while (!control_.empty() && retired(control_.size() - 1)) {
    endpoints_.pop_back();
    if (!capabilities_.empty()) capabilities_.pop_back();
    control_.pop_back();
    control_seq_.pop_back();
    joined_.pop_back();
    asked_.pop_back();
    awaiting_.pop_back();
  }
  publish_layout();
  Status st = RC_OK;
  if (c_.load() > 0 && in_use_ != was_in_use) {
    std::shared_ptr<WorkerSet> workers;
    st = make_workers(c_.load(), workers, /*lost_ok=*/true);
    if (st == RC_OK) workers_ = std::move(workers);
  }
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  return st;
}

Status Cache::make_workers(uint32_t count, std::shared_ptr<WorkerSet>& out, bool lost_ok) {
  // New data connections are made before the old ones close, so the server keeps the regions.
  auto set = std::make_shared<WorkerSet>();
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<std::unique_ptr<Channel>> channels;
    const Status st = connect_all(s_.load(), channels, lost_ok);
    if (st != RC_OK) return st;
    set->workers.push_back(std::make_unique<Worker>(*this, std::move(channels)));
  }
  out = std::move(set);
  return RC_OK;
}

// Tells every server the new s through a one-entry control batch on the control connection.
Status Cache::set_server_threads(uint32_t s) {
  for (std::size_t i = 0; i < control_.size(); ++i) {
    if (retired(i)) continue;
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
    // Channels to holders the session already used are kept; a holder index let go and filled again since
    // the session bound belongs to another server now.
    std::vector<std::unique_ptr<Channel>> kept(endpoints_.size());
    Status st = RC_OK;
    for (std::size_t i = 0; i < endpoints_.size() && st == RC_OK; ++i) {
      if (retired(i) || !in_use_[i]) continue;
      if (i < channels.size() && channels[i] && joined_[i] <= bound) {
        kept[i] = std::move(channels[i]);
        continue;
      }
      std::vector<std::unique_ptr<Channel>> one;
      // A session binding again keeps working on the holders it can reach; a new one must reach them all.
      st = connect_all(s_.load(), one, bound != 0, i, i + 1);
      if (st == RC_OK) kept[i] = std::move(one.front());
    }
    channels = std::move(kept);
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

// ---- migration ----------------------------------------------------------------------------------

std::size_t Cache::holder_count() const {
  std::lock_guard lock(mutex_);
  return endpoints_.size();
}

Status Cache::holder_endpoint(std::size_t holder, std::string& out) const {
  std::lock_guard lock(mutex_);
  if (holder >= endpoints_.size())
    return fail(RC_E_INVALID_ARGUMENT, "holder " + std::to_string(holder) + ": the cache has " +
                                           std::to_string(endpoints_.size()));
  out = endpoints_[holder].to_string();
  return RC_OK;
}

Status Cache::holder_status(std::size_t holder) {
  std::lock_guard lock(mutex_);
  if (holder >= endpoints_.size())
    return fail(RC_E_INVALID_ARGUMENT, "holder " + std::to_string(holder) + ": the cache has " +
                                           std::to_string(endpoints_.size()));
  if (retired(holder)) return fail(RC_E_CLOSED, "holder " + std::to_string(holder) + " was let go");
  return control_[holder]->check_idle();
}

std::size_t Cache::region_count() const {
  std::lock_guard lock(mutex_);
  return layout_.size();
}

Status Cache::region_placement(std::size_t region, Placement& out) const {
  std::lock_guard lock(mutex_);
  if (region >= layout_.size())
    return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(region) + ": the cache has " +
                                           std::to_string(layout_.size()) + " regions");
  out = layout_[region];
  return RC_OK;
}

Status Cache::add_holder(const std::string& text, const char* capability, uint32_t regions, std::size_t& holder) {
  std::lock_guard lock(mutex_);
  if (endpoints_.size() >= RC_MAX_ENDPOINTS)
    return fail(RC_E_INVALID_ARGUMENT, "a cache has at most " + std::to_string(RC_MAX_ENDPOINTS) + " servers");
  if (regions == 0 || regions > RC_MAX_REGIONS_PER_SERVER)
    return fail(RC_E_INVALID_ARGUMENT, "a server lends 1.." + std::to_string(RC_MAX_REGIONS_PER_SERVER) +
                                           " regions, not " + std::to_string(regions));
  if (capabilities_.empty() != (capability == nullptr))
    return fail(RC_E_INVALID_ARGUMENT, capabilities_.empty()
                                           ? "this cache was opened without capabilities, so its new servers take none"
                                           : "this cache was opened with capabilities: give one for the new server");
  auto ep = parse_endpoint(text);
  if (!ep) return RC_E_INVALID_ARGUMENT;
  std::vector<wire::Capability> caps;
  if (capability != nullptr) {
    if (const Status st = parse_capabilities({*ep}, &capability, caps); st != RC_OK) return st;
  }
  const std::size_t index = endpoints_.size();
  endpoints_.push_back(*ep);
  asked_.push_back(regions);
  if (!caps.empty()) capabilities_.push_back(caps.front());
  std::vector<std::unique_ptr<transport::ClientConnection>> fresh;
  Status st = connect_links(s_.load(), fresh, index, index + 1);
  if (st == RC_OK) st = check_grants(fresh, index);
  if (st != RC_OK) {
    endpoints_.pop_back();
    asked_.pop_back();
    if (!caps.empty()) capabilities_.pop_back();
    return st;
  }
  control_.push_back(std::move(fresh.front()));
  control_seq_.push_back(0);
  // A session bound before has no channel to it; one bound from now on connects at once.
  joined_.push_back(epoch_.load());
  awaiting_.push_back(true);
  in_use_.push_back(false);  // data channels reach it once a commit places a region on it
  holder = index;
  return RC_OK;
}

void Cache::stop_moving(std::size_t region) {
  layout_[region].moving = false;
  layout_[region].reads_wait = false;
  relayout();  // nothing is let go: the region stays where it was
}

Status Cache::migration_begin(std::size_t first, std::size_t count, uint32_t flags, uint32_t timeout_ms) {
  if ((flags & ~RC_MIGRATION_PAUSE_READS) != 0) return fail(RC_E_INVALID_ARGUMENT, "unknown bits in the migration flags");
  if (count == 0) return fail(RC_E_INVALID_ARGUMENT, "a migration begins on 1 region or more, not 0");
  const std::string which = count == 1 ? "region " + std::to_string(first)
                                       : "regions " + std::to_string(first) + "..+" + std::to_string(count);
  uint64_t epoch = 0;
  {
    std::lock_guard lock(mutex_);
    if (first >= layout_.size() || count > layout_.size() - first)
      return fail(RC_E_INVALID_ARGUMENT, which + ": the cache has " + std::to_string(layout_.size()) + " regions");
    for (std::size_t r = first; r < first + count; ++r)
      if (layout_[r].moving) return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(r) + " is already moving");
    for (std::size_t r = first; r < first + count; ++r) {
      layout_[r].moving = true;
      layout_[r].reads_wait = (flags & RC_MIGRATION_PAUSE_READS) != 0;
    }
    publish_layout();
    epoch = epoch_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  const auto give_up = [&](Status st, const std::string& why) {
    std::lock_guard lock(mutex_);
    for (std::size_t r = first; r < first + count; ++r) stop_moving(r);
    return fail(st, which + ": " + why);
  };
  if (!barrier_all_threads()) return give_up(RC_E_UNSUPPORTED, "this kernel has no private expedited membarrier");
  const uint64_t wait_ns = uint64_t{timeout_ms == 0 ? options_.op_timeout_ms : timeout_ms} * 1'000'000;
  const uint64_t deadline = now_ns() + wait_ns;
  for (;;) {
    std::size_t busy = 0;
    {
      std::lock_guard lock(sessions_mutex_);
      for (const Session* s : sessions_) busy += s->quiescent_since(epoch) ? 0 : 1;
    }
    if (busy == 0) return RC_OK;
    if (now_ns() >= deadline)
      return give_up(RC_E_TIMEOUT, std::to_string(busy) + " session(s) still have requests in flight from before the "
                                   "move began (a session that stops polling keeps its partly filled batches)");
    const timespec pause{0, static_cast<long>(kQuiescencePollNs)};
    nanosleep(&pause, nullptr);
  }
}

Status Cache::check_holder_region(std::size_t holder, uint32_t holder_region) const {
  if (holder >= endpoints_.size() || retired(holder))
    return fail(RC_E_INVALID_ARGUMENT, "holder " + std::to_string(holder) + " is not connected to this cache");
  const uint32_t lent = control_[holder]->reply().region_count;
  if (holder_region >= lent)
    return fail(RC_E_INVALID_ARGUMENT, endpoints_[holder].to_string() + " lends this cache " + std::to_string(lent) +
                                           " regions, so it has no region " + std::to_string(holder_region));
  return RC_OK;
}

Status Cache::migration_commit(std::size_t region, std::size_t holder, uint32_t holder_region) {
  std::lock_guard lock(mutex_);
  if (region >= layout_.size())
    return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(region) + ": the cache has " +
                                           std::to_string(layout_.size()) + " regions");
  if (!layout_[region].moving)
    return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(region) + " is not moving: begin its migration first");
  if (const Status st = check_holder_region(holder, holder_region); st != RC_OK) return st;
  const auto& reply = control_[holder]->reply();
  if (reply.region_size != layout_[region].size)
    return fail(RC_E_INVALID_ARGUMENT, endpoints_[holder].to_string() + "'s regions hold " +
                                           std::to_string(reply.region_size) + " bytes, region " +
                                           std::to_string(region) + " " + std::to_string(layout_[region].size));
  for (std::size_t r = 0; r < layout_.size(); ++r)
    if (layout_[r].holder == holder && layout_[r].region == holder_region)
      return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(holder_region) + " of " +
                                             endpoints_[holder].to_string() + " already holds region " + std::to_string(r));
  layout_[region] = Placement{static_cast<uint16_t>(holder), static_cast<uint16_t>(holder_region), reply.region_size,
                              false, false};
  awaiting_[holder] = false;
  return relayout();
}

Status Cache::map_region_ahead(std::size_t holder, uint32_t holder_region) {
  std::function<void()> work;
  {
    std::lock_guard lock(mutex_);
    if (const Status st = check_holder_region(holder, holder_region); st != RC_OK) return st;
    work = control_[holder]->map_ahead(static_cast<uint16_t>(holder_region));
  }
  // Sessions bind under the lock after every begin and commit: ~0.1 s per GiB of page mapping must not hold them.
  if (work) work();
  return RC_OK;
}

Status Cache::migration_abort(std::size_t region) {
  std::lock_guard lock(mutex_);
  if (region >= layout_.size() || !layout_[region].moving)
    return fail(RC_E_INVALID_ARGUMENT, "region " + std::to_string(region) + " is not moving");
  stop_moving(region);
  return RC_OK;
}

Status Cache::remove_holder(std::size_t holder) {
  std::lock_guard lock(mutex_);
  if (holder >= endpoints_.size() || retired(holder))
    return fail(RC_E_INVALID_ARGUMENT, "holder " + std::to_string(holder) + " is not connected to this cache");
  for (std::size_t r = 0; r < layout_.size(); ++r)
    if (layout_[r].holder == holder)
      return fail(RC_E_INVALID_ARGUMENT, endpoints_[holder].to_string() + " still holds region " + std::to_string(r));
  awaiting_[holder] = false;
  return relayout();
}

void Cache::add_session(const Session* session) {
  std::lock_guard lock(sessions_mutex_);
  sessions_.push_back(session);
}

void Cache::remove_session(const Session* session) {
  std::lock_guard lock(sessions_mutex_);
  std::erase(sessions_, session);
}

Cache::Sealing::~Sealing() { OPENSSL_cleanse(key.data(), key.size()); }

uint64_t Cache::client_capacity() const {
  const uint64_t physical = capacity();
  return sealing_ ? sealing_->layout.capacity(physical) : physical;
}

Status Cache::check_key() {
  const seal::Layout& layout = sealing_->layout;
  const uint64_t least = (layout.header_strides() + 1) * layout.stride();
  if (capacity() < least)
    return fail(RC_E_INVALID_ARGUMENT, "a sealed cache with blocks of " + std::to_string(layout.block) +
                                           " bytes needs at least " + std::to_string(least) +
                                           " bytes on its servers (the key check and a block), not " +
                                           std::to_string(capacity()));
  std::unique_ptr<seal::Sealer> checker;
  try {
    checker = std::make_unique<seal::Sealer>(std::span<const uint8_t, seal::kKeyBytes>(sealing_->key),
                                             options_.cache_id, seal::kMinBlock);
  } catch (const std::exception& e) {
    return fail(RC_E_INTERNAL, std::string("cannot set the sealing key up: ") + e.what());
  }
  Session session(*this, 1, Session::View::Servers);
  Status st = session.open();
  if (st != RC_OK) return st;
  // One request at a time, in order; each ends within op_timeout_ms (it times out on a dead server).
  auto run = [&session](bool write, uint64_t address, std::byte* bytes, uint64_t length) -> Status {
    const Status submitted = write ? session.write(address, bytes, length, 0) : session.read(address, bytes, length, 0);
    if (submitted != RC_OK) return submitted;
    rc_completion done{};
    while (session.wait(&done, 1, -1) == 0) {
    }
    return static_cast<Status>(done.status);
  };
  constexpr uint32_t kCopy = seal::kKeyCheckBytes;
  std::array<std::byte, seal::kKeyCheckCopies * kCopy> check{};
  const seal::KeyCheck verdict = (st = run(false, 0, check.data(), check.size())) == RC_OK
                                     ? seal::open_key_check(*checker, layout.block, check.data())
                                     : seal::KeyCheck{seal::KeyCheck::WrongKey};
  if (st == RC_OK && verdict.verdict == seal::KeyCheck::Fresh) {
    // The first copy whole before the second is begun (see seal.h).
    seal::seal_key_check(*checker, layout.block, check.data());
    std::memcpy(check.data() + kCopy, check.data(), kCopy);
    if ((st = run(true, 0, check.data(), kCopy)) == RC_OK) st = run(true, kCopy, check.data() + kCopy, kCopy);
  } else if (st == RC_OK && verdict.repair_from >= 0) {
    const int to = 1 - verdict.repair_from;
    st = run(true, uint64_t{kCopy} * to, check.data() + kCopy * verdict.repair_from, kCopy);
  }
  session.close();
  if (st != RC_OK) return st;
  switch (verdict.verdict) {
    case seal::KeyCheck::WrongKey:
      return fail(RC_E_INTEGRITY, "the cache's key check does not open with this key: the cache was sealed with "
                                  "another key (or its servers' memory was altered)");
    case seal::KeyCheck::OtherBlockSize:
      return fail(RC_E_INVALID_ARGUMENT, "the cache is sealed in blocks of " + std::to_string(verdict.block) +
                                             " bytes, not " + std::to_string(layout.block));
    default:
      return RC_OK;
  }
}

std::unique_ptr<seal::Sealer> Cache::make_sealer() const {
  return std::make_unique<seal::Sealer>(std::span<const uint8_t, seal::kKeyBytes>(sealing_->key), options_.cache_id,
                                        sealing_->layout.block);
}

}  // namespace rc::client

#include "server/server.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "common/backoff.h"
#include "common/capability.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/refusal_log.h"
#include "common/notifier.h"
#include "server/acceptor.h"
#include "server/admin_service.h"
#include "server/executor.h"
#include "server/region_puller.h"
#include "server/registry.h"
#include "transport/connect_codec.h"
#include "transport/transport.h"

namespace rc::server {
namespace {

constexpr uint64_t kSpinNs = 50'000;    // keep polling this long after the last request
constexpr uint64_t kYieldNs = 200'000;  // then yield the core this long before blocking
constexpr int kHousekeeping = -1;
constexpr auto kLeaseCheckEvery = std::chrono::milliseconds(250);

// Why the server closes a connection.
enum class CloseReason {
  PeerClosed,     // the client hung up: routine
  PeerSentBytes,  // bytes on a socket the client must keep silent (shm)
  Malformed,      // a frame that does not parse, or out of sequence
  OutOfMemory,    // the server could not allocate for this connection
  CacheDropped,   // the cache's lease ended or its manager dropped it (the client gets a Notice)
};

const char* describe(CloseReason reason) {
  switch (reason) {
    case CloseReason::PeerClosed: return "peer closed";
    case CloseReason::PeerSentBytes: return "the client wrote to its shm socket, which must stay silent";
    case CloseReason::Malformed: return "malformed frame";
    case CloseReason::OutOfMemory: return "the server ran out of memory for this connection";
    case CloseReason::CacheDropped: return "its cache was dropped";
  }
  return "?";
}

// The Notice a dropped cache's connections get before they close.
std::vector<std::byte> drop_notice(const CacheState& cache) {
  const std::string name = "cache " + std::to_string(cache.id);
  switch (cache.dropped.load(std::memory_order_acquire)) {
    case DropCause::ByManager:
      return transport::encode_notice(RC_E_EXPIRED, name + " was dropped by its manager; the server freed it");
    case DropCause::ByHost:
      return transport::encode_notice(RC_E_EXPIRED, name + " was dropped: the server's host needed its memory back sooner than it could move");
    default:
      return transport::encode_notice(RC_E_EXPIRED, "the lease of " + name + " ended; the server dropped it");
  }
}

struct Closing {
  CloseReason reason;
  const char* detail = nullptr;  // for Malformed: what was wrong
};

struct Conn {
  std::unique_ptr<transport::ServerConnection> link;
  std::shared_ptr<CacheState> cache;
  std::unique_ptr<ConnectionTicket> ticket;
  uint32_t index = 0;          // within its cache, for placement
  Access access = Access::ReadWrite;  // ReadOnly: a migration source
  uint64_t next_seq = 1;
  bool probe = false;          // its fds reported an event while the thread slept: check the peer
  std::vector<int> watched;    // its fds in the owning thread's epoll set
};

}  // namespace

class ServerThread;

struct Server::Impl {
  ServerOptions options;
  std::optional<Registry> registry;
  std::vector<std::string> endpoints;
  std::vector<std::unique_ptr<transport::Listener>> listeners;
  std::unique_ptr<Acceptor> acceptor;
  std::unique_ptr<AdminService> admin;
  const uint64_t started_ns = now_ns();
  std::vector<std::unique_ptr<ServerThread>> pool;
  std::unique_ptr<ServerThread> housekeeping;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> placement_epoch{0};  // bumped whenever some cache's s changes
  std::thread lease_thread;
  std::mutex lease_mutex;
  std::condition_variable lease_cv;

  explicit Impl(const ServerOptions& o) : options(o) {}
  ServerThread& thread_for(int home);
  int home_of(const Conn& conn) const;
  void deliver(std::unique_ptr<transport::ServerConnection> link, std::shared_ptr<CacheState> cache,
               std::unique_ptr<ConnectionTicket> ticket, bool read_only);
  void wake_all();
  void lease_loop();
};

// One polling (or, for housekeeping, purely event-driven) server thread.
class ServerThread {
 public:
  ServerThread(Server::Impl& server, int index, bool spins)
      : server_(server),
        index_(index),
        backoff_(spins ? kSpinNs : 0, spins ? kYieldNs : 0),
        out_(std::make_unique<std::byte[]>(wire::kMaxFrame)) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, inbox_event_.fd(), &ev);
    thread_ = std::thread([this] { run(); });
  }

  // Stops the thread without touching its connections; once every thread is halted no one can
  // post a connection to a thread that is being destroyed.
  void halt() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    inbox_event_.signal();
    thread_.join();
  }

  ~ServerThread() {
    halt();
    for (auto& c : conns_) close_conn(c, std::nullopt);
    for (auto& c : inbox_) close_conn(c, std::nullopt);
    close(epoll_);
  }

  void post(std::unique_ptr<Conn> conn) {
    {
      std::lock_guard lock(inbox_mutex_);
      inbox_.push_back(std::move(conn));
      inbox_pending_.store(true, std::memory_order_release);
    }
    inbox_event_.signal();
  }

  void wake() { inbox_event_.signal(); }

 private:
  void run() {
    while (!stop_.load(std::memory_order_relaxed)) {
      try {
        take_inbox();
        if (poll_all()) {
          backoff_.worked();
        } else if (backoff_.idle()) {
          sleep_until_woken();
          backoff_.worked();
        }
      } catch (const std::bad_alloc&) {
        // Not one connection's fault (those are closed in poll_all): breathe and go on.
        RC_LOG_ERROR("server thread %d: out of memory outside any connection", index_);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

  void take_inbox() {
    if (!inbox_pending_.load(std::memory_order_acquire)) return;
    std::vector<std::unique_ptr<Conn>> fresh;
    {
      std::lock_guard lock(inbox_mutex_);
      fresh.swap(inbox_);
      inbox_pending_.store(false, std::memory_order_relaxed);
    }
    conns_.reserve(conns_.size() + fresh.size());
    for (auto& c : fresh) {
      watch(*c);
      conns_.push_back(std::move(c));
    }
    placement_epoch_ = UINT64_MAX;  // s may have changed again while they were in the inbox
  }

  // Executes what has arrived on every connection; true if anything was done.
  bool poll_all() {
    bool worked = false;
    // Homes change only when some cache's s does; recompute them then, not on every pass.
    const uint64_t epoch = server_.placement_epoch.load(std::memory_order_acquire);
    const bool replace = epoch != placement_epoch_;
    placement_epoch_ = epoch;
    for (std::size_t i = 0; i < conns_.size();) {
      Conn& c = *conns_[i];
      const int home = replace ? server_.home_of(c) : index_;
      if (home != index_) {
        // Handed over between two batches, so one connection never runs on two threads.
        std::unique_ptr<Conn> moving = std::move(conns_[i]);
        conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
        unwatch(*moving);  // before it leaves: its new owner may close the fds at once
        server_.thread_for(home).post(std::move(moving));
        continue;
      }
      std::optional<Closing> closing = check(c);
      if (!closing) {
        try {
          closing = serve(c, worked);
        } catch (const std::bad_alloc&) {
          closing = Closing{CloseReason::OutOfMemory};
        }
      }
      if (closing) {
        close_conn(conns_[i], closing);
        conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
    return worked;
  }

  // Whether the connection must close before it is served: its cache was dropped, or the probe
  // of a peer whose fds reported an event says it is gone or misbehaving.
  static std::optional<Closing> check(Conn& c) {
    if (c.cache->dropped.load(std::memory_order_relaxed) != DropCause::None) return Closing{CloseReason::CacheDropped};
    if (!c.probe) return std::nullopt;
    c.probe = false;
    const Status alive = c.link->check_alive();
    if (alive == RC_OK) return std::nullopt;
    return Closing{alive == RC_E_PROTOCOL ? CloseReason::PeerSentBytes : CloseReason::PeerClosed};
  }

  // Serves a few batches of one connection (bounded, for fairness); says why it must close.
  std::optional<Closing> serve(Conn& c, bool& worked) {
    for (int n = 0; n < 8; ++n) {
      std::span<const std::byte> frame;
      const Status st = c.link->next_request(frame);
      if (st == RC_E_BUSY) break;
      if (st != RC_OK) return Closing{st == RC_E_PROTOCOL ? CloseReason::Malformed : CloseReason::PeerClosed};
      worked = true;
      const ExecResult r = execute_batch(frame, c.cache->views, c.next_seq, out_.get(), c.access);
      if (r.malformed) return Closing{CloseReason::Malformed, r.reason};
      ++c.next_seq;
      if (c.link->send_response({out_.get(), r.response_bytes}) != RC_OK) return Closing{CloseReason::PeerClosed};
      if (r.server_threads) set_server_threads(*c.cache, *r.server_threads);
    }
    c.link->flush();
    return std::nullopt;
  }

  void set_server_threads(CacheState& cache, uint32_t s) {
    if (cache.server_threads.exchange(s) == s) return;
    server_.placement_epoch.fetch_add(1, std::memory_order_acq_rel);
    server_.wake_all();
  }

  void sleep_until_woken() {
    for (auto& c : conns_) c->link->arm_wait();
    // A request may have landed between the last poll and arming: look once more.
    bool worked = poll_all();
    bool pending_output = false;
    if (!worked) {
      for (auto& c : conns_) pending_output = pending_output || !c->link->flush();
      epoll_event events[16];
      const int n = epoll_wait(epoll_, events, 16, pending_output ? 1 : 200);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.ptr == nullptr) {
          inbox_event_.drain();
        } else {
          // Any event may be a hang-up or bytes that do not belong there (level-triggered: left
          // unread they would wake this thread forever): the next pass probes the peer.
          static_cast<Conn*>(events[i].data.ptr)->probe = true;
        }
      }
    }
    for (auto& c : conns_) c->link->disarm_wait();
  }

  // Events carry the Conn pointer, so a connection is in exactly one thread's epoll set: the set
  // of the thread that owns it, from take_inbox() until it is handed over or closed.
  void watch(Conn& c) {
    std::vector<int> fds;
    c.link->wait_fds(fds);
    for (int fd : fds) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.ptr = &c;
      if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0) c.watched.push_back(fd);
    }
  }

  void unwatch(Conn& c) {
    for (int fd : c.watched) epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    c.watched.clear();
  }

  // `closing` is empty when the server itself is stopping.
  void close_conn(std::unique_ptr<Conn>& c, const std::optional<Closing>& closing) {
    if (!c) return;
    if (closing) {
      // A client hanging up is routine; anything else is worth a warning.
      const bool routine = closing->reason == CloseReason::PeerClosed || closing->reason == CloseReason::CacheDropped;
      log(routine ? LogLevel::Info : LogLevel::Warn, "closing connection %s of cache %llu: %s%s%s",
          c->link->peer().c_str(), static_cast<unsigned long long>(c->cache->id), describe(closing->reason),
          closing->detail != nullptr ? ": " : "", closing->detail != nullptr ? closing->detail : "");
      if (closing->reason == CloseReason::CacheDropped) c->link->send_notice(drop_notice(*c->cache));
    }
    unwatch(*c);  // before the fds close, so that epoll never reports a recycled descriptor
    auto cache = c->cache;
    c.reset();
    server_.registry->detach(cache);
  }

  Server::Impl& server_;
  const int index_;
  Backoff backoff_;
  std::unique_ptr<std::byte[]> out_;
  int epoll_ = -1;
  EventFd inbox_event_;
  std::mutex inbox_mutex_;
  std::vector<std::unique_ptr<Conn>> inbox_;
  std::atomic<bool> inbox_pending_{false};
  uint64_t placement_epoch_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

ServerThread& Server::Impl::thread_for(int home) {
  return home == kHousekeeping ? *housekeeping : *pool[static_cast<std::size_t>(home)];
}

int Server::Impl::home_of(const Conn& conn) const {
  uint32_t s = conn.cache->server_threads.load(std::memory_order_relaxed);
  // tcp has no one-sided path: some thread must always execute its requests.
  if (s == 0 && conn.link->needs_server_thread()) s = 1;
  if (s == 0) return kHousekeeping;
  const uint32_t slot = conn.cache->thread_base + conn.index % s;
  return static_cast<int>(slot % pool.size());
}

void Server::Impl::deliver(std::unique_ptr<transport::ServerConnection> link, std::shared_ptr<CacheState> cache,
                           std::unique_ptr<ConnectionTicket> ticket, bool read_only) {
  std::unique_ptr<Conn> conn;
  try {
    conn = std::make_unique<Conn>();
  } catch (const std::bad_alloc&) {
    RC_LOG_ERROR("dropping a new connection of cache %llu: out of memory", static_cast<unsigned long long>(cache->id));
    link.reset();
    registry->detach(cache);
    return;
  }
  conn->link = std::move(link);
  conn->cache = std::move(cache);
  conn->ticket = std::move(ticket);
  conn->access = read_only ? Access::ReadOnly : Access::ReadWrite;
  {
    std::lock_guard lock(conn->cache->mutex);
    conn->index = conn->cache->next_connection_index++;
  }
  const int home = home_of(*conn);
  thread_for(home).post(std::move(conn));
}

void Server::Impl::wake_all() {
  for (auto& t : pool) t->wake();
  housekeeping->wake();
}

// Ends leases on time: marks the caches whose lease is over and wakes the threads that own their
// connections, which close them with a Notice.
void Server::Impl::lease_loop() {
  std::unique_lock lock(lease_mutex);
  while (!stopping.load()) {
    uint64_t next_end = 0;
    if (registry->expire(capability::unix_now_ms(), next_end) > 0) wake_all();
    lease_cv.wait_for(lock, kLeaseCheckEvery, [&] { return stopping.load(); });
  }
}

std::unique_ptr<Server> Server::start(const ServerOptions& options, Status& status) {
  if (options.listen.empty()) {
    status = fail(RC_E_INVALID_ARGUMENT, "a server needs at least one endpoint to listen on");
    return nullptr;
  }
  if (options.region_size == 0 || options.region_size % 4096 != 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "region size must be a non-zero multiple of 4096");
    return nullptr;
  }
  if (!options.admission_key.empty() && options.admission_key.size() < RC_MIN_ADMISSION_KEY_BYTES) {
    status = fail(RC_E_INVALID_ARGUMENT, "an admission key has at least " + std::to_string(RC_MIN_ADMISSION_KEY_BYTES) +
                                             " bytes, this one " + std::to_string(options.admission_key.size()));
    return nullptr;
  }
  if (options.server_id.size() > sizeof(wire::Capability::server_id)) {
    status = fail(RC_E_INVALID_ARGUMENT, "a server id has at most " +
                                             std::to_string(sizeof(wire::Capability::server_id)) + " bytes");
    return nullptr;
  }
  if (options.max_connections == 0 || options.max_connections_per_peer == 0) {
    status = fail(RC_E_INVALID_ARGUMENT, "connection limits must be at least 1");
    return nullptr;
  }
  auto impl = std::make_unique<Impl>(options);
  transport::ListenOptions listen_options{options.shm_socket_mode, options.allowed_uids};
  for (const auto& text : options.listen) {
    auto ep = parse_endpoint(text);
    if (!ep) {
      status = RC_E_INVALID_ARGUMENT;
      return nullptr;
    }
    auto listener = transport::listen(*ep, listen_options, status);
    if (!listener) return nullptr;
    impl->endpoints.push_back(listener->endpoint());
    impl->listeners.push_back(std::move(listener));
  }
  std::string id = options.server_id.empty() ? impl->endpoints.front() : options.server_id;
  if (id.size() > sizeof(wire::Capability::server_id)) id.resize(sizeof(wire::Capability::server_id));
  impl->registry.emplace(options.region_size, options.memory_limit, Admission{options.admission_key, id},
                         options.commit_memory);
  uint32_t threads = options.max_threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (uint32_t i = 0; i < threads; ++i)
    impl->pool.push_back(std::make_unique<ServerThread>(*impl, static_cast<int>(i), true));
  impl->housekeeping = std::make_unique<ServerThread>(*impl, kHousekeeping, false);
  Impl* self = impl.get();
  impl->admin = std::make_unique<AdminService>(
      AdminContext{&*impl->registry, threads, impl->started_ns, nullptr, [self] { self->wake_all(); },
                   [self](const wire::AdminPullRequest& request, const EventFd* cancel) {
                     return pull_region(*self->registry, request, cancel);
                   }},
      options.admission_key);
  impl->acceptor = std::make_unique<Acceptor>(
      *impl->registry, AcceptorLimits{options.max_connections, options.max_connections_per_peer},
      [self](std::unique_ptr<transport::ServerConnection> link, std::shared_ptr<CacheState> cache,
             std::unique_ptr<ConnectionTicket> ticket,
             bool read_only) { self->deliver(std::move(link), std::move(cache), std::move(ticket), read_only); },
      [self](std::unique_ptr<transport::MessageLink> link, std::span<const std::byte> hello) {
        self->admin->accept(std::move(link), hello);
      });
  impl->acceptor->start(impl->listeners);
  impl->lease_thread = std::thread([self] { self->lease_loop(); });
  status = RC_OK;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { stop(); }

const std::vector<std::string>& Server::endpoints() const { return impl_->endpoints; }

const std::string& Server::server_id() const { return impl_->registry->server_id(); }

uint64_t Server::memory_in_use() const { return impl_->registry->memory_in_use(); }

uint64_t Server::memory_committed() const { return impl_->registry->memory_committed(); }

uint64_t Server::memory_limit() const { return impl_->registry->memory_limit(); }

void Server::set_memory_limit(uint64_t bytes) { impl_->registry->set_memory_limit(bytes); }

std::size_t Server::drop_cache(uint64_t cache_id) { return impl_->registry->drop(cache_id, DropCause::ByHost); }

void Server::stop() {
  if (impl_->stopping.exchange(true)) return;
  {
    std::lock_guard lock(impl_->lease_mutex);
    impl_->lease_cv.notify_all();
  }
  impl_->lease_thread.join();
  impl_->acceptor->stop();  // no handshake hands over an admin connection after this
  RefusalLog::process().flush(UINT64_MAX);  // the refusals counted and not logged yet
  impl_->admin->stop();     // before the threads it wakes after a drop halt
  for (auto& t : impl_->pool) t->halt();
  impl_->housekeeping->halt();
  impl_->pool.clear();
  impl_->housekeeping.reset();
  impl_->acceptor.reset();
  impl_->listeners.clear();
}

}  // namespace rc::server

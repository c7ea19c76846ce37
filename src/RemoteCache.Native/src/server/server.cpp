#include "server/server.h"

#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/notifier.h"
#include "server/executor.h"
#include "server/registry.h"
#include "transport/transport.h"

namespace rc::server {
namespace {

constexpr uint64_t kSpinNs = 50'000;    // keep polling this long after the last request
constexpr uint64_t kYieldNs = 200'000;  // then yield the core this long before blocking
constexpr int kHousekeeping = -1;
constexpr uint32_t kMaxHandshakes = 64;

struct Conn {
  std::unique_ptr<transport::ServerConnection> link;
  std::shared_ptr<CacheState> cache;
  uint32_t index = 0;          // within its cache, for placement
  uint64_t next_seq = 1;
  bool hung_up = false;        // its wait fds reported a hang-up: probe and maybe close
  std::vector<int> watched;    // its fds in the owning thread's epoll set
};

}  // namespace

class ServerThread;

struct Server::Impl {
  ServerOptions options;
  Registry registry;
  std::vector<std::string> endpoints;
  std::vector<std::unique_ptr<transport::Listener>> listeners;
  std::vector<std::thread> acceptors;
  std::vector<std::unique_ptr<ServerThread>> pool;
  std::unique_ptr<ServerThread> housekeeping;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> placement_epoch{0};  // bumped whenever some cache's s changes
  EventFd stop_event;  // never drained: once signalled, every handshake wait ends
  std::mutex handshake_mutex;
  std::condition_variable handshakes_done;
  uint32_t handshakes = 0;

  Impl(const ServerOptions& o) : options(o), registry(o.region_size, o.memory_limit) {}
  ServerThread& thread_for(int home);
  int home_of(const Conn& conn) const;
  void place(std::unique_ptr<Conn> conn);
  void wake_all();
  void accept_loop(transport::Listener& listener);
  void handshake(std::unique_ptr<transport::PendingConnection> pending);
};

// One polling (or, for housekeeping, purely event-driven) server thread.
class ServerThread {
 public:
  ServerThread(Server::Impl& server, int index, bool spins)
      : server_(server), index_(index), spins_(spins), out_(std::make_unique<std::byte[]>(wire::kMaxFrame)) {
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
    for (auto& c : conns_) close_conn(c, nullptr);
    for (auto& c : inbox_) close_conn(c, nullptr);
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
    uint64_t idle_since = 0;  // 0: busy until the last pass; the clock is read only when idle
    while (!stop_.load(std::memory_order_relaxed)) {
      take_inbox();
      if (poll_all()) {
        idle_since = 0;
        continue;
      }
      const uint64_t now = now_ns();
      if (idle_since == 0) idle_since = now;
      if (spins_ && now - idle_since < kSpinNs) {
        cpu_relax();
      } else if (spins_ && now - idle_since < kSpinNs + kYieldNs) {
        sched_yield();
      } else {
        sleep_until_woken();
        idle_since = 0;
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
      const char* why = nullptr;
      if (c.hung_up) {
        c.hung_up = false;
        if (c.link->check_alive() != RC_OK) why = "peer closed";
      }
      if (why == nullptr) why = serve(c, worked);
      if (why != nullptr) {
        close_conn(conns_[i], why);
        conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
    return worked;
  }

  // Serves a few batches of one connection (bounded, for fairness); returns why it must close.
  const char* serve(Conn& c, bool& worked) {
    for (int n = 0; n < 8; ++n) {
      std::span<const std::byte> frame;
      const Status st = c.link->next_request(frame);
      if (st == RC_E_BUSY) break;
      if (st != RC_OK) return st == RC_E_PROTOCOL ? "malformed frame" : "peer closed";
      worked = true;
      const ExecResult r = execute_batch(frame, c.cache->views, c.next_seq, out_.get());
      if (r.malformed) return r.reason;
      ++c.next_seq;
      if (c.link->send_response({out_.get(), r.response_bytes}) != RC_OK) return "peer closed";
      if (r.server_threads) set_server_threads(*c.cache, *r.server_threads);
    }
    c.link->flush();
    return nullptr;
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
        } else if (events[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
          static_cast<Conn*>(events[i].data.ptr)->hung_up = true;
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

  void close_conn(std::unique_ptr<Conn>& c, const char* why) {
    if (!c) return;
    if (why != nullptr) {
      // A client hanging up is routine; anything else is worth a warning.
      const bool routine = std::strcmp(why, "peer closed") == 0;
      log(routine ? LogLevel::Info : LogLevel::Warn, "closing connection %s of cache %llu: %s",
          c->link->peer().c_str(), static_cast<unsigned long long>(c->cache->id), why);
    }
    unwatch(*c);  // before the fds close, so that epoll never reports a recycled descriptor
    auto cache = c->cache;
    c.reset();
    server_.registry.detach(cache);
  }

  Server::Impl& server_;
  const int index_;
  const bool spins_;
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

void Server::Impl::place(std::unique_ptr<Conn> conn) {
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

// Each handshake runs on a short-lived thread of its own, so a client that connects and says nothing
// holds up nobody; at most kMaxHandshakes run at once, beyond that new connections are dropped.
void Server::Impl::accept_loop(transport::Listener& listener) {
  while (!stopping.load()) {
    Status st = RC_OK;
    std::unique_ptr<transport::PendingConnection> pending = listener.accept(st);
    if (!pending) {
      if (st == RC_E_CLOSED) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // e.g. out of descriptors
      continue;
    }
    {
      std::lock_guard lock(handshake_mutex);
      if (handshakes >= kMaxHandshakes) {
        RC_LOG_WARN("%u handshakes already pending: dropping a new connection", handshakes);
        continue;
      }
      ++handshakes;
    }
    std::thread([this, p = std::move(pending)]() mutable { handshake(std::move(p)); }).detach();
  }
}

void Server::Impl::handshake(std::unique_ptr<transport::PendingConnection> pending) {
  std::shared_ptr<CacheState> cache;
  const transport::Admit admit = [&](const wire::ConnectRequest& request) { return registry.attach(request, cache); };
  Status st = RC_OK;
  std::unique_ptr<transport::ServerConnection> link = pending->handshake(admit, stop_event, st);
  pending.reset();
  if (link && !stopping.load()) {
    auto conn = std::make_unique<Conn>();
    conn->link = std::move(link);
    conn->cache = std::move(cache);
    place(std::move(conn));
  } else if (cache) {
    registry.detach(cache);  // admitted, but the reply failed or the server is stopping
  }
  std::lock_guard lock(handshake_mutex);
  if (--handshakes == 0) handshakes_done.notify_all();
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
  auto impl = std::make_unique<Impl>(options);
  for (const auto& text : options.listen) {
    auto ep = parse_endpoint(text);
    if (!ep) {
      status = RC_E_INVALID_ARGUMENT;
      return nullptr;
    }
    auto listener = transport::listen(*ep, status);
    if (!listener) return nullptr;
    impl->endpoints.push_back(listener->endpoint());
    impl->listeners.push_back(std::move(listener));
  }
  uint32_t threads = options.max_threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (uint32_t i = 0; i < threads; ++i)
    impl->pool.push_back(std::make_unique<ServerThread>(*impl, static_cast<int>(i), true));
  impl->housekeeping = std::make_unique<ServerThread>(*impl, kHousekeeping, false);
  for (auto& l : impl->listeners) {
    transport::Listener* raw = l.get();
    Impl* self = impl.get();
    impl->acceptors.emplace_back([self, raw] { self->accept_loop(*raw); });
  }
  status = RC_OK;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { stop(); }

const std::vector<std::string>& Server::endpoints() const { return impl_->endpoints; }

uint64_t Server::memory_in_use() const { return impl_->registry.memory_in_use(); }

void Server::stop() {
  if (impl_->stopping.exchange(true)) return;
  impl_->stop_event.signal();
  for (auto& l : impl_->listeners) l->shutdown();
  for (auto& t : impl_->acceptors) t.join();
  {
    std::unique_lock lock(impl_->handshake_mutex);
    impl_->handshakes_done.wait(lock, [&] { return impl_->handshakes == 0; });
  }
  for (auto& t : impl_->pool) t->halt();
  impl_->housekeeping->halt();
  impl_->pool.clear();
  impl_->housekeeping.reset();
  impl_->listeners.clear();
}

}  // namespace rc::server

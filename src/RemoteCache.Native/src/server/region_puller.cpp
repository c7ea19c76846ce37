#include "server/region_puller.h"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/memfd.h"
#include "transport/connect_codec.h"
#include "transport/socket_util.h"
#include "transport/transport.h"

namespace rc::server {
namespace {

// A pass that moved nothing sleeps on the link's fds at most this long, so that the pull's bounds
// (cancel, deadline, silence, a dropped target) are checked even when no fd says anything.
constexpr int kWaitSliceMs = 10;
// Read batches in flight on the message path: q at most, as the data path's own connections.
constexpr std::size_t kFramesInFlight = RC_MAX_QUEUE_DEPTH;

constexpr uint64_t ms_to_ns(uint64_t ms) { return ms * 1'000'000; }

bool signalled(const EventFd* event) {
  if (event == nullptr) return false;
  pollfd p{event->fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

std::string bytes_done(uint64_t done, uint64_t size) {
  return std::to_string(done) + " of " + std::to_string(size) + " bytes copied";
}

// Copies one source region into target memory over an established migration-source connection.
class RegionCopy {
 public:
  struct Bounds {
    const CacheState* target;  // dropped meanwhile: the copy stops
    const EventFd* cancel;
    uint64_t deadline_ns;
    uint32_t timeout_ms;     // for the message
    uint32_t max_mib_per_s;  // 0: unpaced
  };

  // `next_seq`: the link's next request sequence, carried from one region's copy to the next (the source
  // takes a sequence that goes back for a protocol fault).
  RegionCopy(transport::ClientConnection& link, uint16_t region, std::byte* dst, uint64_t size, std::string source,
             const Bounds& bounds, uint64_t& next_seq)
      : link_(link), region_(region), dst_(dst), size_(size), source_(std::move(source)), bounds_(bounds), next_seq_(next_seq) {}

  Status run() {
    started_ns_ = now_ns();
    if (link_.one_sided()) {
      chunk_ = std::min(kPullChunk, link_.max_one_sided_length());
      reads_in_flight_ = static_cast<uint32_t>(
          std::clamp<uint64_t>(kPullBytesInFlight / chunk_, 1, link_.max_one_sided_in_flight()));
      return drive([this](bool& moved) { return step_one_sided(moved); });
    }
    frame_ = std::make_unique<std::byte[]>(wire::kMaxFrame);
    return drive([this](bool& moved) { return step_batched(moved); });
  }

  uint64_t copied() const { return done_; }

  // Whether the pace allows a read of `length` bytes more now (a paced copy posts when its schedule has room).
  bool paced_out(uint32_t length) const {
    if (bounds_.max_mib_per_s == 0) return false;
    const double allowed = static_cast<double>(now_ns() - started_ns_) * 1e-9 * bounds_.max_mib_per_s * 1048576.0;
    return posted_ > 0 && static_cast<double>(posted_ + length) > allowed;
  }

 private:
  struct PendingRead {
    uint64_t seq;
    uint64_t offset;
    uint32_t length;
  };

  template <typename Step>
  Status drive(Step step) {
    uint64_t last_progress = now_ns();
    while (done_ < size_) {
      bool moved = false;
      if (const Status st = step(moved); st != RC_OK) return st;
      const uint64_t now = now_ns();
      if (moved) last_progress = now;
      if (const Status st = check_bounds(now, last_progress); st != RC_OK) return st;
      if (moved || done_ == size_) continue;
      // Armed before the last look, so that what arrives after it wakes the wait (verbs' completion
      // channel only signals once armed).
      link_.arm_wait();
      const Status st = step(moved);
      if (st == RC_OK && !moved) wait(now, last_progress);
      link_.disarm_wait();
      if (st != RC_OK) return st;
      if (moved) last_progress = now_ns();
    }
    return RC_OK;
  }

  Status check_bounds(uint64_t now, uint64_t last_progress) const {
    if (signalled(bounds_.cancel))
      return fail(RC_E_CLOSED, "the pull was cancelled: this server is stopping (" + bytes_done(done_, size_) + ")");
    if (bounds_.target->dropped.load(std::memory_order_acquire) != DropCause::None)
      return fail(RC_E_EXPIRED, "cache " + std::to_string(bounds_.target->id) +
                                    " was dropped on this server during the pull (" + bytes_done(done_, size_) + ")");
    if (now >= bounds_.deadline_ns)
      return fail(RC_E_TIMEOUT, "the pull did not finish within its " + std::to_string(bounds_.timeout_ms) + " ms (" +
                                    bytes_done(done_, size_) + " from " + source_ + ")");
    if (now - last_progress >= ms_to_ns(kSourceSilenceMs))
      return fail(RC_E_TIMEOUT, "the source " + source_ + " answered nothing for " + std::to_string(kSourceSilenceMs) +
                                    " ms (" + bytes_done(done_, size_) + ")");
    return RC_OK;
  }

  void wait(uint64_t now, uint64_t last_progress) const {
    std::vector<int> fds;
    link_.wait_fds(fds);
    if (bounds_.cancel != nullptr) fds.push_back(bounds_.cancel->fd());
    std::vector<pollfd> polled;
    for (const int fd : fds) polled.push_back(pollfd{fd, POLLIN, 0});
    const uint64_t until = std::min(bounds_.deadline_ns, last_progress + ms_to_ns(kSourceSilenceMs));
    const int timeout = std::min(kWaitSliceMs, transport::poll_timeout_ms(std::max(until, now)));
    (void)::poll(polled.data(), polled.size(), timeout);
  }

  // Posts reads up to the in-flight bound and reaps their completions.
  Status step_one_sided(bool& moved) {
    while (outstanding_ < reads_in_flight_ && posted_ < size_) {
      const auto length = static_cast<uint32_t>(std::min<uint64_t>(chunk_, size_ - posted_));
      if (paced_out(length)) break;
      if (const Status st = link_.post_read(posted_, region_, posted_, dst_ + posted_, length); st != RC_OK)
        return fail(st, "a one-sided read of " + source_ + " failed: " + last_error());
      posted_ += length;
      ++outstanding_;
    }
    transport::WorkCompletion done[64];
    const std::size_t n = link_.poll_completions(done, std::size(done));
    for (std::size_t i = 0; i < n; ++i) {
      if (done[i].status != RC_OK)
        return fail(done[i].status, "a one-sided read of " + source_ + " completed with " +
                                        status_name(done[i].status) + " (" + bytes_done(done_, size_) + ")");
      done_ += std::min<uint64_t>(chunk_, size_ - done[i].wr_id);
      --outstanding_;
      moved = true;
    }
    return RC_OK;
  }

  // Sends one-entry Read batches up to kFramesInFlight and takes in their responses.
  Status step_batched(bool& moved) {
    wire::BatchWriter writer(frame_.get());
    while (pending_.size() < kFramesInFlight && posted_ < size_) {
      const auto length = static_cast<uint32_t>(std::min<uint64_t>(wire::kMaxChunk, size_ - posted_));
      if (paced_out(length)) break;
      writer.reset();
      writer.add(wire::Op::Read, region_, posted_, length, nullptr);
      const Status st = link_.send_frame(writer.finish(next_seq_));
      if (st == RC_E_BUSY) break;
      if (st != RC_OK) return fail(st, "sending a read to " + source_ + " failed: " + last_error());
      pending_.push_back(PendingRead{next_seq_++, posted_, length});
      posted_ += length;
    }
    for (;;) {
      std::span<const std::byte> frame;
      const Status st = link_.poll_response(frame);
      if (st == RC_E_BUSY) return RC_OK;
      if (st != RC_OK) return fail(st, "the source " + source_ + ": " + last_error() + " (" + bytes_done(done_, size_) + ")");
      const Status taken = take_response(frame);
      link_.release_response();
      if (taken != RC_OK) return taken;
      moved = true;
    }
  }

  Status take_response(std::span<const std::byte> frame) {
    if (frame.size() < sizeof(wire::FrameHeader)) return fail(RC_E_PROTOCOL, "the source " + source_ + " sent a short frame");
    const wire::FrameHeader h = wire::read_header(frame.data());
    if (h.kind == static_cast<uint8_t>(wire::Kind::Notice)) {
      const Status st = transport::decode_notice(frame);
      return fail(st, "the source " + source_ + ": " + last_error() + " (" + bytes_done(done_, size_) + ")");
    }
    if (pending_.empty()) return fail(RC_E_PROTOCOL, "the source " + source_ + " answered a read it was not sent");
    const PendingRead read = pending_.front();
    wire::ResponseEntry entry{};
    const std::size_t expected = sizeof h + sizeof entry + wire::pad8(read.length);
    if (!wire::header_ok(h, wire::Kind::Response, frame.size()) || h.bytes != frame.size() || h.seq != read.seq ||
        h.count != 1 || frame.size() < sizeof h + sizeof entry)
      return fail(RC_E_PROTOCOL, "the source " + source_ + " answered read " + std::to_string(read.seq) +
                                     " with a frame that is not its response");
    std::memcpy(&entry, frame.data() + sizeof h, sizeof entry);
    if (entry.status != RC_OK)
      return fail(is_known_status(entry.status) ? static_cast<Status>(entry.status) : RC_E_PROTOCOL,
                  "the source " + source_ + " refused a read of [" + std::to_string(read.offset) + ", +" +
                      std::to_string(read.length) + ") with " + status_name(entry.status));
    if (entry.length != read.length || frame.size() != expected)
      return fail(RC_E_PROTOCOL, "the source " + source_ + " answered a read of " + std::to_string(read.length) +
                                     " bytes with " + std::to_string(entry.length));
    std::memcpy(dst_ + read.offset, frame.data() + sizeof h + sizeof entry, read.length);
    pending_.pop_front();
    done_ += read.length;
    return RC_OK;
  }

  transport::ClientConnection& link_;
  const uint16_t region_;
  std::byte* const dst_;
  const uint64_t size_;
  const std::string source_;
  const Bounds bounds_;
  uint64_t posted_ = 0;  // bytes asked for
  uint64_t started_ns_ = 0;
  uint64_t done_ = 0;    // bytes in place
  // One-sided.
  uint32_t chunk_ = 0;
  uint32_t reads_in_flight_ = 0;
  uint32_t outstanding_ = 0;
  // Message path.
  std::unique_ptr<std::byte[]> frame_;
  uint64_t& next_seq_;
  std::deque<PendingRead> pending_;
};

// Keeps the target cache alive while the pull writes into it.
class TargetHold {
 public:
  TargetHold(Registry& registry, uint64_t cache_id) : registry_(registry), cache_(registry.hold(cache_id)) {}
  ~TargetHold() {
    if (cache_) registry_.release(cache_);
  }
  TargetHold(const TargetHold&) = delete;
  TargetHold& operator=(const TargetHold&) = delete;
  const std::shared_ptr<CacheState>& cache() const { return cache_; }

 private:
  Registry& registry_;
  std::shared_ptr<CacheState> cache_;
};

struct Outcome {
  uint64_t bytes = 0;
  bool one_sided = false;
};

uint32_t regions_of(const wire::AdminPullRequest& request) { return request.regions == 0 ? 1 : request.regions; }

std::string range(uint32_t first, uint32_t count) {
  return count == 1 ? "region " + std::to_string(first) : "regions " + std::to_string(first) + "..+" + std::to_string(count);
}

Status pull(Registry& registry, const wire::AdminPullRequest& request, const std::string& source,
            const EventFd* cancel, uint64_t deadline_ns, uint32_t timeout_ms, Outcome& out) {
  const std::string cache = "cache " + std::to_string(request.cache_id);
  TargetHold hold(registry, request.cache_id);
  if (!hold.cache()) return fail(RC_E_INVALID_ARGUMENT, std::string("the target: ") + last_error());
  const CacheState& target = *hold.cache();
  const uint32_t count = regions_of(request);
  if (request.target_region >= target.regions.size() || count > target.regions.size() - request.target_region)
    return fail(RC_E_OUT_OF_RANGE, "target " + range(request.target_region, count) + " is out of range: " + cache +
                                       " has " + std::to_string(target.regions.size()) + " regions on this server");
  const auto endpoint = parse_endpoint(source);
  if (!endpoint) return fail(RC_E_INVALID_ARGUMENT, "the source endpoint: " + std::string(last_error()));

  transport::ConnectParams params;
  params.request.cache_id = request.cache_id;
  params.request.flags = wire::kConnectMigrationSource;
  crypto::random_bytes(params.request.client_id);
  params.request.capability_length = sizeof(wire::Capability);
  params.request.capability = request.source_capability;
  const uint64_t now = now_ns();
  const uint64_t left_ms = deadline_ns > now ? (deadline_ns - now) / 1'000'000 : 0;
  params.timeout_ms = static_cast<uint32_t>(std::clamp<uint64_t>(left_ms, 1, RC_DEFAULT_CONNECT_TIMEOUT_MS));
  Status st = RC_OK;
  const std::unique_ptr<transport::ClientConnection> link = transport::connect(*endpoint, params, st);
  if (!link) return fail(st, "connecting to the source " + source + " as a migration source: " + last_error());

  const wire::ConnectReply& reply = link->reply();
  if (request.source_region >= reply.region_count || count > reply.region_count - request.source_region)
    return fail(RC_E_OUT_OF_RANGE, "source " + range(request.source_region, count) + " is out of range: " + cache +
                                       " has " + std::to_string(reply.region_count) + " regions on " + source);
  if (reply.region_size != target.regions[request.target_region].size)
    return fail(RC_E_INVALID_ARGUMENT, "region sizes differ: the source " + source + " lends regions of " +
                                           std::to_string(reply.region_size) + " bytes, this server of " +
                                           std::to_string(target.regions[request.target_region].size));

  out.one_sided = link->one_sided();
  uint64_t next_seq = 1;
  for (uint32_t i = 0; i < count; ++i) {
    const transport::RegionMemory& region = target.regions[request.target_region + i];
    // The target's pages are mapped (and zero-filled where the region has none yet) in one pass before
    // the copy rather than faulted in one by one under it.
    populate_for_write(region.base, region.size);
    RegionCopy copy(*link, static_cast<uint16_t>(request.source_region + i), region.base, region.size, source,
                    RegionCopy::Bounds{&target, cancel, deadline_ns, timeout_ms, request.max_mib_per_s}, next_seq);
    st = copy.run();
    out.bytes += copy.copied();
    if (st != RC_OK) return st;
  }
  // One-sided reads copy from the source's memory without asking it: they are known good only if the
  // source still held the cache after the last of them (a cache it freed reads as zeros).
  if (out.one_sided && (st = link->check_alive()) != RC_OK)
    return fail(st, "the source " + source + " went away before the copy was confirmed: " + last_error());
  return RC_OK;
}

}  // namespace

wire::AdminPullResult pull_region(Registry& registry, const wire::AdminPullRequest& request, const EventFd* cancel) {
  const uint64_t started = now_ns();
  const uint32_t timeout_ms = request.timeout_ms != 0 ? request.timeout_ms : RC_DEFAULT_PULL_TIMEOUT_MS;
  const std::string source(request.source_endpoint, strnlen(request.source_endpoint, sizeof request.source_endpoint));
  Outcome outcome;
  Status st = RC_OK;
  std::string why;
  try {
    st = pull(registry, request, source, cancel, started + ms_to_ns(timeout_ms), timeout_ms, outcome);
    if (st != RC_OK) why = last_error();
  } catch (const std::exception& e) {
    st = RC_E_INTERNAL;
    why = std::string("the pull failed on this server: ") + e.what();
  }
  wire::AdminPullResult result{};
  result.status = st;
  result.one_sided = outcome.one_sided ? 1 : 0;
  result.bytes = outcome.bytes;
  result.elapsed_ns = now_ns() - started;
  const std::size_t n = std::min(why.size(), sizeof result.message - 1);
  std::memcpy(result.message, why.data(), n);
  const auto ms = static_cast<unsigned long long>(result.elapsed_ns / 1'000'000);
  if (st == RC_OK) {
    RC_LOG_INFO("cache %llu: pulled %s from %s into region %u on: %llu bytes in %llu ms (%s)",
                static_cast<unsigned long long>(request.cache_id), range(request.source_region, regions_of(request)).c_str(),
                source.c_str(), request.target_region, static_cast<unsigned long long>(result.bytes), ms,
                outcome.one_sided ? "one-sided reads" : "batched reads");
  } else {
    RC_LOG_WARN("cache %llu: pulling %s from %s into region %u on failed after %llu ms (%llu bytes copied): %s: %s",
                static_cast<unsigned long long>(request.cache_id), range(request.source_region, regions_of(request)).c_str(),
                source.c_str(), request.target_region, ms, static_cast<unsigned long long>(result.bytes),
                status_name(st), why.c_str());
  }
  return result;
}

}  // namespace rc::server

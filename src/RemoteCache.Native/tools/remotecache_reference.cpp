// remotecache-reference: the raw floors the data path is judged against, measured on this machine
// in the same run as the benchmark (targets are ratios, never absolute numbers). The method follows
// the team's loopback-limits probe, so the two agree:
//   - shm_rtt_us: a round trip through shared memory between threads pinned to cores 0 and 1;
//   - tcp_rtt_us: a 16-byte ping-pong over loopback TCP with TCP_NODELAY, blocking sockets, both
//     ends on core 0 (as in the probe, where the echo thread inherits the caller's affinity);
//   - store_mops: random 8-byte stores into a buffer of the benchmark's default cache size, the
//     memory-bound ceiling of a server thread executing random small writes.
// Prints one JSON object (medians of several rounds).
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % static_cast<int>(std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Mean round trip of `rounds` ping-pongs through one atomic word.
double shm_round_trip_us(int rounds) {
  alignas(64) std::atomic<int> ball{0};
  pin_to(0);
  std::thread partner([&] {
    pin_to(1);
    for (int i = 0; i < rounds; ++i) {
      while (ball.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  const auto start = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    ball.store(2 * i + 1, std::memory_order_release);
    while (ball.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto elapsed = Clock::now() - start;
  partner.join();
  return std::chrono::duration<double, std::micro>(elapsed).count() / rounds;
}

bool io_all(int fd, char* buf, size_t n, bool write_side) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = write_side ? send(fd, buf + done, n - done, MSG_NOSIGNAL) : recv(fd, buf + done, n - done, 0);
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

double tcp_round_trip_us(int rounds) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tcp listener");
    return -1;
  }
  pin_to(0);
  std::thread echo([&] {
    pin_to(0);
    const int fd = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[16];
    for (int i = 0; i < rounds; ++i)
      if (!io_all(fd, buf, sizeof buf, false) || !io_all(fd, buf, sizeof buf, true)) break;
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("tcp connect");
    return -1;
  }
  char buf[16] = {};
  const auto start = Clock::now();
  for (int i = 0; i < rounds; ++i)
    if (!io_all(fd, buf, sizeof buf, true) || !io_all(fd, buf, sizeof buf, false)) break;
  const auto elapsed = Clock::now() - start;
  close(fd);
  echo.join();
  close(listener);
  return std::chrono::duration<double, std::micro>(elapsed).count() / rounds;
}

// Millions of random 8-byte stores per second into `bytes` of touched memory.
double random_store_mops(std::size_t bytes, long stores) {
  std::vector<uint64_t> memory(bytes / sizeof(uint64_t), 0);
  uint64_t x = 88172645463325252ull;
  const auto start = Clock::now();
  for (long i = 0; i < stores; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memory[x % memory.size()] = static_cast<uint64_t>(i);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(stores) / seconds / 1e6;
}

}  // namespace

int main() {
  std::vector<double> shm;
  std::vector<double> tcp;
  std::vector<double> stores;
  for (int round = 0; round < 5; ++round) {
    shm.push_back(shm_round_trip_us(200000));
    tcp.push_back(tcp_round_trip_us(20000));
  }
  for (int round = 0; round < 3; ++round) stores.push_back(random_store_mops(256u << 20, 10'000'000));
  std::printf("{\"shm_rtt_us\": %.4f, \"tcp_rtt_us\": %.3f, \"store_mops\": %.2f}\n", median(shm), median(tcp),
              median(stores));
  return 0;
}

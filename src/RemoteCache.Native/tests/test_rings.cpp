// MpscQueue / SpscQueue: capacity rules, full/empty behaviour, wrap-around, and multi-threaded
// stress checking that every item arrives exactly once and in its producer's order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "common/mpsc_queue.h"
#include "test_util.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Item {
  uint32_t producer;
  uint32_t check;  // ~producer: catches torn copies
  uint64_t seq;
};

// ---- MpscQueue ---------------------------------------------------------------------------------

TEST(MpscQueue, CapacityRoundsUpToPowerOfTwo) {
  EXPECT_EQ(rc::MpscQueue<uint64_t>(0).capacity(), 2u);
  EXPECT_EQ(rc::MpscQueue<uint64_t>(1).capacity(), 2u);
  EXPECT_EQ(rc::MpscQueue<uint64_t>(2).capacity(), 2u);
  EXPECT_EQ(rc::MpscQueue<uint64_t>(3).capacity(), 4u);
  EXPECT_EQ(rc::MpscQueue<uint64_t>(5).capacity(), 8u);
  EXPECT_EQ(rc::MpscQueue<uint64_t>(8).capacity(), 8u);
  EXPECT_EQ(rc::MpscQueue<uint64_t>(1000).capacity(), 1024u);
}

TEST(MpscQueue, FullAndEmptyAtCapacity) {
  rc::MpscQueue<uint64_t> q(8);
  uint64_t v = 12345;
  EXPECT_TRUE(q.empty_hint());
  EXPECT_FALSE(q.try_pop(v));
  EXPECT_EQ(v, 12345u) << "a failed pop must not touch the output";

  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(q.try_push(i)) << "push " << i << " of a capacity-8 queue";
    EXPECT_FALSE(q.empty_hint());
  }
  EXPECT_FALSE(q.try_push(99)) << "the 9th push into a capacity-8 queue must fail";
  EXPECT_FALSE(q.try_push(100));

  ASSERT_TRUE(q.try_pop(v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(q.try_push(8)) << "one pop frees exactly one cell";
  EXPECT_FALSE(q.try_push(101));

  for (uint64_t i = 1; i <= 8; ++i) {
    ASSERT_TRUE(q.try_pop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(q.try_pop(v));
  EXPECT_TRUE(q.empty_hint());
}

TEST(MpscQueue, WrapAroundKeepsFifoOrder) {
  rc::MpscQueue<uint64_t> q(4);
  std::mt19937_64 rng(7);
  uint64_t next_in = 0;
  uint64_t next_out = 0;
  for (int round = 0; round < 20000; ++round) {
    const auto burst = 1 + rng() % 4;
    for (uint64_t i = 0; i < burst; ++i) {
      if (!q.try_push(next_in)) break;
      ++next_in;
    }
    EXPECT_LE(next_in - next_out, 4u);
    const auto take = 1 + rng() % 4;
    uint64_t v = 0;
    for (uint64_t i = 0; i < take && q.try_pop(v); ++i) {
      ASSERT_EQ(v, next_out) << "round " << round;
      ++next_out;
    }
  }
  uint64_t v = 0;
  while (q.try_pop(v)) {
    ASSERT_EQ(v, next_out);
    ++next_out;
  }
  EXPECT_EQ(next_in, next_out);
  EXPECT_GT(next_in, 4u * 1000u) << "the test should have wrapped the ring many times";
}

// Producers push (id, seq) with seq 0..per-1; the single consumer checks that each producer's
// items arrive exactly once and in order.
void mpsc_stress(std::size_t capacity, uint32_t producers, uint64_t per_producer) {
  rc::MpscQueue<Item> q(capacity);
  std::atomic<bool> go{false};
  std::atomic<bool> abort{false};
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      for (uint64_t s = 0; s < per_producer; ++s) {
        const Item it{p, ~p, s};
        unsigned spins = 0;
        while (!q.try_push(it)) {
          if (abort.load(std::memory_order_relaxed)) return;
          if (++spins > 16) std::this_thread::yield();
        }
      }
    });
  }

  std::vector<uint64_t> next(producers, 0);
  uint64_t received = 0;
  uint64_t errors = 0;
  const uint64_t total = per_producer * producers;
  const auto deadline = Clock::now() + std::chrono::milliseconds(rctest::scaled_ms(60000));
  go.store(true, std::memory_order_release);
  Item it{};
  while (received < total) {
    if (!q.try_pop(it)) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "consumer stalled after " << received << " of " << total << " items";
        abort.store(true);
        break;
      }
      std::this_thread::yield();
      continue;
    }
    ++received;
    if (it.producer >= producers || it.check != ~it.producer) {
      if (errors++ < 10) ADD_FAILURE() << "torn or corrupt item: producer " << it.producer << " check " << it.check;
      continue;
    }
    if (it.seq != next[it.producer]) {
      if (errors++ < 10)
        ADD_FAILURE() << "producer " << it.producer << ": got seq " << it.seq << ", expected "
                      << next[it.producer] << (it.seq < next[it.producer] ? " (duplicate / reordered)" : " (lost item)");
      next[it.producer] = it.seq + 1;
      continue;
    }
    ++next[it.producer];
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors, 0u);
  for (uint32_t p = 0; p < producers; ++p) EXPECT_EQ(next[p], per_producer) << "producer " << p;
  EXPECT_FALSE(q.try_pop(it)) << "queue must be empty after every item was consumed";
  EXPECT_TRUE(q.empty_hint());
}

TEST(MpscQueue, FourProducersStress) { mpsc_stress(1024, 4, rctest::scaled(200000, 5000)); }

TEST(MpscQueue, FourProducersTinyQueueStress) { mpsc_stress(4, 4, rctest::scaled(50000, 2000)); }

// ---- SpscQueue ---------------------------------------------------------------------------------

TEST(SpscQueue, CapacityRoundsUpToPowerOfTwo) {
  EXPECT_EQ(rc::SpscQueue<uint64_t>(0).capacity(), 2u);
  EXPECT_EQ(rc::SpscQueue<uint64_t>(1).capacity(), 2u);
  EXPECT_EQ(rc::SpscQueue<uint64_t>(3).capacity(), 4u);
  EXPECT_EQ(rc::SpscQueue<uint64_t>(64).capacity(), 64u);
  EXPECT_EQ(rc::SpscQueue<uint64_t>(65).capacity(), 128u);
}

TEST(SpscQueue, FullEmptyAndPopMany) {
  rc::SpscQueue<uint64_t> q(4);
  uint64_t out[16] = {};
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pop_many(out, 8), 0u);

  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(q.try_push(i));
  EXPECT_FALSE(q.empty());
  EXPECT_FALSE(q.try_push(4)) << "push into a full capacity-4 queue must fail";

  EXPECT_EQ(q.pop_many(out, 0), 0u) << "max 0 pops nothing";
  ASSERT_EQ(q.pop_many(out, 3), 3u);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 1u);
  EXPECT_EQ(out[2], 2u);

  for (uint64_t i = 4; i < 7; ++i) ASSERT_TRUE(q.try_push(i)) << i;
  EXPECT_FALSE(q.try_push(7));

  // pop_many may return fewer than are queued (it works from a cached tail) but never more, and at
  // least one while something is queued; repeated calls collect everything in order.
  std::vector<uint64_t> got;
  for (int calls = 0; calls < 8 && got.size() < 4; ++calls) {
    const std::size_t n = q.pop_many(out, 16);
    EXPECT_GE(n, 1u) << "items are queued";
    EXPECT_LE(n, 4u - got.size()) << "pop_many returned more than is queued";
    got.insert(got.end(), out, out + n);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{3, 4, 5, 6}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pop_many(out, 16), 0u);
  EXPECT_TRUE(q.try_push(7));
  ASSERT_EQ(q.pop_many(out, 1), 1u);
  EXPECT_EQ(out[0], 7u);
}

TEST(SpscQueue, WrapAroundKeepsFifoOrder) {
  rc::SpscQueue<uint64_t> q(8);
  std::mt19937_64 rng(11);
  uint64_t next_in = 0;
  uint64_t next_out = 0;
  uint64_t out[16];
  for (int round = 0; round < 20000; ++round) {
    const auto burst = rng() % 10;
    for (uint64_t i = 0; i < burst; ++i) {
      const bool ok = q.try_push(next_in);
      EXPECT_EQ(ok, next_in - next_out < 8) << "push must fail exactly when 8 items are queued";
      if (!ok) break;
      ++next_in;
    }
    const auto max = static_cast<std::size_t>(rng() % 12);
    const std::size_t n = q.pop_many(out, max);
    const auto queued = static_cast<std::size_t>(next_in - next_out);
    EXPECT_LE(n, std::min(max, queued)) << "pop_many returned more than max or than is queued";
    if (max > 0 && queued > 0) {
      EXPECT_GE(n, 1u) << "pop_many returned nothing while items are queued";
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], next_out) << "round " << round;
      ++next_out;
    }
  }
  EXPECT_GT(next_in, 8u * 1000u);
}

void spsc_stress(std::size_t capacity, uint64_t count) {
  rc::SpscQueue<uint64_t> q(capacity);
  std::atomic<bool> abort{false};
  std::thread producer([&] {
    for (uint64_t i = 0; i < count; ++i) {
      unsigned spins = 0;
      while (!q.try_push(i * 2654435761u)) {
        if (abort.load(std::memory_order_relaxed)) return;
        if (++spins > 16) std::this_thread::yield();
      }
    }
  });

  std::vector<uint64_t> out(64);
  std::mt19937 rng(3);
  uint64_t expected = 0;
  uint64_t errors = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(rctest::scaled_ms(60000));
  while (expected < count) {
    const std::size_t max = 1 + rng() % 40;
    const std::size_t n = q.pop_many(out.data(), max);
    if (n > max) {
      ADD_FAILURE() << "pop_many returned " << n << " > max " << max;
      abort.store(true);
      break;
    }
    if (n == 0) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "consumer stalled at " << expected << " of " << count;
        abort.store(true);
        break;
      }
      std::this_thread::yield();
      continue;
    }
    for (std::size_t i = 0; i < n; ++i, ++expected) {
      if (out[i] != expected * 2654435761u && errors++ < 10)
        ADD_FAILURE() << "item " << expected << ": got " << out[i] << ", expected " << expected * 2654435761u;
    }
  }
  producer.join();
  EXPECT_EQ(errors, 0u);
  EXPECT_EQ(expected, count);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pop_many(out.data(), 64), 0u);
}

TEST(SpscQueue, ProducerConsumerStress) { spsc_stress(64, rctest::scaled(1000000, 20000)); }

TEST(SpscQueue, ProducerConsumerTinyQueueStress) { spsc_stress(2, rctest::scaled(200000, 5000)); }

}  // namespace

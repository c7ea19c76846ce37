// The idle policy of the polling loops (common/backoff.h), on a clock the test sets: spin, then
// yield, then block; after a gap between two looks that only a preemption explains, spin only
// briefly before blocking until the contended spell is over.
#include <gtest/gtest.h>

#include "common/backoff.h"

namespace {

using rc::Backoff;

constexpr uint64_t kUs = 1'000;
constexpr uint64_t kStart = 1'000'000'000;  // any non-zero time
constexpr uint64_t kSpin = 50 * kUs, kYield = 200 * kUs;

// Idle looks one microsecond apart from `from`: how long the loop kept going before it said to block.
uint64_t idle_until_block(Backoff& b, uint64_t from) {
  for (uint64_t t = from;; t += kUs) {
    if (b.idle(t)) return t - from;
  }
}

TEST(Backoff, SpinsThenYieldsThenBlocks) {
  Backoff b(kSpin, kYield);
  b.worked(kStart);
  EXPECT_EQ(idle_until_block(b, kStart), kSpin + kYield);
}

TEST(Backoff, ALoopThatNeverSpinsBlocksAtOnce) {
  Backoff b(0, 0);
  EXPECT_TRUE(b.idle(kStart));
}

TEST(Backoff, APreemptionBetweenTwoLooksKeepsSpinsBriefForTheContendedSpell) {
  Backoff b(kSpin, kYield);
  EXPECT_FALSE(b.idle(kStart));
  uint64_t t = kStart + Backoff::kPreemptedNs + kUs;  // the thread lost its core between two looks
  EXPECT_TRUE(b.idle(t));
  EXPECT_TRUE(b.contended(t));
  b.worked(t + kUs);
  EXPECT_EQ(idle_until_block(b, t + 2 * kUs), Backoff::kContendedSpinNs);
  // Once the spell is over the loop spins and yields in full again.
  t += Backoff::kContendedNs + kUs;
  b.worked(t);
  EXPECT_FALSE(b.contended(t));
  EXPECT_EQ(idle_until_block(b, t + kUs), kSpin + kYield);
}

TEST(Backoff, APreemptionThatEndsInWorkIsSeenToo) {
  // Preempted while spinning, and the request arrived meanwhile: the pass that found it is the next look.
  Backoff b(kSpin, kYield);
  EXPECT_FALSE(b.idle(kStart));
  const uint64_t t = kStart + Backoff::kPreemptedNs + kUs;
  b.worked(t);
  EXPECT_TRUE(b.contended(t));
}

TEST(Backoff, ALoopThatOnlyYieldsBlocksAtOnceWhenContended) {
  // rc_wait with a client thread only yields: contended, it does not even do that.
  Backoff b(0, 20 * kUs);
  EXPECT_FALSE(b.idle(kStart));
  EXPECT_TRUE(b.idle(kStart + Backoff::kPreemptedNs + kUs));
}

TEST(Backoff, TimeSpentBlockedIsNotAPreemption) {
  Backoff b(kSpin, 0);
  b.worked(kStart);
  const uint64_t blocked = kStart + idle_until_block(b, kStart);
  const uint64_t woken = blocked + 10'000 * kUs;  // ten milliseconds later
  b.worked(woken);
  EXPECT_FALSE(b.contended(woken));
  EXPECT_EQ(idle_until_block(b, woken + kUs), kSpin);
}

TEST(Backoff, BusyPassesCloseTogetherAreNotAPreemption) {
  Backoff b(kSpin, 0);
  uint64_t t = kStart;
  for (int i = 0; i < 10'000; ++i, t += 50 * kUs) b.worked(t);  // half a second of steady work
  EXPECT_FALSE(b.contended(t));
  EXPECT_EQ(idle_until_block(b, t), kSpin);
}

}  // namespace

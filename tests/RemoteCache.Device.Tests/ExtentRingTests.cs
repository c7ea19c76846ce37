using System;
using System.Linq;
using Xunit;

namespace RemoteCache.Device.Tests;

/// <summary>The write-order ring of an unsegmented RemoteCacheDevice, without a cache: placement, the index, eviction.</summary>
public sealed class ExtentRingTests
{
    private const long Capacity = 4096;

    private static ExtentRing.Extent PlaceWritten(ExtentRing ring, int segment, long offset, long length)
    {
        var extent = ring.Place(segment, offset, length) ?? throw new Xunit.Sdk.XunitException("write not kept");
        ring.Written(extent, succeeded: true);
        return extent;
    }

    private static ExtentRing.Part[] Locate(ExtentRing ring, int segment, long offset, long length) =>
        Locate(ring, segment, offset, length, out _);

    private static ExtentRing.Part[] Locate(ExtentRing ring, int segment, long offset, long length, out long oldest)
    {
        var parts = new ExtentRing.Part[ExtentRing.MaxParts];
        int n = ring.Locate(segment, offset, length, parts, out oldest);
        return parts[..n];
    }

    [Fact]
    public void WriteIsReadableOnceItCompleted()
    {
        var ring = new ExtentRing(Capacity);
        var extent = ring.Place(0, 1L << 40, 1024)!;  // offsets of an unsegmented log can be anything
        Assert.Empty(Locate(ring, 0, 1L << 40, 512));
        ring.Written(extent, succeeded: true);
        Assert.Equal(new[] { new ExtentRing.Part(512, 0, 256) }, Locate(ring, 0, (1L << 40) + 512, 256));
        Assert.Empty(Locate(ring, 0, (1L << 40) + 512, 1024));  // runs past what was written
        Assert.Empty(Locate(ring, 1, 1L << 40, 512));
    }

    [Fact]
    public void FailedWriteStaysUnreadable()
    {
        var ring = new ExtentRing(Capacity);
        ring.Written(ring.Place(0, 0, 512)!, succeeded: false);
        Assert.Empty(Locate(ring, 0, 0, 512));
    }

    [Fact]
    public void OneOffsetInTwoSegmentsNamesDifferentBytes()
    {
        // The object log's addressing: every main-log segment's objects start at offset 0.
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 3, 0, 512);
        PlaceWritten(ring, 4, 0, 512);
        Assert.Equal(0, Locate(ring, 3, 0, 512)[0].CacheAddress);
        Assert.Equal(512, Locate(ring, 4, 0, 512)[0].CacheAddress);
    }

    [Fact]
    public void ReadSpanningWritesIsSplitAndAGapIsNotResident()
    {
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 0, 1024, 512);
        PlaceWritten(ring, 1, 0, 512);
        PlaceWritten(ring, 0, 512, 512);  // placed after another segment's write: not next to 1024 in the cache
        Assert.Equal(new[] { new ExtentRing.Part(1024, 0, 512), new ExtentRing.Part(0, 512, 256) },
                     Locate(ring, 0, 512, 768, out long oldest));
        Assert.Equal(0, oldest);
        Assert.Empty(Locate(ring, 0, 0, 1024));       // [0, 512) was never written
        Assert.Empty(Locate(ring, 0, 1024, 1024));    // nor [1536, 2048)
    }

    [Fact]
    public void ReadOfMoreThanMaxPartsWritesIsNotResident()
    {
        var ring = new ExtentRing(Capacity);
        for (int i = 0; i <= ExtentRing.MaxParts; i++)
            PlaceWritten(ring, 0, i * 256L, 256);
        Assert.Equal(ExtentRing.MaxParts, Locate(ring, 0, 0, ExtentRing.MaxParts * 256L).Length);
        Assert.Empty(Locate(ring, 0, 0, (ExtentRing.MaxParts + 1) * 256L));
    }

    [Fact]
    public void OldestBytesAreEvictedAsTheRingWraps()
    {
        var ring = new ExtentRing(Capacity);
        for (int i = 0; i < 8; i++)
            PlaceWritten(ring, 0, i * 1024L, 1024);
        for (int i = 0; i < 4; i++)
            Assert.Empty(Locate(ring, 0, i * 1024L, 1024));
        for (int i = 4; i < 8; i++)
            Assert.Equal((i - 4) * 1024L, Locate(ring, 0, i * 1024L, 1024).Single().CacheAddress);
        Assert.Equal(4, ring.ExtentCount);  // the evicted extents left the index
    }

    [Fact]
    public void ReadOvertakenWhileInFlightIsNoLongerHeld()
    {
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 0, 0, 1024);
        Assert.Single(Locate(ring, 0, 0, 1024, out long oldest));
        Assert.True(ring.StillHolds(oldest));
        // The read is in flight; the log writes on until the ring comes round to its bytes.
        for (int i = 1; i <= 3; i++)
            PlaceWritten(ring, 0, i * 1024L, 1024);
        Assert.True(ring.StillHolds(oldest));
        ring.Place(0, 4096, 512);  // placed, not even written yet: the read's bytes may already be changing
        Assert.False(ring.StillHolds(oldest));
    }

    [Fact]
    public void WriteNeverStraddlesTheCacheEnd()
    {
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 0, 0, 3072);
        PlaceWritten(ring, 0, 3072, 2048);  // does not fit in the last 1024 bytes: starts the next lap
        Assert.Equal(0, Locate(ring, 0, 3072, 2048).Single().CacheAddress);
        Assert.Empty(Locate(ring, 0, 0, 512));  // its lap evicted the first write
        Assert.Equal(4096 + 2048, ring.Head);
    }

    [Fact]
    public void WriteOntoBytesAnOlderWriteIsStillWritingIsNotKept()
    {
        var ring = new ExtentRing(Capacity);
        var slow = ring.Place(0, 0, 1024)!;
        for (int i = 1; i <= 3; i++)
            PlaceWritten(ring, 0, i * 1024L, 1024);
        // The next write would reuse the slow write's cache bytes; they could land in either order.
        Assert.Null(ring.Place(0, 4096, 1024));
        Assert.Empty(Locate(ring, 0, 4096, 1024));
        ring.Written(slow, succeeded: true);
        Assert.NotNull(ring.Place(0, 4096, 1024));
        Assert.Empty(Locate(ring, 0, 0, 1024));
    }

    [Fact]
    public void RewriteHidesTheOldBytesAtOnce()
    {
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 0, 0, 2048);
        var rewrite = ring.Place(0, 512, 512)!;
        Assert.Single(Locate(ring, 0, 0, 512));
        Assert.Single(Locate(ring, 0, 1024, 1024));
        Assert.Empty(Locate(ring, 0, 512, 512));  // neither the old bytes nor the new, until the write completes
        ring.Written(rewrite, succeeded: true);
        Assert.Equal(new[] { new ExtentRing.Part(0, 0, 512), new ExtentRing.Part(2048, 512, 512), new ExtentRing.Part(1024, 1024, 1024) },
                     Locate(ring, 0, 0, 2048));
    }

    [Fact]
    public void RewriteOfAWriteStillInFlightLeavesNothingReadable()
    {
        var ring = new ExtentRing(Capacity);
        var first = ring.Place(0, 0, 1024)!;
        var second = ring.Place(0, 512, 1024)!;
        ring.Written(second, succeeded: true);
        ring.Written(first, succeeded: true);
        Assert.Empty(Locate(ring, 0, 0, 512));  // the first write's remaining piece was cut before it completed
        Assert.Single(Locate(ring, 0, 512, 1024));
    }

    [Fact]
    public void WriteLargerThanTheCacheIsNotKeptAndHidesTheOldBytes()
    {
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 0, 0, 1024);
        Assert.Null(ring.Place(0, 0, 2 * Capacity));
        Assert.Empty(Locate(ring, 0, 0, 1024));
    }

    [Fact]
    public void RemovedSegmentIsForgotten()
    {
        var ring = new ExtentRing(Capacity);
        PlaceWritten(ring, 2, 0, 512);
        PlaceWritten(ring, 3, 0, 512);
        ring.Remove(2);
        Assert.Empty(Locate(ring, 2, 0, 512));
        Assert.Single(Locate(ring, 3, 0, 512));
    }
}

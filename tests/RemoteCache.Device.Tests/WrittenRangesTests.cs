using Xunit;

namespace RemoteCache.Device.Tests;

public sealed class WrittenRangesTests
{
    [Fact]
    public void RangeIsReadableOnlyAfterItsWriteCompletes()
    {
        var w = new WrittenRanges();
        Assert.True(w.BeginWrite(0, 0, 4096));
        Assert.False(w.Contains(0, 0, 512));
        w.EndWrite(0, 0, 4096, succeeded: true);
        Assert.True(w.Contains(0, 0, 4096));
        Assert.True(w.Contains(0, 1024, 2048));
        Assert.False(w.Contains(0, 3584, 4608));
        Assert.False(w.Contains(1, 0, 512));
    }

    [Fact]
    public void AdjacentWritesMergeAndRewritesHideTheirBytesUntilDone()
    {
        var w = new WrittenRanges();
        Assert.True(w.BeginWrite(3, 4096, 8192));
        Assert.False(w.BeginWrite(3, 0, 4096));
        w.EndWrite(3, 4096, 8192, true);
        w.EndWrite(3, 0, 4096, true);
        Assert.True(w.Contains(3, 0, 8192));

        // Rewriting the tail sector (a partial page flushed again) hides only that sector meanwhile.
        w.BeginWrite(3, 7680, 12288);
        Assert.True(w.Contains(3, 0, 7680));
        Assert.False(w.Contains(3, 7168, 8192));
        w.EndWrite(3, 7680, 12288, true);
        Assert.True(w.Contains(3, 0, 12288));
    }

    [Fact]
    public void OverlappingWritesInFlightAndFailedWritesLeaveTheRangeUnreadable()
    {
        var w = new WrittenRanges();
        w.BeginWrite(0, 0, 4096);
        w.BeginWrite(0, 2048, 8192);
        w.EndWrite(0, 0, 4096, true);
        Assert.False(w.Contains(0, 0, 512));   // the second write still changes bytes of the first
        w.EndWrite(0, 2048, 8192, false);
        Assert.False(w.Contains(0, 2048, 4096));
        w.BeginWrite(0, 0, 512);
        w.EndWrite(0, 0, 512, true);
        Assert.True(w.Contains(0, 0, 512));
    }

    [Fact]
    public void SegmentsBelowAStartAreForgotten()
    {
        var w = new WrittenRanges();
        for (int s = 0; s < 4; s++)
        {
            w.BeginWrite(s, 0, 512);
            w.EndWrite(s, 0, 512, true);
        }
        w.RemoveBelow(2);
        Assert.Equal(2, w.SegmentCount);
        Assert.False(w.Contains(1, 0, 512));
        Assert.True(w.Contains(2, 0, 512));
        w.Remove(2);
        Assert.False(w.Contains(2, 0, 512));
    }

    [Fact]
    public void OffsetsOfAnUnsegmentedLogAreNotBoundedByASegment()
    {
        // An unsegmented device's offsets are its log's flat addresses, all in one segment.
        var w = new WrittenRanges();
        long far = 1L << 42;
        w.BeginWrite(0, far, far + 4096);
        w.EndWrite(0, far, far + 4096, true);
        w.BeginWrite(0, far + 4096, far + 8192);
        w.EndWrite(0, far + 4096, far + 8192, true);
        Assert.True(w.Contains(0, far + 512, far + 8192));
        Assert.False(w.Contains(0, far - 512, far + 512));
        Assert.False(w.Contains(0, far + 4096, long.MaxValue));
    }
}

using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary><see cref="RemoteCacheSession"/>: one thread, tags, Poll/Wait, program order.</summary>
public sealed class SessionTests
{
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task SessionWritesThenReadsInProgramOrder(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(45), $"session over {transport}", () => Run(server.Endpoint));
        server.AssertRunning();
    }

    private static unsafe void Run(string endpoint)
    {
        using var client = RemoteCacheClient.Open(new[] { endpoint }, Options(regions: 2, new CacheConfig(0, 1, 16, 4)));
        using var session = client.OpenSession();
        const int Ops = 500, Size = 24;
        byte* buffers = (byte*)NativeMemory.AllocZeroed((nuint)(2 * Ops * Size));
        try
        {
            var rng = new Random(7);
            long region = 1L << 20;  // straddle the boundary between the two regions
            for (int i = 0; i < Ops; i++)
            {
                byte* w = buffers + i * Size;
                for (int j = 0; j < Size; j++)
                    w[j] = (byte)rng.Next(1, 256);
                long address = region - Size / 2 + (long)i * Size * 3;
                Submit(session, session.StartWrite(address, w, Size, (ulong)(2 * i)));
                // Submitted right behind its write without waiting: program order makes it see the write.
                Submit(session, session.StartRead(address, buffers + (Ops + i) * Size, Size, (ulong)(2 * i + 1)));
            }
            var seen = new bool[2 * Ops];
            Span<RemoteCacheCompletion> done = stackalloc RemoteCacheCompletion[64];
            var watch = Stopwatch.StartNew();
            int finished = 0;
            while (finished < 2 * Ops)
            {
                Assert.True(watch.Elapsed < TimeSpan.FromSeconds(20), $"only {finished} of {2 * Ops} completions");
                int n = session.Wait(done, TimeSpan.FromMilliseconds(100));
                for (int k = 0; k < n; k++)
                {
                    Assert.Equal(RemoteCacheStatus.Ok, (RemoteCacheStatus)done[k].Status);
                    Assert.False(seen[done[k].Tag], $"tag {done[k].Tag} completed twice");
                    seen[done[k].Tag] = true;
                }
                finished += n;
            }
            for (int i = 0; i < Ops; i++)
                AssertSameBytes(new ReadOnlySpan<byte>(buffers + i * Size, Size),
                                new ReadOnlySpan<byte>(buffers + (Ops + i) * Size, Size), $"operation {i}");
            Assert.Equal(0, session.Outstanding);
            Assert.Equal(RemoteCacheStatus.OutOfRange, session.StartRead(client.Capacity - 1, buffers, 2, 0));
        }
        finally
        {
            NativeMemory.Free(buffers);
        }
    }

    private static void Submit(RemoteCacheSession session, RemoteCacheStatus status) =>
        Assert.True(status == RemoteCacheStatus.Ok, $"submission failed with {status}");
}

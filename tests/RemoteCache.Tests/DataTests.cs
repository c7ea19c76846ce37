using System;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>Data correctness of the ValueTask API against a server process, checked against shadow copies.</summary>
public sealed class DataTests
{
    /// <summary>
    /// 2000 random reads and writes (1 B to 64 KiB, log-uniform, some across region boundaries) in
    /// bursts of up to 32 concurrent operations from one logical flow, on a cache of 4 × 1 MiB regions.
    /// A fresh cache reads as zeros; every read sees every write submitted before it.
    /// </summary>
    [Theory]
    [InlineData("shm", 0u, 1u, 1u, 1u)]
    [InlineData("tcp", 0u, 1u, 1u, 1u)]
    [InlineData("shm", 0u, 1u, 16u, 4u)]
    [InlineData("tcp", 0u, 1u, 16u, 4u)]
    [InlineData("shm", 1u, 1u, 32u, 8u)]
    [InlineData("tcp", 1u, 1u, 32u, 8u)]
    [InlineData("shm", 0u, 0u, 1u, 1u)]
    [InlineData("tcp", 0u, 0u, 1u, 1u)]
    public async Task RandomReadsAndWritesMatchShadow(string transport, int c, int s, int b, int q)
    {
        var config = new CacheConfig(c, s, b, q);
        await WithClient(transport, Options(4, config, $"shadow-{transport}-{config}"), TimeSpan.FromSeconds(45), $"random I/O over {transport} with {config}", async client =>
        {
            Assert.Equal(4 * MiB, client.Capacity);
            Assert.Equal(config, client.Config);
            var io = new CheckedIo(client, 0, (int)client.Capacity, seed: 1000 + (int)(c * 1000 + s * 100 + b * 10 + q))
            {
                Label = $"{transport} {config}",
            };
            // Chunks of 768 KiB: some reads cross region boundaries. The shadow is all zeros.
            await io.VerifyAllAsync("fresh cache reads zeros", chunk: 768 << 10);
            await io.RunAsync(ops: 2000, maxInFlight: 32, maxLength: 64 << 10);
            await io.VerifyAllAsync("whole cache after the run", chunk: 768 << 10);
            Assert.True(io.Reads > 500 && io.Writes > 500, $"reads {io.Reads}, writes {io.Writes}");
            Assert.True(io.Straddling > 50, $"only {io.Straddling} operations crossed a region boundary");
            Assert.Equal(0, client.Outstanding);
        });
    }

    /// <summary>8 callers (Task.Run) each on its own 256 KiB slice, doing checked random I/O with awaits.</summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ConcurrentCallersOnDisjointSlices(string transport)
    {
        await WithClient(transport, Options(4, name: $"callers-{transport}"), TimeSpan.FromSeconds(45), $"8 concurrent callers over {transport}", async client =>
        {
            // Slices start at 128 KiB: slices 3 and 7 cross the 1 MiB and 2 MiB region boundaries.
            var ios = Enumerable.Range(0, 8)
                .Select(i => new CheckedIo(client, (128 << 10) + i * (256L << 10), 256 << 10, seed: 2000 + i) { Label = $"{transport} caller {i}" })
                .ToArray();
            var callers = ios.Select(io => Task.Run(async () =>
            {
                await io.RunAsync(ops: 300, maxInFlight: 8, maxLength: 16 << 10);
                await io.VerifyAllAsync("own slice at the end");
            })).ToArray();
            await Task.WhenAll(callers);
            // Once everyone is done, each slice still holds exactly what its caller wrote.
            foreach (var io in ios)
                await io.VerifyAllAsync("slice re-read after all callers finished");
            Assert.True(ios[3].Straddling > 0 && ios[7].Straddling > 0, "no operation crossed a region boundary");
        });
    }

    /// <summary>
    /// One task does checked random I/O while another reconfigures the cache through all the
    /// configurations, 10 cycles; all data verifies and the final configuration is the last applied.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ReconfigureWhileInUse(string transport)
    {
        await WithClient(transport, Options(4, CacheConfig.HighThroughput, $"reconfig-{transport}"), TimeSpan.FromSeconds(50), $"reconfigure while in use over {transport}", async client =>
        {
            var io = new CheckedIo(client, 0, (int)client.Capacity, seed: 3000) { Label = $"{transport} reconfigure" };
            int stop = 0;
            int applied = 0;
            var ioTask = Task.Run(() => io.RunAsync(ops: 300, maxInFlight: 16, maxLength: 64 << 10, keepGoing: () => Volatile.Read(ref stop) == 0));
            var reconfigurer = Task.Run(async () =>
            {
                try
                {
                    for (int cycle = 0; cycle < 10; cycle++)
                    {
                        foreach (var config in Configs)
                        {
                            // Let some I/O happen under the previous configuration (progress, not time).
                            int before = io.Completed;
                            while (io.Completed < before + 20 && !ioTask.IsCompleted)
                                await Task.Delay(1);
                            if (ioTask.IsCompleted)
                                return;
                            await client.ReconfigureAsync(config);
                            applied++;
                            var now = client.Config;
                            if (now != config)
                                throw new XunitException($"after Reconfigure({config}) Config is {now}");
                        }
                    }
                }
                finally
                {
                    Volatile.Write(ref stop, 1);
                }
            });
            await Task.WhenAll(ioTask, reconfigurer);
            Assert.Equal(10 * Configs.Length, applied);
            await io.VerifyAllAsync("whole cache after reconfiguring");
            Assert.Equal(Configs[^1], client.Config);
        });
    }

    /// <summary>
    /// Grow and Shrink under verified I/O on the first server's range: a second server is appended and cut off
    /// again three times; the I/O never fails, the added range holds what is written into it, and after a shrink
    /// I/O past the new capacity throws out-of-range before anything is sent.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task GrowAndShrinkWhileInUse(string transport)
    {
        using var second = ServerProcess.Start(transport);
        await WithClient(transport, Options(2, CacheConfig.HighThroughput, $"resize-{transport}"), TimeSpan.FromSeconds(50), $"grow and shrink over {transport}", async client =>
        {
            long kept = client.Capacity;
            Assert.Equal(1, client.ServerCount);
            var io = new CheckedIo(client, 0, (int)kept, seed: 5000) { Label = $"{transport} resize" };
            int stop = 0;
            var ioTask = Task.Run(() => io.RunAsync(ops: 300, maxInFlight: 16, maxLength: 64 << 10, keepGoing: () => Volatile.Read(ref stop) == 0));
            async Task Progress()
            {
                int before = io.Completed;
                while (io.Completed < before + 20 && !ioTask.IsCompleted)
                    await Task.Delay(1);
            }
            try
            {
                var data = new byte[kept];
                var back = new byte[kept];
                for (int round = 0; round < 3; round++)
                {
                    await Progress();
                    await client.GrowAsync(new[] { second.Endpoint });
                    Assert.Equal(2 * kept, client.Capacity);
                    Assert.Equal(2, client.ServerCount);
                    Random.Shared.NextBytes(data);
                    await client.WriteAsync(kept, data);
                    await client.ReadAsync(kept, back);
                    Assert.True(data.AsSpan().SequenceEqual(back), "the added range does not hold what was written");

                    await Progress();
                    await client.ShrinkAsync(1);
                    Assert.Equal(kept, client.Capacity);
                    Assert.Equal(1, client.ServerCount);
                    await Assert.ThrowsAsync<ArgumentOutOfRangeException>(async () => await client.ReadAsync(kept, new byte[1]));
                }
                Assert.Throws<ArgumentOutOfRangeException>(() => { _ = client.ShrinkAsync(2); });
                Assert.Throws<ArgumentException>(() => { _ = client.GrowAsync(Array.Empty<string>()); });
                Assert.Throws<ArgumentException>(() => { _ = client.GrowAsync(new[] { second.Endpoint }, new[] { "a", "b" }); });
            }
            finally
            {
                Volatile.Write(ref stop, 1);
            }
            await ioTask;
            await io.VerifyAllAsync("kept range after resizing");
        });
        second.AssertRunning();
    }

    /// <summary>
    /// Many independent async flows, each a chain of write-then-read-back awaits, started without a
    /// SynchronizationContext: their continuations run inline on whichever thread harvested the
    /// completion (a caller driving its lane, or the client's poller), and immediately submit and
    /// await again from there. Every read returns the value its own flow wrote last.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task InlineContinuationsThatAwaitAgain(string transport)
    {
        await WithClient(transport, Options(1, name: $"inline-{transport}"), TimeSpan.FromSeconds(30), $"inline continuations over {transport}", async client =>
        {
            static async Task Chain(RemoteCacheClient client, int flow)
            {
                var value = new byte[64];
                var back = new byte[64];
                long at = flow * 4096L + 100;
                for (int k = 0; k < 100; k++)
                {
                    value.AsSpan().Fill((byte)(flow * 7 + k));
                    await client.WriteAsync(at, value);
                    back.AsSpan().Fill(0xA5);
                    await client.ReadAsync(at, back);
                    AssertSameBytes(value, back, $"flow {flow} step {k}: read-back of its own write");
                }
            }
            // Started from this thread, all at once; no await in between.
            var flows = Enumerable.Range(0, 128).Select(f => Chain(client, f)).ToArray();
            await Task.WhenAll(flows);
        });
    }
}

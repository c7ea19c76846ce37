using System;
using System.Diagnostics;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>OpenAsync and ReadAsync/WriteAsync with a CancellationToken: prompt, and nothing leaks or is corrupted.</summary>
public sealed class CancellationTests
{
    [Fact]
    public async Task OpenAsyncOpensACache()
    {
        using var server = ServerProcess.Start("tcp");
        await WithTimeout(TimeSpan.FromSeconds(30), "OpenAsync", async () =>
        {
            await using var client = await RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, Options(1, name: "open async"));
            await client.WriteAsync(10, new byte[] { 42 });
            var back = new byte[1];
            await client.ReadAsync(10, back);
            Assert.Equal(42, back[0]);
        });
    }

    [Fact]
    public async Task CancellingOpenAsyncReturnsAtOnceAndTheAbandonedConnectIsClosed()
    {
        // A peer that accepts connections and never answers: the connect waits for its handshake until ConnectTimeout.
        using var silent = new TcpListener(IPAddress.Loopback, 0);
        silent.Start();
        var endpoint = $"tcp:127.0.0.1:{((IPEndPoint)silent.LocalEndpoint).Port}";
        var before = RemoteCacheDiagnostics.GetNativeObjectCounts();
        var options = Options(1, name: "cancelled open");
        options.ConnectTimeout = TimeSpan.FromSeconds(3);
        using var cts = new CancellationTokenSource(TimeSpan.FromMilliseconds(200));
        var watch = Stopwatch.StartNew();
        var opening = RemoteCacheClient.OpenAsync(new[] { endpoint }, options, cts.Token);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => opening);
        Assert.True(watch.Elapsed < TimeSpan.FromSeconds(2), $"OpenAsync returned {watch.Elapsed.TotalMilliseconds:F0} ms after the start, 200 ms after cancelling was asked");

        // The connect gives up after its timeout, in the background; nothing native is left then.
        while (watch.Elapsed < TimeSpan.FromSeconds(20) && RemoteCacheDiagnostics.GetNativeObjectCounts() != before)
            await Task.Delay(50);
        Assert.Equal(before, RemoteCacheDiagnostics.GetNativeObjectCounts());
    }

    [Fact]
    public async Task OpenAsyncWithACancelledTokenStartsNothing()
    {
        using var cts = new CancellationTokenSource();
        cts.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(
            () => RemoteCacheClient.OpenAsync(new[] { "tcp:127.0.0.1:9" }, new RemoteCacheOptions(), cts.Token));
    }

    [Fact]
    public async Task ABadOptionIsRefusedBeforeOpenAsyncStarts()
    {
        var e = await Assert.ThrowsAsync<ArgumentException>(
            () => RemoteCacheClient.OpenAsync(new[] { "tcp:127.0.0.1:9" }, new RemoteCacheOptions { RegionsPerServer = 0 }));
        Assert.Equal(nameof(RemoteCacheOptions.RegionsPerServer), e.ParamName);
    }

    [Fact]
    public async Task AnOperationWithACancelledTokenIsNotSent()
    {
        await WithClient("tcp", Options(1, name: "cancelled before"), TimeSpan.FromSeconds(30), "cancelled token", async client =>
        {
            using var cts = new CancellationTokenSource();
            cts.Cancel();
            var buffer = new byte[8];
            await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await client.ReadAsync(0, buffer, cts.Token));
            await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await client.WriteAsync(0, buffer, cts.Token));
            Assert.Equal(0, client.Outstanding);
        });
    }

    [Fact]
    public async Task CancellingAReadInFlightReturnsAtOnceAndItCompletesWhenTheServerAnswers()
    {
        using var server = ServerProcess.Start("tcp");
        await WithTimeout(TimeSpan.FromSeconds(60), "cancel in flight", async () =>
        {
            var options = Options(1, CacheConfig.LowLatency, "cancel in flight");
            options.OperationTimeout = TimeSpan.FromSeconds(30);
            await using var client = await RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, options);
            var data = Enumerable.Range(0, 4096).Select(i => (byte)i).ToArray();
            await client.WriteAsync(0, data);

            server.Pause();
            try
            {
                var buffer = new byte[4096];
                using var cts = new CancellationTokenSource(TimeSpan.FromMilliseconds(100));
                var watch = Stopwatch.StartNew();
                var e = await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await client.ReadAsync(0, buffer, cts.Token));
                Assert.True(watch.Elapsed < TimeSpan.FromSeconds(2), $"the cancelled read returned after {watch.Elapsed.TotalMilliseconds:F0} ms");
                Assert.Equal(cts.Token, e.CancellationToken);
                Assert.Contains("may still complete", e.Message, StringComparison.Ordinal);
                Assert.Equal(1, client.Outstanding);  // still in flight, its buffer pinned
            }
            finally
            {
                server.Resume();
            }
            var settle = Stopwatch.StartNew();
            while (client.Outstanding != 0 && settle.Elapsed < TimeSpan.FromSeconds(20))
                await Task.Delay(10);
            Assert.Equal(0, client.Outstanding);

            // The operation went back to the pool once its completion came: the lane goes on working.
            var check = new byte[4096];
            for (int i = 0; i < 100; i++)
            {
                await client.ReadAsync(0, check, CancellationToken.None);
                Assert.Equal(data, check);
            }
        });
    }

    [Theory]
    [InlineData("tcp")]
    [InlineData("shm")]
    public async Task OperationsCancelledAtRandomNeverCorruptOthers(string transport)
    {
        await WithClient(transport, Options(4, name: $"random cancels {transport}"), TimeSpan.FromSeconds(90), "random cancels", async client =>
        {
            var rng = new Random(1234);
            const int Slot = 256;
            int slots = (int)(client.Capacity / Slot);
            var expected = new byte[slots][];
            for (int s = 0; s < slots; s += 97)
            {
                expected[s] = new byte[Slot];
                rng.NextBytes(expected[s]);
                await client.WriteAsync((long)s * Slot, expected[s]);
            }
            int cancelled = 0, finished = 0;
            var tasks = Enumerable.Range(0, 4).Select(worker => Task.Run(async () =>
            {
                var r = new Random(worker);
                var buffer = new byte[Slot];
                for (int i = 0; i < 3000; i++)
                {
                    int s = r.Next(slots / 97) * 97;
                    using var cts = new CancellationTokenSource();
                    var read = client.ReadAsync((long)s * Slot, buffer, cts.Token);
                    if (r.Next(3) == 0)
                        cts.Cancel();
                    try
                    {
                        await read;
                        Interlocked.Increment(ref finished);
                        Assert.Equal(expected[s], buffer);
                    }
                    catch (OperationCanceledException)
                    {
                        Interlocked.Increment(ref cancelled);
                        buffer = new byte[Slot];  // the cancelled read may still write into the old one
                    }
                }
            })).ToArray();
            await Task.WhenAll(tasks);
            Assert.Equal(4 * 3000, cancelled + finished);
            Assert.True(finished > 0);
            var settle = Stopwatch.StartNew();
            while (client.Outstanding != 0 && settle.Elapsed < TimeSpan.FromSeconds(20))
                await Task.Delay(10);
            Assert.Equal(0, client.Outstanding);
        });
    }
}

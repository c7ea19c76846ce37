using System;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>The changes of a cache that go over the network are async and take a token that stops the wait.</summary>
public sealed class AsyncChangeTests
{
    [Fact]
    public async Task CancellingAGrowStopsTheWaitTheCacheStaysWholeAndDisposeWaitsForTheConnect()
    {
        using var server = StartTcpServer();
        // A peer that accepts (the kernel's backlog) and never answers: the grow's connect waits for its timeout.
        using var silent = new TcpListener(IPAddress.Loopback, 0);
        silent.Start();
        string mute = $"tcp:127.0.0.1:{((IPEndPoint)silent.LocalEndpoint).Port}";
        var options = Options(1, name: "cancelled grow");
        options.ConnectTimeout = TimeSpan.FromSeconds(3);
        var client = await RemoteCacheClient.OpenAsync(server.Endpoints, options);
        long capacity = client.Capacity;
        using var cancel = new CancellationTokenSource(TimeSpan.FromMilliseconds(200));
        var clock = Stopwatch.StartNew();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => client.GrowAsync(new[] { mute }, cancellationToken: cancel.Token));
        Assert.True(clock.Elapsed < TimeSpan.FromSeconds(2), $"the cancelled grow returned after {clock.Elapsed}");
        Assert.Equal(capacity, client.Capacity);
        await client.WriteAsync(0, new byte[] { 7 });  // the cache serves meanwhile

        // Disposing waits for the connect still under way (it times out), then closes: nothing is left half-made.
        await DisposeWithTimeout(client);
        Assert.True(clock.Elapsed >= TimeSpan.FromSeconds(2.5), $"dispose returned after {clock.Elapsed}, before the grow's connect ended");
        Assert.Throws<ObjectDisposedException>(() => { _ = client.GrowAsync(new[] { mute }); });
    }

    [Fact]
    public async Task ACancelledTokenStartsNothing()
    {
        using var server = StartTcpServer();
        await using var client = await RemoteCacheClient.OpenAsync(server.Endpoints, Options(1, name: "cancelled before"));
        using var cancel = new CancellationTokenSource();
        cancel.Cancel();
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => client.ReconfigureAsync(CacheConfig.LowLatency, cancel.Token));
        await Assert.ThrowsAnyAsync<OperationCanceledException>(() => client.ShrinkAsync(1, cancel.Token));
        Assert.Equal(CacheConfig.HighThroughput, client.Config);
    }
}

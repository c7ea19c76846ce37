using System;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Admin;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// Failure detection needs more than one missed probe, and a server declared failed never serves its caches again: a
/// local one is stopped, a static one drops them when it answers again; a cache deallocated while its server was away is
/// dropped there when it comes back.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class FencingTests
{
    private static AllocateRequest Request(long bytes) => new()
    {
        Capacity = (ulong)bytes, Transport = "tcp", RecordSize = 8,
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    private static async Task<V1.Server> ServerAsync(TestManager manager, string serverId) =>
        (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers.Single(s => s.ServerId == serverId);

    private static async Task<T> EventuallyAsync<T>(Func<Task<T?>> probe, TimeSpan within, string what) where T : class
    {
        var clock = Stopwatch.StartNew();
        while (true)
        {
            if (await probe() is { } done)
                return done;
            Assert.True(clock.Elapsed < within, $"not {what} within {within.TotalSeconds} s");
            await Task.Delay(100);
        }
    }

    [Fact]
    public async Task AServerStoppedForLessThanTheFailureTimeoutIsNotFailed()
    {
        await using var manager = new TestManager(warm: 0, failureTimeout: TimeSpan.FromSeconds(4));
        await manager.StartAsync();
        var cache = (await manager.Tenant(AliceKey).AllocateAsync(Request(64 * MiB))).Cache;
        string id = cache.Servers[0].ServerId;
        int pid = ProcessOf(id) ?? throw new InvalidOperationException("no process");
        // 1.5 s: every probe of a round (two, of 0.5 s each) and then some go unanswered; before, one such round failed it.
        Signal(pid, "STOP");
        try
        {
            await Task.Delay(1500);
        }
        finally
        {
            Signal(pid, "CONT");
        }
        await Task.Delay(TimeSpan.FromSeconds(4));
        Assert.Equal(ServerState.Ready, (await ServerAsync(manager, id)).State);
        await using var client = await OpenAsync(cache);
        await client.WriteAsync(0, new byte[] { 7 });
    }

    [Fact]
    public async Task ALocalServerDeclaredFailedIsStoppedAndServesNothingAfter()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(64 * MiB))).Cache;
        string id = cache.Servers[0].ServerId;
        await using var client = await OpenAsync(cache);
        await client.WriteAsync(0, new byte[] { 7 });
        int pid = ProcessOf(id) ?? throw new InvalidOperationException("no process");
        Signal(pid, "STOP");
        try
        {
            await EventuallyAsync(async () => (await ServerAsync(manager, id)).State == ServerState.Failed ? "" : null, TimeSpan.FromSeconds(15), "failed");
            await EventuallyAsync(() => Task.FromResult(ProcessOf(id) is null ? "" : null), TimeSpan.FromSeconds(5), "stopped");
        }
        finally
        {
            if (ProcessOf(id) is { } still)
                Signal(still, "CONT");
        }
        var e = await Assert.ThrowsAsync<RemoteCacheException>(() => client.ReadAsync(0, new byte[1]).AsTask());
        Assert.NotEqual(RemoteCacheStatus.Ok, e.Status);
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
        Assert.DoesNotContain((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers, s => s.ServerId == id);
    }

    [Fact]
    public async Task AStaticServerThatComesBackDropsTheCachesItWasFailedForAndThoseDeallocatedMeanwhile()
    {
        await using var manager = new TestManager(allocator: "static");
        await manager.StartAsync();
        await using var server = await StaticServer.StartAsync(manager);
        var add = new AddServerRequest { VmType = "small" };
        add.Endpoints.Add("tcp", server.Endpoint);
        await manager.Operator().AddServerAsync(add);
        var alice = manager.Tenant(AliceKey);

        // Failed while it was away, then back: it holds the cache no more, and its idle client's next call fails.
        var first = (await alice.AllocateAsync(Request(64 * MiB))).Cache;
        await using (var client = await OpenAsync(first))
        {
            await client.WriteAsync(0, new byte[] { 1 });
            server.Signal("STOP");
            try
            {
                await EventuallyAsync(async () => (await ServerAsync(manager, server.Id)).State == ServerState.Failed ? "" : null, TimeSpan.FromSeconds(15), "failed");
            }
            finally
            {
                server.Signal("CONT");
            }
            await EventuallyAsync(async () => await server.CacheCountAsync(manager) == 0 ? "" : null, TimeSpan.FromSeconds(10), "fenced");
            var e = await Assert.ThrowsAsync<RemoteCacheException>(() => client.ReadAsync(0, new byte[1]).AsTask());
            Assert.Equal(RemoteCacheStatus.Expired, e.Status);
            Assert.Equal(ServerState.Failed, (await ServerAsync(manager, server.Id)).State);
        }
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = first.CacheId });
        await EventuallyAsync(async () => (await ServerAsync(manager, server.Id)).State == ServerState.Ready ? "" : null, TimeSpan.FromSeconds(10), "ready again");

        // Deallocated while it was unreachable (not yet failed): dropped when it answers again.
        var second = (await alice.AllocateAsync(Request(64 * MiB))).Cache;
        await using (var client = await OpenAsync(second))
        {
            await client.WriteAsync(0, new byte[] { 2 });
            server.Signal("STOP");
            try
            {
                await alice.DeallocateAsync(new DeallocateRequest { CacheId = second.CacheId });
            }
            finally
            {
                server.Signal("CONT");
            }
            await EventuallyAsync(async () => await server.CacheCountAsync(manager) == 0 ? "" : null, TimeSpan.FromSeconds(10), "fenced");
            var e = await Assert.ThrowsAsync<RemoteCacheException>(() => client.ReadAsync(0, new byte[1]).AsTask());
            Assert.Equal(RemoteCacheStatus.Expired, e.Status);
        }
    }

    /// <summary>A remotecache-server process of the test's own (a static pool's server), which it can stop and continue.</summary>
    internal sealed class StaticServer : IAsyncDisposable
    {
        private readonly Process _process;

        private StaticServer(Process process, string id, string endpoint)
        {
            _process = process;
            Id = id;
            Endpoint = endpoint;
        }

        public string Id { get; }

        public string Endpoint { get; }

        public static async Task<StaticServer> StartAsync(TestManager manager)
        {
            string key = Path.Combine(manager.StateDirectory, "admission.key");
            string id = "static-" + Guid.NewGuid().ToString("N")[..8];
            var start = new ProcessStartInfo(RemoteCacheServer.ExecutablePath) { RedirectStandardOutput = true, RedirectStandardError = true };
            foreach (string a in new[] { "--listen", "tcp:127.0.0.1:0", "--memory-limit", (256 * MiB).ToString(), "--region-size", (64 * MiB).ToString(),
                                         "--threads", "1", "--admission-key", key, "--server-id", id })
                start.ArgumentList.Add(a);
            var process = Process.Start(start)!;
            using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
            string? endpoint = null;
            while (await process.StandardOutput.ReadLineAsync(timeout.Token) is { } line && line != "ready")
                if (line.StartsWith("listening tcp:", StringComparison.Ordinal))
                    endpoint = line["listening ".Length..];
            // Drained from now on: a server whose log pipe fills up would block.
            _ = process.StandardOutput.ReadToEndAsync();
            _ = process.StandardError.ReadToEndAsync();
            return new StaticServer(process, id, endpoint ?? throw new InvalidOperationException("the server did not say where it listens"));
        }

        public void Signal(string signal) => TestManager.Signal(_process.Id, signal);

        public async Task<System.Collections.Generic.IReadOnlyList<ServerCacheInfo>> CachesAsync(TestManager manager)
        {
            await using var admin = await CacheServerAdmin.ConnectAsync(Endpoint, manager.AdmissionKey, TimeSpan.FromSeconds(2), CancellationToken.None);
            return await admin.ListCachesAsync(CancellationToken.None);
        }

        /// <summary>
        /// How many caches the server holds, or null while it cannot say: just continued, it works through the
        /// connections that queued while it was stopped (the manager's probes among them), and may drop an admin
        /// connection in its handshake meanwhile.
        /// </summary>
        public async Task<int?> CacheCountAsync(TestManager manager)
        {
            try
            {
                return (await CachesAsync(manager)).Count;
            }
            catch (RemoteCacheException e) when (e.Status is RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout or RemoteCacheStatus.Limit)
            {
                return null;
            }
        }

        public async ValueTask DisposeAsync()
        {
            Signal("CONT");
            _process.Kill();
            await _process.WaitForExitAsync();
            _process.Dispose();
        }
    }
}

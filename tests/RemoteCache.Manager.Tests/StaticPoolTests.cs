using System;
using System.Linq;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>The static pool: servers an operator runs, added, drained and removed through ServerPool.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class StaticPoolTests
{
    private static AllocateRequest Request(long bytes) => new()
    {
        Capacity = (ulong)bytes, Transport = "tcp", RecordSize = 8,
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    [Fact]
    public async Task AnOperatorsServerIsAddedCheckedRentedAndFreed()
    {
        await using var manager = new TestManager(allocator: "static");
        await manager.StartAsync();
        var ops = manager.Operator();
        using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64 * MiB, MemoryLimit = 256 * MiB, MaxThreads = 1, AdmissionKey = manager.AdmissionKey,
        });
        var add = new AddServerRequest { VmType = "small" };
        add.Endpoints.Add("tcp", server.Endpoints[0]);

        // Checked before it is taken: a type it is too small for, and a type that does not exist, are refused.
        var tooSmall = await Assert.ThrowsAsync<RpcException>(() => ops.AddServerAsync(new AddServerRequest(add) { VmType = "medium" }).ResponseAsync);
        Assert.Equal(StatusCode.FailedPrecondition, tooSmall.StatusCode);
        Assert.Contains("--memory-limit", tooSmall.Status.Detail);
        var unknown = await Assert.ThrowsAsync<RpcException>(() => ops.AddServerAsync(new AddServerRequest(add) { VmType = "huge" }).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, unknown.StatusCode);

        var added = await ops.AddServerAsync(add);
        Assert.Equal(server.ServerId, added.ServerId);
        Assert.Equal(ServerState.Ready, added.State);
        Assert.Equal("static", added.Allocator);
        var twice = await Assert.ThrowsAsync<RpcException>(() => ops.AddServerAsync(add).ResponseAsync);
        Assert.Equal(StatusCode.AlreadyExists, twice.StatusCode);

        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(128 * MiB))).Cache;
        Assert.Equal(server.ServerId, cache.Servers.Single().ServerId);
        await using (var client = await OpenAsync(cache))
        {
            var data = new byte[] { 1, 2, 3, 4, 5, 6, 7, 8 };
            await client.WriteAsync(100 * MiB, data);
            var back = new byte[8];
            await client.ReadAsync(100 * MiB, back);
            Assert.Equal(data, back);
            Assert.Equal(128 * MiB, server.MemoryInUse);
            // The pool's only server is taken: the next cache does not fit.
            var full = await Assert.ThrowsAsync<RpcException>(() => alice.AllocateAsync(Request(64 * MiB)).ResponseAsync);
            Assert.Equal(StatusCode.ResourceExhausted, full.StatusCode);
            var busy = await Assert.ThrowsAsync<RpcException>(() => ops.RemoveServerAsync(new RemoveServerRequest { ServerId = server.ServerId }).ResponseAsync);
            Assert.Equal(StatusCode.FailedPrecondition, busy.StatusCode);
            await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
        }
        await WaitFor(() => server.MemoryInUse == 0);

        // Drained: it keeps what it has and takes nothing new.
        Assert.Equal(ServerState.Draining, (await ops.DrainServerAsync(new DrainServerRequest { ServerId = server.ServerId })).State);
        var drained = await Assert.ThrowsAsync<RpcException>(() => alice.AllocateAsync(Request(64 * MiB)).ResponseAsync);
        Assert.Equal(StatusCode.ResourceExhausted, drained.StatusCode);
        await ops.RemoveServerAsync(new RemoveServerRequest { ServerId = server.ServerId });
        Assert.Empty((await ops.ListServersAsync(new ListServersRequest())).Servers);
    }

    [Fact]
    public async Task ReallocateChangesTheConfigurationAndGrowsOverMoreServers()
    {
        await using var manager = new TestManager(allocator: "local", warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var cache = (await alice.AllocateAsync(Request(128 * MiB))).Cache;
        Assert.Single(cache.Servers);

        // Ten times the throughput: a new configuration (b = 2, q = 3, interpolated, in the test model) on the same servers.
        var tighter = await alice.ReallocateAsync(new ReallocateRequest
        {
            CacheId = cache.CacheId, Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(20)), Throughput = 1e6 },
        });
        Assert.True(tighter.ConfigChanged);
        Assert.Equal(new V1.CacheConfig { ClientThreads = 0, ServerThreads = 1, BatchSize = 2, QueueDepth = 3 }, tighter.Cache.Config);
        Assert.Equal(cache.Servers.Single().ServerId, tighter.Cache.Servers.Single().ServerId);

        // Twice the capacity: one more server at the same share, the first one keeping its addresses.
        var grown = await alice.ReallocateAsync(new ReallocateRequest { CacheId = cache.CacheId, Capacity = 2 * cache.Capacity });
        Assert.Equal(2, grown.Cache.Servers.Count);
        Assert.Equal(cache.Servers[0].ServerId, grown.Cache.Servers[0].ServerId);
        Assert.Equal(grown.Cache.Servers[1].ServerId, grown.Added.Single().ServerId);
        Assert.Equal(2 * cache.Capacity, grown.Cache.Capacity);
        await using (var client = await OpenAsync(grown.Cache))
        {
            await client.WriteAsync((long)grown.Cache.Capacity - 8, new byte[8]);
        }
        var shrunk = await alice.ReallocateAsync(new ReallocateRequest { CacheId = cache.CacheId, Capacity = cache.Capacity });
        Assert.Equal(grown.Cache.Servers[1].ServerId, shrunk.Removed.Single().ServerId);
        Assert.Single(shrunk.Cache.Servers);
    }

    private static async Task WaitFor(Func<bool> condition)
    {
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(5);
        while (!condition() && DateTime.UtcNow < deadline)
            await Task.Delay(20);
        Assert.True(condition());
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Grpc.AspNetCore.Server;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Microsoft.Extensions.DependencyInjection;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.ManagedClientKit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>AllocateRequest.request_id: a retried Allocate gets the cache its first attempt placed, never a second one.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class IdempotencyTests
{
    private static AllocateRequest Allocate(string requestId, long bytes = 64 * MiB, string name = "retried") => new()
    {
        Capacity = (ulong)bytes, Transport = "tcp", Name = name, RequestId = requestId,
    };

    private static async Task<int> RentedAsync(TestManager manager) =>
        (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers.Count(s => s.CacheId != 0);

    [Fact]
    public async Task TheSameRequestIdReturnsTheSameCacheWhileItLivesAndOnlyForItsTenant()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);

        var first = await alice.AllocateAsync(Allocate("create-1"));
        var again = await alice.AllocateAsync(Allocate("create-1"));
        Assert.Equal(first.Cache.CacheId, again.Cache.CacheId);
        Assert.Equal(first.EventSequence, again.EventSequence);
        Assert.Equal(first.Cache.Token, again.Cache.Token);
        Assert.Equal(first.Cache.Servers.Select(s => (s.ServerId, s.Endpoint)), again.Cache.Servers.Select(s => (s.ServerId, s.Endpoint)));
        Assert.Single((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
        Assert.Equal(1, await RentedAsync(manager));

        // Other parameters under the same request id: refused, naming what differs; nothing is placed.
        var bigger = await Assert.ThrowsAsync<RpcException>(() => alice.AllocateAsync(Allocate("create-1", bytes: 128 * MiB)).ResponseAsync);
        Assert.Equal(StatusCode.AlreadyExists, bigger.StatusCode);
        Assert.Contains("capacity", bigger.Status.Detail);
        Assert.Contains($"cache {first.Cache.CacheId}", bigger.Status.Detail);
        var renamed = await Assert.ThrowsAsync<RpcException>(() => alice.AllocateAsync(Allocate("create-1", name: "other")).ResponseAsync);
        Assert.Equal(StatusCode.AlreadyExists, renamed.StatusCode);
        Assert.Contains("name", renamed.Status.Detail);
        Assert.Equal(1, await RentedAsync(manager));

        // Another tenant's same request id is unrelated: its own cache, and no word of alice's.
        var bobs = await manager.Tenant(BobKey).AllocateAsync(Allocate("create-1", bytes: 128 * MiB));
        Assert.NotEqual(first.Cache.CacheId, bobs.Cache.CacheId);
        Assert.Equal("bob", bobs.Cache.Tenant);

        // Too long an id is refused, quoting only a prefix of it.
        string tooLong = new('x', ContractLimits.MaxRequestIdLength + 1);
        var invalid = await Assert.ThrowsAsync<RpcException>(() => alice.AllocateAsync(Allocate(tooLong)).ResponseAsync);
        Assert.Equal(StatusCode.InvalidArgument, invalid.StatusCode);
        Assert.DoesNotContain(tooLong, invalid.Status.Detail);
        Assert.NotNull(await alice.AllocateAsync(Allocate(new string('y', ContractLimits.MaxRequestIdLength))));

        // The request id is durable: a restarted manager answers the retry with the same cache.
        await manager.StopAsync();
        await manager.StartAsync();
        alice = manager.Tenant(AliceKey);
        var afterRestart = await alice.AllocateAsync(Allocate("create-1"));
        Assert.Equal(first.Cache.CacheId, afterRestart.Cache.CacheId);
        Assert.Equal(first.EventSequence, afterRestart.EventSequence);

        // Once its cache is gone, the id places a new one.
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = first.Cache.CacheId });
        var fresh = await alice.AllocateAsync(Allocate("create-1"));
        Assert.NotEqual(first.Cache.CacheId, fresh.Cache.CacheId);
    }

    /// <summary>Lets the first Allocate place its cache, then answers it UNAVAILABLE: an answer lost on the way back.</summary>
    private sealed class LoseFirstAllocateAnswer : Interceptor
    {
        public List<(string RequestId, ulong CacheId)> Allocates { get; } = new();

        public override async Task<TResponse> UnaryServerHandler<TRequest, TResponse>(TRequest request, ServerCallContext context,
                                                                                       UnaryServerMethod<TRequest, TResponse> continuation)
        {
            var response = await continuation(request, context);
            if (request is AllocateRequest allocate && response is AllocateResponse allocated)
            {
                bool first;
                lock (Allocates)
                {
                    first = Allocates.Count == 0;
                    Allocates.Add((allocate.RequestId, allocated.Cache.CacheId));
                }
                if (first)
                    throw new RpcException(new Status(StatusCode.Unavailable, "the answer was lost (test)"));
            }
            return response;
        }
    }

    [Fact]
    public async Task TheManagedClientRetriesAnAllocateWhoseAnswerWasLostAndGetsTheCacheItPlaced()
    {
        var lose = new LoseFirstAllocateAnswer();
        await using var manager = new TestManager(warm: 0)
        {
            Configure = b =>
            {
                b.Services.AddSingleton(lose);
                b.Services.Configure<GrpcServiceOptions>(o => o.Interceptors.Add<LoseFirstAllocateAnswer>());
            },
        };
        await manager.StartAsync();
        await using var client = manager.ManagedClient();

        await using var cache = await client.CreateAsync(Request(64 * MiB));

        Assert.Equal(2, lose.Allocates.Count);
        Assert.NotEmpty(lose.Allocates[0].RequestId);
        Assert.Equal(lose.Allocates[0], lose.Allocates[1]);
        Assert.Equal(lose.Allocates[0].CacheId, cache.CacheId);
        Assert.Equal(cache.CacheId, Assert.Single(await client.ListAsync()).CacheId);
        await WriteAndVerifyAsync(cache.Client, 0, 4096);

        // Each Create is its own request: a second one places a second cache.
        await using var second = await client.CreateAsync(Request(64 * MiB));
        Assert.NotEqual(cache.CacheId, second.CacheId);
    }

    [Fact]
    public async Task TheManagedClientRetriesAnAllocateWhileTheManagerIsDown()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await using var client = manager.ManagedClient();
        await manager.StopAsync();

        var create = client.CreateAsync(Request(64 * MiB));
        await Task.Delay(TimeSpan.FromMilliseconds(700));
        Assert.False(create.IsCompleted, "Create gave up while the manager was down");
        await manager.StartAsync();
        await using var cache = await create;
        Assert.Equal(cache.CacheId, Assert.Single(await client.ListAsync()).CacheId);
    }
}

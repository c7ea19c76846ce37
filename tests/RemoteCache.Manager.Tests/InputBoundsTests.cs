using System;
using System.Linq;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Services;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// Every number, duration and string from the wire is bounded before the manager computes with it, zero means what the
/// contract says, and a refusal names the field and quotes at most a short prefix of what it refused.
/// </summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class InputBoundsTests
{
    private static AllocateRequest Request(ulong capacity) => new()
    {
        Capacity = capacity, Transport = "tcp", RecordSize = 8, Name = "bounds",
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    private static async Task<RpcException> RefusedAsync(StatusCode code, Func<Task> call)
    {
        var e = await Assert.ThrowsAsync<RpcException>(call);
        Assert.True(code == e.StatusCode, $"{e.StatusCode} instead of {code}: {e.Status.Detail}");
        return e;
    }

    // Quotes at most Input.QuotedChars characters of the refused string, and says how long it was.
    private static void QuotesAShortPrefix(RpcException e, int length)
    {
        Assert.True(e.Status.Detail.Length < 400, $"the refusal is {e.Status.Detail.Length} characters");
        Assert.Contains($"{length} characters", e.Status.Detail);
        Assert.DoesNotContain(new string('x', Input.QuotedChars + 1), e.Status.Detail);
    }

    [Theory]
    [InlineData(ulong.MaxValue)]
    [InlineData(ulong.MaxValue - (64UL << 20) + 1)]
    [InlineData(1UL << 63)]
    [InlineData((1UL << 50) + 1)]
    public async Task CapacitiesBeyondAnyCatalogueAreRefusedNeverWrapped(ulong capacity)
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var e = await RefusedAsync(StatusCode.InvalidArgument, () => alice.AllocateAsync(Request(capacity)).ResponseAsync);
        Assert.Contains($"capacity {capacity}", e.Status.Detail);
        Assert.Empty((await manager.Operator().ListServersAsync(new ListServersRequest())).Servers);

        var cache = (await alice.AllocateAsync(Request(64 * MiB))).Cache;
        await using var client = await OpenAsync(cache);
        var data = new byte[] { 4, 2 };
        await client.WriteAsync(1000, data);
        e = await RefusedAsync(StatusCode.InvalidArgument, () => alice.ReallocateAsync(new ReallocateRequest { CacheId = cache.CacheId, Capacity = capacity }).ResponseAsync);
        Assert.Contains($"capacity {capacity}", e.Status.Detail);

        // Nothing changed: the same servers, the same capacity, the data where it was.
        var after = await alice.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId });
        Assert.Equal(cache.Capacity, after.Capacity);
        Assert.Equal(cache.Servers.Select(s => s.ServerId), after.Servers.Select(s => s.ServerId));
        var back = new byte[2];
        await client.ReadAsync(1000, back);
        Assert.Equal(data, back);
    }

    [Fact]
    public async Task LongStringsAreRefusedAsInvalidArgumentsQuotingAShortPrefix()
    {
        await using var manager = new TestManager(warm: 0, allocator: "static");
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var ops = manager.Operator();
        string megabyte = new('x', 1 << 20), nineK = new('x', 9 * 1024);

        foreach (string s in new[] { megabyte, nineK })
        {
            var e = await RefusedAsync(StatusCode.InvalidArgument, () => alice.AllocateAsync(new AllocateRequest(Request(MiB)) { Transport = s }).ResponseAsync);
            Assert.Contains("AllocateRequest.transport", e.Status.Detail);
            QuotesAShortPrefix(e, s.Length);
            e = await RefusedAsync(StatusCode.InvalidArgument, () => ops.DrainServerAsync(new DrainServerRequest { ServerId = s }).ResponseAsync);
            Assert.Contains("DrainServerRequest.server_id", e.Status.Detail);
            QuotesAShortPrefix(e, s.Length);
            var add = new AddServerRequest { VmType = "small" };
            add.Endpoints.Add("tcp", s);
            e = await RefusedAsync(StatusCode.InvalidArgument, () => ops.AddServerAsync(add).ResponseAsync);
            QuotesAShortPrefix(e, s.Length);
        }
        var name = await RefusedAsync(StatusCode.InvalidArgument, () => alice.AllocateAsync(new AllocateRequest(Request(MiB)) { Name = new string('x', 201) }).ResponseAsync);
        Assert.Contains("200", name.Status.Detail);

        // Within the bounds, a string that names nothing known is still quoted briefly.
        var unknown = await RefusedAsync(StatusCode.NotFound, () => ops.DrainServerAsync(new DrainServerRequest { ServerId = new string('x', 200) }).ResponseAsync);
        QuotesAShortPrefix(unknown, 200);
        var lost = new ReplacementRequest { CacheId = 1, ServerId = "s", Mover = "m" };
        lost.LostRegions.AddRange(Enumerable.Range(0, 5000).Select(i => (uint)i));
        var many = await RefusedAsync(StatusCode.InvalidArgument, () => alice.CompleteReplacementAsync(lost).ResponseAsync);
        Assert.Contains("5000 elements", many.Status.Detail);
    }

    [Fact]
    public async Task AnOversizedAuthorizationHeaderIsUnauthenticatedNotAReset()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var e = await RefusedAsync(StatusCode.Unauthenticated, () => manager.Tenant(new string('k', 64 * 1024)).ListCachesAsync(new ListCachesRequest()).ResponseAsync);
        Assert.Contains("at most", e.Status.Detail);
        Assert.True(e.Status.Detail.Length < 400);
        // The connection is still good for the next call.
        Assert.Empty((await manager.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches);
    }

    [Fact]
    public async Task ZeroMeansTheDefaultWhereTheContractSaysSoAndSubTickDurationsKeepTheirValue()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);

        var zeroLease = (await alice.AllocateAsync(new AllocateRequest(Request(MiB)) { Lease = new Duration() })).Cache;
        Assert.Equal(manager.Options.DefaultLease, zeroLease.Lease.Length.ToTimeSpan());
        var renewed = await alice.RenewLeaseAsync(new RenewLeaseRequest { CacheId = zeroLease.CacheId, ExtendBy = new Duration() });
        Assert.True(renewed.Lease.Expires.ToDateTimeOffset() > DateTimeOffset.UtcNow + manager.Options.DefaultLease - TimeSpan.FromMinutes(1));

        // 50 ns is a bound no configuration meets, not "not positive".
        var fine = await RefusedAsync(StatusCode.FailedPrecondition, () => alice.AllocateAsync(new AllocateRequest(Request(MiB))
        {
            Slo = new V1.Slo { ReadLatency = new Duration { Nanos = 50 } },
        }).ResponseAsync);
        Assert.Contains("no configuration meets the SLO", fine.Status.Detail);
        var negative = await RefusedAsync(StatusCode.InvalidArgument, () => alice.AllocateAsync(new AllocateRequest(Request(MiB))
        {
            Slo = new V1.Slo { ReadLatency = new Duration { Nanos = -1 } },
        }).ResponseAsync);
        Assert.Contains("slo.read_latency -0.000000001s must be positive", negative.Status.Detail);
        var malformed = await RefusedAsync(StatusCode.InvalidArgument, () => alice.AllocateAsync(new AllocateRequest(Request(MiB))
        {
            Lease = new Duration { Seconds = 5, Nanos = -1 },
        }).ResponseAsync);
        Assert.Contains("lease is not a valid duration", malformed.Status.Detail);

        // A sequence beyond any the manager issues is refused, not read as "from the start".
        using var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = zeroLease.CacheId, FromSequence = 1UL << 63 });
        var e = await RefusedAsync(StatusCode.InvalidArgument, () => watch.ResponseStream.MoveNext());
        Assert.Contains("from_sequence", e.Status.Detail);
    }

    [Theory]
    [InlineData(0L, 0, "0s")]
    [InlineData(-1L, -5, "-1.000000005s")]
    [InlineData(0L, -1, "-0.000000001s")]
    [InlineData(3L, 500_000_000, "3.5s")]
    public void DurationsAreQuotedAsSent(long seconds, int nanos, string text) =>
        Assert.Equal(text, WireInput.Text(new Duration { Seconds = seconds, Nanos = nanos }));

    [Fact]
    public void SubTickDurationsRoundUpToTheNextTick()
    {
        Assert.Equal(TimeSpan.FromTicks(1), WireInput.Positive(new Duration { Nanos = 1 }, "d"));
        Assert.Equal(TimeSpan.FromTicks(2), WireInput.Positive(new Duration { Nanos = 101 }, "d"));
        Assert.Equal(TimeSpan.FromSeconds(2), WireInput.Positive(new Duration { Seconds = 2 }, "d"));
        Assert.Equal(TimeSpan.FromDays(3), WireInput.PositiveOr(null, "d", TimeSpan.FromDays(3)));
    }
}

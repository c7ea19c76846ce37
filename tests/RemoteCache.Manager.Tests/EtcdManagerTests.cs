using System;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>A manager whose state is on etcd (<c>--store etcd</c>): it serves, restarts and recovers as on SQLite.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class EtcdManagerTests : IClassFixture<EtcdFixture>
{
    private readonly EtcdFixture _fixture;

    public EtcdManagerTests(EtcdFixture fixture) => _fixture = fixture;

    private TestManager OnEtcd(string? prefix = null, TimeSpan? failureTimeout = null)
    {
        var manager = new TestManager(warm: 0, failureTimeout: failureTimeout);
        manager.Options.Store = ManagerOptions.EtcdStore;
        manager.Options.EtcdEndpoints = _fixture.Etcd.Endpoint;
        manager.Options.EtcdPrefix = prefix ?? $"/manager-{Guid.NewGuid():N}/";
        return manager;
    }

    private static AllocateRequest Small(string name) => new()
    {
        Capacity = (ulong)(64 * MiB), Transport = "tcp", RecordSize = 8, Name = name,
        Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
    };

    [Fact]
    public async Task AWriteBuiltOnStaleStateIsRefusedAbortedAndTheManagerTakesTheStoresStateAgain()
    {
        // Only the leader writes, so its view goes stale only if something else writes the prefix (an operator's tool):
        // here the test, which bumps the sequence as a change would.
        string prefix = $"/stale-{Guid.NewGuid():N}/";
        await using var manager = OnEtcd(prefix);
        await manager.StartAsync();
        var placed = (await manager.Tenant(AliceKey).AllocateAsync(Small("first"))).Cache;
        using (var client = new dotnet_etcd.EtcdClient(_fixture.Etcd.Endpoint))
        {
            long sequence = long.Parse((await client.GetValAsync(prefix + "meta/sequence")), System.Globalization.CultureInfo.InvariantCulture);
            await client.PutAsync(prefix + "meta/sequence", (sequence + 1).ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        var refused = await Assert.ThrowsAsync<Grpc.Core.RpcException>(() => manager.Tenant(AliceKey).AllocateAsync(Small("stale")).ResponseAsync);
        Assert.Equal(Grpc.Core.StatusCode.Aborted, refused.StatusCode);
        Assert.Contains("another manager", refused.Status.Detail);
        // Nothing of the refused Allocate is in the store, the manager took the store's state again, and its next change goes through.
        Assert.Equal(placed.CacheId, Assert.Single((await manager.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches).CacheId);
        var renewed = await manager.Tenant(AliceKey).RenewLeaseAsync(new RenewLeaseRequest { CacheId = placed.CacheId });
        Assert.True(renewed.Lease.Expires.ToDateTimeOffset() > placed.Lease.Expires.ToDateTimeOffset());
    }

    [Fact]
    public async Task AllocatesAndAfterARestartFindsItsCachesServersAndEventsOnEtcd()
    {
        await using var manager = OnEtcd();
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(new AllocateRequest
        {
            Capacity = (ulong)(64 * MiB), Transport = "tcp", RecordSize = 8, Name = "on-etcd",
            Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
        });
        var data = new byte[] { 3, 1, 4, 1, 5 };
        await using (var client = await OpenAsync(allocated.Cache))
            await client.WriteAsync(4096, data);

        await manager.StopAsync();
        Assert.False(File.Exists(Path.Combine(manager.StateDirectory, "manager.db")));  // the state is on etcd only
        await manager.StartAsync();
        alice = manager.Tenant(AliceKey);
        var cache = Assert.Single((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
        Assert.Equal(allocated.Cache.CacheId, cache.CacheId);
        Assert.Equal(allocated.Cache.Servers.Single().ServerId, (await manager.Operator().ListServersAsync(new ListServersRequest())).Servers.Single().ServerId);
        using var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = 1 });
        Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
        Assert.Equal(allocated.EventSequence, watch.ResponseStream.Current.Sequence);
        await using (var client = await OpenAsync(cache))
        {
            var back = new byte[data.Length];
            await client.ReadAsync(4096, back);
            Assert.Equal(data, back);
        }
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
    }

    [Fact]
    public async Task AManagerWithAnotherAdmissionKeyOrCatalogueDoesNotStartOnAClaimedPrefix()
    {
        string prefix = $"/claimed-{Guid.NewGuid():N}/";
        await using var first = OnEtcd(prefix);
        await first.StartAsync();

        await using var otherKey = OnEtcd(prefix);  // its own admission key
        var e = await Assert.ThrowsAsync<StartupException>(() => otherKey.StartAsync());
        Assert.Contains("another admission key", e.Message);
        Assert.DoesNotContain("another catalogue", e.Message);

        await using var otherCatalogue = OnEtcd(prefix);
        otherCatalogue.Options.AdmissionKey = Path.Combine(first.StateDirectory, "admission.key");
        var cheaper = new Catalogue.VmCatalogue { RegionBytes = TestManager.Catalogue.RegionBytes, VmTypes = new[] { new Catalogue.VmType("small", 256 * MiB, 1, 0.01, null, 4, 0) } };
        await File.WriteAllTextAsync(otherCatalogue.Options.Catalogue!, cheaper.ToJson());
        e = await Assert.ThrowsAsync<StartupException>(() => otherCatalogue.StartAsync());
        Assert.Contains("another catalogue", e.Message);
        Assert.DoesNotContain("another admission key", e.Message);

        // The same key and catalogue pass the claim; a second manager then joins as a replica, which the first one's local
        // allocator (a single-manager mode) does not allow (LeadershipTests start replicas with static pools).
        await using var same = OnEtcd(prefix);
        same.Options.AdmissionKey = Path.Combine(first.StateDirectory, "admission.key");
        e = await Assert.ThrowsAsync<StartupException>(() => same.StartAsync());
        Assert.Contains($"the manager at {first.Address!.ToString().TrimEnd('/')} leads on this etcd prefix with the local allocator", e.Message);
    }

    [Fact]
    public async Task AManagerWhoseEtcdDoesNotAnswerDoesNotStartAndSaysWhere()
    {
        await using var manager = new TestManager(warm: 0);
        manager.Options.Store = ManagerOptions.EtcdStore;
        manager.Options.EtcdEndpoints = "http://127.0.0.1:9";
        var e = await Assert.ThrowsAsync<StartupException>(() => manager.StartAsync());
        Assert.Contains("http://127.0.0.1:9", e.Message);
    }

    [Fact]
    public async Task MigratesASqliteStateIntoEtcdAndAManagerGoesOnFromIt()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        var alice = manager.Tenant(AliceKey);
        var allocated = await alice.AllocateAsync(new AllocateRequest
        {
            Capacity = (ulong)(64 * MiB), Transport = "tcp", RecordSize = 8, Name = "migrated",
            Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
        });
        var renewed = await alice.RenewLeaseAsync(new RenewLeaseRequest { CacheId = allocated.Cache.CacheId });
        await manager.StopAsync();

        string prefix = $"/migrated-{Guid.NewGuid():N}/";
        var (caches, servers, events) = await Program.MigrateAsync(manager.StateDirectory, new Store.EtcdConnection(_fixture.Etcd.Endpoint), prefix, CancellationToken.None);
        Assert.Equal((1, 1, 2), (caches, servers, events));
        // Into an empty prefix only.
        var again = await Assert.ThrowsAsync<StartupException>(() => Program.MigrateAsync(manager.StateDirectory, new Store.EtcdConnection(_fixture.Etcd.Endpoint), prefix, CancellationToken.None));
        Assert.Contains("already holds", again.Message);

        manager.Options.Store = ManagerOptions.EtcdStore;
        manager.Options.EtcdEndpoints = _fixture.Etcd.Endpoint;
        manager.Options.EtcdPrefix = prefix;
        await manager.StartAsync();
        alice = manager.Tenant(AliceKey);
        var cache = Assert.Single((await alice.ListCachesAsync(new ListCachesRequest())).Caches);
        Assert.Equal(allocated.Cache.CacheId, cache.CacheId);
        Assert.Equal(allocated.Cache.Token, cache.Token);
        // The event log came along, and its sequence goes on where it stopped.
        using (var watch = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = 1 }))
        {
            Assert.True(await watch.ResponseStream.MoveNext(CancellationToken.None));
            Assert.Equal(allocated.EventSequence, watch.ResponseStream.Current.Sequence);
        }
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
        using var deleted = alice.WatchEvents(new WatchEventsRequest { CacheId = cache.CacheId, FromSequence = allocated.EventSequence + 1 });
        var sequences = new System.Collections.Generic.List<ulong>();
        while (await deleted.ResponseStream.MoveNext(CancellationToken.None))
            sequences.Add(deleted.ResponseStream.Current.Sequence);
        Assert.Equal(2, sequences.Count);  // LeaseRenewed (migrated), then CacheDeleted (new, after it)
        Assert.True(sequences[1] > sequences[0]);
    }

    [Fact]
    public async Task AnImportThatDidNotFinishStopsManagersUntilItIsRunAgain()
    {
        await using var manager = new TestManager(warm: 0);
        await manager.StartAsync();
        await manager.StopAsync();
        string prefix = $"/interrupted-{Guid.NewGuid():N}/";
        using (var client = new dotnet_etcd.EtcdClient(_fixture.Etcd.Endpoint))
        {
            await client.PutAsync(prefix + "meta/schema", "1");
            await client.PutAsync(prefix + "meta/migrating", "then the migrating process died");
            await client.PutAsync(prefix + "caches/00000000000000aa", "{}");
        }
        manager.Options.Store = ManagerOptions.EtcdStore;
        manager.Options.EtcdEndpoints = _fixture.Etcd.Endpoint;
        manager.Options.EtcdPrefix = prefix;
        var refused = await Assert.ThrowsAsync<StartupException>(() => manager.StartAsync());
        Assert.Contains("did not finish", refused.Message);

        await Program.MigrateAsync(manager.StateDirectory, new Store.EtcdConnection(_fixture.Etcd.Endpoint), prefix, CancellationToken.None);
        await manager.StartAsync();
        Assert.Empty((await manager.Tenant(AliceKey).ListCachesAsync(new ListCachesRequest())).Caches);  // the half-written record went
    }
}

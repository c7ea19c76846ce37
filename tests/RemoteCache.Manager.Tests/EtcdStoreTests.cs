using System;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using dotnet_etcd;
using RemoteCache.Manager.Store;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>One etcd member for a test class (each test works under a prefix of its own).</summary>
public sealed class EtcdFixture : IAsyncLifetime
{
    public EtcdProcess Etcd { get; private set; } = null!;

    public async Task InitializeAsync() => Etcd = await EtcdProcess.StartAsync();

    public async Task DisposeAsync() => await Etcd.DisposeAsync();
}

/// <summary>The etcd store: the contract, optimistic concurrency, and its refusals.</summary>
public sealed class EtcdStoreTests : StoreContract, IClassFixture<EtcdFixture>
{
    private readonly EtcdFixture _fixture;
    private readonly string _prefix = $"/test-{Guid.NewGuid():N}/";

    public EtcdStoreTests(EtcdFixture fixture) => _fixture = fixture;

    protected override async Task<IManagerStore> OpenAsync() => await OpenEtcdAsync();

    private Task<EtcdManagerStore> OpenEtcdAsync() => EtcdManagerStore.OpenAsync(new EtcdConnection(_fixture.Etcd.Endpoint), _prefix, CancellationToken.None);

    [Fact]
    public async Task AFencedStoreCommitsOnlyWhileTheLeaderKeyIsTheOneItWasElectedWith()
    {
        await using var store = await OpenEtcdAsync();
        using var etcd = new dotnet_etcd.EtcdClient(_fixture.Etcd.Endpoint);
        StoreChange Put(ulong id)
        {
            var change = new StoreChange();
            change.PutCaches.Add(Cache(id, "a"));
            return change;
        }

        // Not elected: nothing commits.
        store.Fence(null);
        Assert.Contains("not the leader", (await Assert.ThrowsAsync<StoreFencedException>(() => store.ApplyAsync(Put(1), CancellationToken.None))).Message);
        // Elected with the key as it is: changes commit.
        await etcd.PutAsync(_prefix + "meta/leader", "{}");
        long elected = (await etcd.GetAsync(_prefix + "meta/leader")).Kvs[0].CreateRevision;
        store.Fence(elected);
        await store.ApplyAsync(Put(2), CancellationToken.None);
        // The key deleted and written again (another leader's): the same manager commits nothing, and says why.
        await etcd.DeleteAsync(_prefix + "meta/leader");
        await etcd.PutAsync(_prefix + "meta/leader", "{}");
        var e = await Assert.ThrowsAsync<StoreFencedException>(() => store.ApplyAsync(Put(3), CancellationToken.None));
        Assert.Contains("no longer the leader", e.Message);
        Assert.Equal(new ulong[] { 2 }, (await store.LoadAsync(CancellationToken.None)).Caches.Select(c => c.CacheId));
    }

    [Fact]
    public async Task AChangeBuiltOnStateAnotherWriterChangedIsRefusedNotMerged()
    {
        await using var first = await OpenEtcdAsync();
        await using var second = await OpenEtcdAsync();
        // Both have seen the same (empty) state; the second writes first.
        var theirs = new StoreChange();
        theirs.PutCaches.Add(Cache(2, "b"));
        theirs.Events.Add((2, "b", seq => Encoding.UTF8.GetBytes($"theirs {seq}")));
        await second.ApplyAsync(theirs, CancellationToken.None);
        var mine = new StoreChange();
        mine.PutCaches.Add(Cache(1, "a"));
        mine.Events.Add((1, "a", seq => Encoding.UTF8.GetBytes($"mine {seq}")));
        var e = await Assert.ThrowsAsync<StoreConflictException>(() => first.ApplyAsync(mine, CancellationToken.None));
        Assert.Contains("another manager", e.Message);

        // Only the other writer's change is there, with sequence 1; the refused one left nothing, and a retry once the
        // state is loaded again goes through with the next sequence.
        var snapshot = await first.LoadAsync(CancellationToken.None);
        Assert.Equal(2UL, Assert.Single(snapshot.Caches).CacheId);
        Assert.Equal(1, snapshot.LastSequence);
        Assert.Empty(await first.EventsAsync(1, 0, CancellationToken.None));
        Assert.Equal(2, (await first.ApplyAsync(mine, CancellationToken.None)).Single().Sequence);
    }

    [Fact]
    public async Task APrefixOfLayout1GetsItsLogIndexAndItsEventsAreKeptAWholeWindow()
    {
        await using (var store = await OpenEtcdAsync())
        {
            var change = new StoreChange { Time = DateTimeOffset.UnixEpoch };
            change.Events.Add((4, "a", _ => new byte[] { 1 }));
            await store.ApplyAsync(change, CancellationToken.None);
        }
        // Layout 1 had events and no log/ index.
        using (var client = new EtcdClient(_fixture.Etcd.Endpoint))
        {
            await client.DeleteRangeAsync(_prefix + "log/");
            await client.PutAsync(_prefix + "meta/schema", "1");
        }
        await using (var store = await OpenEtcdAsync())
        {
            await store.CompactEventsAsync(DateTimeOffset.UtcNow.AddMinutes(-1), 10, CancellationToken.None);
            Assert.Single(await store.EventsAsync(4, 1, CancellationToken.None));
            await store.CompactEventsAsync(DateTimeOffset.UtcNow.AddMinutes(1), 10, CancellationToken.None);
            Assert.Empty(await store.EventsAsync(4, 1, CancellationToken.None));
        }
        using (var client = new EtcdClient(_fixture.Etcd.Endpoint))
            Assert.Equal(EtcdManagerStore.SchemaVersion.ToString(System.Globalization.CultureInfo.InvariantCulture), await client.GetValAsync(_prefix + "meta/schema"));
    }

    [Fact]
    public async Task AnImportCarriesTheFloorsOver()
    {
        await using (var store = await EtcdManagerStore.OpenForImportAsync(new EtcdConnection(_fixture.Etcd.Endpoint), _prefix, CancellationToken.None))
        {
            var state = new StoreSnapshot(new[] { Cache(4, "a") }, Array.Empty<ServerRecord>(), 9);
            var events = new[] { new StoredEvent(9, 4, "a", new byte[] { 1 }) { Appended = DateTimeOffset.UtcNow } };
            await store.ImportAsync(state, events, new System.Collections.Generic.Dictionary<ulong, long> { [4] = 9 }, CancellationToken.None);
        }
        await using var opened = await OpenEtcdAsync();
        Assert.Equal(9, await opened.EventFloorAsync(4, CancellationToken.None));
        Assert.Single(await opened.EventsAsync(4, 9, CancellationToken.None));
    }

    [Fact]
    public async Task AnEtcdThatDoesNotAnswerIsRefusedNamingItsEndpoints()
    {
        const string nobody = "http://127.0.0.1:9";
        var e = await Assert.ThrowsAsync<StoreUnavailableException>(() => EtcdManagerStore.OpenAsync(new EtcdConnection(nobody), _prefix, CancellationToken.None));
        Assert.Contains(nobody, e.Message);
    }

    [Fact]
    public async Task AnotherLayoutVersionIsRefused()
    {
        using (var client = new EtcdClient(_fixture.Etcd.Endpoint))
            await client.PutAsync(_prefix + "meta/schema", "99");
        var e = await Assert.ThrowsAsync<InvalidOperationException>(() => OpenEtcdAsync());
        Assert.Contains("layout version 99", e.Message);
    }
}

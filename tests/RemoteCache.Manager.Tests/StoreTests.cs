using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Manager.Store;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>What every <see cref="IManagerStore"/> must do; each store's tests derive from it.</summary>
public abstract class StoreContract
{
    /// <summary>Opens the store under test: the same state each time within one test.</summary>
    protected abstract Task<IManagerStore> OpenAsync();

    internal static CacheRecord Cache(ulong id, string tenant) => new()
    {
        CacheId = id, Tenant = tenant, Name = "c" + id, Token = "t", RequestedBytes = 100, Slo = new SloRecord(10, null, 1e6),
        Config = new CacheConfig(0, 1, 8, 4), Transport = "tcp", RecordSize = 8, Servers = new[] { "s1", "s2" }, RegionsPerServer = 2,
        RegionBytes = 1 << 26, Created = DateTimeOffset.UnixEpoch, LeaseExpires = DateTimeOffset.UnixEpoch.AddHours(1), LeaseLength = TimeSpan.FromHours(1),
        Duration = TimeSpan.FromMinutes(5), PricePerHour = 0.5,
    };

    [Fact]
    public async Task JoinTokensAndJoinedServersSurviveReopeningAndGoWhenDeleted()
    {
        var token = new JoinTokenRecord("0123456789ab", new string('f', 64), "rack 12", DateTimeOffset.UnixEpoch, DateTimeOffset.UnixEpoch.AddDays(1)) { Joins = 2 };
        var joined = new ServerRecord("host-a.0011223344aa", new Dictionary<string, string>(), "small", false, "static")
        {
            Status = ServerStatus.Joining,
            Join = new JoinRecord("host-a", new Dictionary<string, string> { ["zone"] = "a" }, 4, 1L << 30, token.TokenId, DateTimeOffset.UnixEpoch),
        };
        await using (var store = await OpenAsync())
        {
            var change = new StoreChange();
            change.PutJoinTokens.Add(token);
            change.PutServers.Add(joined);
            await store.ApplyAsync(change, CancellationToken.None);
        }
        await using (var store = await OpenAsync())
        {
            Assert.Equal(token, Assert.Single(await store.JoinTokensAsync(CancellationToken.None)));
            var server = Assert.Single((await store.LoadAsync(CancellationToken.None)).Servers);
            Assert.Equal(ServerStatus.Joining, server.Status);
            Assert.Equal("a", server.Join!.Labels["zone"]);
            Assert.Equal(joined.Join with { Labels = server.Join.Labels }, server.Join);
            // Written then removed in one merged change: removed.
            var revoke = new StoreChange();
            revoke.PutJoinTokens.Add(token with { Revoked = DateTimeOffset.UnixEpoch.AddHours(1) });
            var forget = new StoreChange();
            forget.DeleteJoinTokens.Add(token.TokenId);
            await store.ApplyAsync(StoreChange.Merge(new[] { revoke, forget }), CancellationToken.None);
            Assert.Empty(await store.JoinTokensAsync(CancellationToken.None));
        }
    }

    [Fact]
    public async Task ChangesSurviveReopeningAndSequencesAreNeverReused()
    {
        var server = new ServerRecord("s1", new Dictionary<string, string> { ["tcp"] = "tcp:127.0.0.1:1" }, "local-small", true, "local") { CacheId = 5, ProcessId = 42 };
        await using (var store = await OpenAsync())
        {
            var change = new StoreChange();
            change.PutCaches.Add(Cache(5, "a") with
            {
                Replacements = new Dictionary<string, ReplacementRecord> { ["s2"] = new("s3", "mover") },
                Lineage = new Dictionary<string, LineageRecord> { ["s1"] = new("s0", new[] { 1 }) },
            });
            change.PutCaches.Add(Cache(6, "b"));
            change.PutServers.Add(server);
            change.Events.Add((5, "a", seq => Encoding.UTF8.GetBytes($"first {seq}")));
            change.Events.Add((6, "b", seq => Encoding.UTF8.GetBytes($"second {seq}")));
            var events = await store.ApplyAsync(change, CancellationToken.None);
            Assert.Equal(new long[] { 1, 2 }, events.Select(e => e.Sequence));
            var delete = new StoreChange();
            delete.DeleteCaches.Add(6);
            await store.ApplyAsync(delete, CancellationToken.None);
        }
        await using (var store = await OpenAsync())
        {
            var snapshot = await store.LoadAsync(CancellationToken.None);
            var cache = Assert.Single(snapshot.Caches);
            Assert.Equal(Cache(5, "a") with { Servers = cache.Servers, Replacements = cache.Replacements, Lineage = cache.Lineage }, cache);
            var lineage = Assert.Single(cache.Lineage, l => l.Key == "s1").Value;
            Assert.Equal("s0", lineage.Replaced);
            Assert.Equal(new[] { 1 }, lineage.LostRegions);
            Assert.Equal(new[] { "s1", "s2" }, cache.Servers);
            Assert.Equal(new ReplacementRecord("s3", "mover"), Assert.Single(cache.Replacements, r => r.Key == "s2").Value);
            var loaded = Assert.Single(snapshot.Servers);
            Assert.Equal(server.Endpoints, loaded.Endpoints);
            Assert.Equal(server with { Endpoints = loaded.Endpoints }, loaded);
            Assert.Equal(2, snapshot.LastSequence);
            var mine = await store.EventsAsync(5, 1, CancellationToken.None);
            Assert.Equal("first 1", Encoding.UTF8.GetString(Assert.Single(mine).Payload));
            Assert.Empty(await store.EventsAsync(5, 2, CancellationToken.None));
            var more = new StoreChange();
            more.Events.Add((5, "a", seq => Encoding.UTF8.GetBytes($"third {seq}")));
            Assert.Equal(3, (await store.ApplyAsync(more, CancellationToken.None)).Single().Sequence);
            Assert.True(await store.PingAsync(CancellationToken.None));
        }
    }

    [Fact]
    public async Task AFailedChangeWritesNothing()
    {
        await using var store = await OpenAsync();
        var change = new StoreChange();
        change.PutCaches.Add(Cache(1, "a"));
        change.Events.Add((1, "a", _ => throw new InvalidOperationException("payload failed")));
        await Assert.ThrowsAsync<InvalidOperationException>(() => store.ApplyAsync(change, CancellationToken.None));
        var snapshot = await store.LoadAsync(CancellationToken.None);
        Assert.Empty(snapshot.Caches);
        Assert.Empty(await store.EventsAsync(1, 1, CancellationToken.None));
    }

    private static readonly DateTimeOffset T0 = new(2026, 1, 1, 0, 0, 0, TimeSpan.Zero);

    // One change at `time`: an event for each cache named, in order, with the payload "<cache> <sequence>".
    private static async Task<List<long>> AppendAsync(IManagerStore store, DateTimeOffset time, params ulong[] caches)
    {
        var change = new StoreChange { Time = time };
        foreach (ulong cache in caches)
            change.Events.Add((cache, "a", seq => Encoding.UTF8.GetBytes($"{cache} {seq}")));
        return (await store.ApplyAsync(change, CancellationToken.None)).Select(e => e.Sequence).ToList();
    }

    private static async Task<long[]> SequencesAsync(IManagerStore store, ulong cache) =>
        (await store.EventsAsync(cache, 0, CancellationToken.None)).Select(e => e.Sequence).ToArray();

    [Fact]
    public async Task CompactionByAgeRaisesTheFloorsDurablyAndSequencesGoOn()
    {
        await using (var store = await OpenAsync())
        {
            var live = new StoreChange();
            live.PutCaches.Add(Cache(1, "a"));
            live.PutCaches.Add(Cache(3, "a"));
            await store.ApplyAsync(live, CancellationToken.None);
            Assert.Equal(new long[] { 1, 2, 3 }, await AppendAsync(store, T0, 1, 1, 2));            // old
            Assert.Equal(new long[] { 4, 5, 6 }, await AppendAsync(store, T0.AddMinutes(10), 1, 2, 3));  // young
            Assert.Equal(1, await store.EventFloorAsync(1, CancellationToken.None));

            var result = await store.CompactEventsAsync(T0.AddMinutes(5), 100, CancellationToken.None);
            Assert.Equal(3, result.Events);
            Assert.Equal(new long[] { 4 }, await SequencesAsync(store, 1));
            Assert.Equal(new long[] { 5 }, await SequencesAsync(store, 2));
            Assert.Equal(new long[] { 6 }, await SequencesAsync(store, 3));
            Assert.Equal(3, await store.EventFloorAsync(1, CancellationToken.None));
            Assert.Equal(4, await store.EventFloorAsync(2, CancellationToken.None));
            Assert.Equal(1, await store.EventFloorAsync(3, CancellationToken.None));  // nothing of it went

            // Again with the same bound: nothing more goes, no floor moves.
            Assert.Equal(0, (await store.CompactEventsAsync(T0.AddMinutes(5), 100, CancellationToken.None)).Events);
            Assert.Equal(3, await store.EventFloorAsync(1, CancellationToken.None));
        }
        await using (var store = await OpenAsync())
        {
            Assert.Equal(6, (await store.LoadAsync(CancellationToken.None)).LastSequence);
            Assert.Equal(3, await store.EventFloorAsync(1, CancellationToken.None));
            Assert.Equal(4, await store.EventFloorAsync(2, CancellationToken.None));
            // Compact everything: a live cache keeps its floor with no event left; sequences still go on, never reused.
            await store.CompactEventsAsync(T0.AddDays(1), 100, CancellationToken.None);
            Assert.Empty(await SequencesAsync(store, 1));
            Assert.Equal(5, await store.EventFloorAsync(1, CancellationToken.None));
            Assert.Equal(new long[] { 7 }, await AppendAsync(store, T0.AddDays(2), 1));
            Assert.Equal(new long[] { 7 }, await SequencesAsync(store, 1));
            // Cache 2 never was live here (no record) and has no event left: its floor is forgotten, as the cache is.
            Assert.Equal(1, await store.EventFloorAsync(2, CancellationToken.None));
        }
    }

    [Fact]
    public async Task CompactionByCountKeepsTheNewestOfEachLiveCache()
    {
        await using var store = await OpenAsync();
        var live = new StoreChange();
        live.PutCaches.Add(Cache(1, "a"));
        live.PutCaches.Add(Cache(2, "a"));
        await store.ApplyAsync(live, CancellationToken.None);
        await AppendAsync(store, T0, 1, 1, 2, 1, 1, 2, 1);  // cache 1: 1 2 4 5 7; cache 2: 3 6
        var result = await store.CompactEventsAsync(T0.AddDays(-1), 2, CancellationToken.None);
        Assert.Equal(3, result.Events);
        Assert.Equal(new long[] { 5, 7 }, await SequencesAsync(store, 1));
        Assert.Equal(5, await store.EventFloorAsync(1, CancellationToken.None));
        Assert.Equal(new long[] { 3, 6 }, await SequencesAsync(store, 2));
        Assert.Equal(1, await store.EventFloorAsync(2, CancellationToken.None));

        // Events appended since are counted at the next compaction.
        await AppendAsync(store, T0, 2, 2);  // cache 2: 3 6 8 9
        await store.CompactEventsAsync(T0.AddDays(-1), 2, CancellationToken.None);
        Assert.Equal(new long[] { 8, 9 }, await SequencesAsync(store, 2));
        Assert.Equal(7, await store.EventFloorAsync(2, CancellationToken.None));
        Assert.Equal(new long[] { 5, 7 }, await SequencesAsync(store, 1));
    }

    [Fact]
    public async Task ADeletedCachesEventsStayForTheWindowThenGoWithTheirFloor()
    {
        await using var store = await OpenAsync();
        var live = new StoreChange { Time = T0 };
        live.PutCaches.Add(Cache(1, "a"));
        live.Events.Add((1, "a", seq => Encoding.UTF8.GetBytes($"allocated {seq}")));
        await store.ApplyAsync(live, CancellationToken.None);
        await AppendAsync(store, T0.AddMinutes(1), 1, 1, 1);
        var delete = new StoreChange { Time = T0.AddMinutes(2) };
        delete.DeleteCaches.Add(1);
        delete.Events.Add((1, "a", seq => Encoding.UTF8.GetBytes($"deleted {seq}")));
        await store.ApplyAsync(delete, CancellationToken.None);
        // The cap is for live caches: a deleted one's log no longer grows, and keeps its CacheDeleted for the window.
        await store.CompactEventsAsync(T0.AddMinutes(1), 1, CancellationToken.None);
        Assert.Equal(new long[] { 2, 3, 4, 5 }, await SequencesAsync(store, 1));
        Assert.Equal(2, await store.EventFloorAsync(1, CancellationToken.None));
        await store.CompactEventsAsync(T0.AddMinutes(2), 1, CancellationToken.None);
        Assert.Equal("deleted 5", Encoding.UTF8.GetString(Assert.Single(await store.EventsAsync(1, 0, CancellationToken.None)).Payload));
        Assert.Equal(5, await store.EventFloorAsync(1, CancellationToken.None));
        await store.CompactEventsAsync(T0.AddMinutes(3), 1, CancellationToken.None);
        Assert.Empty(await SequencesAsync(store, 1));
        Assert.Equal(1, await store.EventFloorAsync(1, CancellationToken.None));
    }

    [Fact]
    public async Task ACompactionCutOffAtAnyPointLeavesEveryCacheAWholeSuffixAboveItsFloor()
    {
        // Enough caches that a compaction takes several transactions (etcd pages its reads by 100 and raises floors 60
        // caches a transaction), half of them deleted; each has 4 events at T0 and 2 at T0 + 2 min.
        const int count = 150;
        var original = new Dictionary<ulong, long[]>();
        await using (var store = await OpenAsync())
        {
            // In changes of 50 caches: within what etcd takes in one transaction.
            var chunks = Enumerable.Range(1, count).Select(i => (ulong)i).Chunk(50).ToList();
            foreach (var chunk in chunks)
            {
                var live = new StoreChange { Time = T0 };
                live.PutCaches.AddRange(chunk.Select(id => Cache(id, "a")));
                await store.ApplyAsync(live, CancellationToken.None);
            }
            for (int round = 0; round < 6; round++)
                foreach (var chunk in chunks)
                    await AppendAsync(store, round < 4 ? T0 : T0.AddMinutes(2), chunk);
            foreach (var chunk in chunks)
            {
                var gone = new StoreChange { Time = T0.AddMinutes(2) };
                gone.DeleteCaches.AddRange(chunk.Where(id => id % 2 == 0));
                await store.ApplyAsync(gone, CancellationToken.None);
            }
            var ids = chunks.SelectMany(c => c).ToArray();
            foreach (ulong id in ids)
                original[id] = await SequencesAsync(store, id);
        }

        // Cut off after 0, 2, 4, … ms (a manager killed mid-compaction: in-flight transactions commit or not), the state
        // read back by a store opened afresh, until one compaction runs to its end.
        bool finished = false;
        for (int afterMs = 0; !finished; afterMs += 2)
        {
            Assert.True(afterMs < 20_000, "a compaction never finished within 20 s");
            await using (var store = await OpenAsync())
            {
                using var cut = new CancellationTokenSource(TimeSpan.FromMilliseconds(afterMs));
                try
                {
                    await store.CompactEventsAsync(T0.AddMinutes(1), 3, cut.Token);
                    finished = true;
                }
                catch (Exception e) when (e is OperationCanceledException or StoreUnavailableException)
                {
                }
            }
            await using (var reopened = await OpenAsync())
            {
                foreach (var (id, events) in original)
                {
                    var kept = await SequencesAsync(reopened, id);
                    long floor = await reopened.EventFloorAsync(id, CancellationToken.None);
                    Assert.Equal(events.Skip(events.Length - kept.Length), kept);  // the newest, none missing among them
                    Assert.All(events.Except(kept), removed => Assert.True(removed < floor, $"cache {id}: event {removed} was removed but the floor is {floor}"));
                    if (kept.Length > 0)
                        Assert.True(floor <= kept[0], $"cache {id}: floor {floor} above its oldest kept event {kept[0]}");
                }
            }
        }

        // The end state: by age, every event at T0 went; the live caches' count was within the cap after that.
        await using (var store = await OpenAsync())
        {
            foreach (var (id, events) in original)
                Assert.Equal(events.Skip(4), await SequencesAsync(store, id));
            var next = await AppendAsync(store, T0.AddMinutes(3), 1);
            Assert.True(next[0] > original.Values.Max(e => e.Max()), "a sequence was given again after compaction");
        }
    }
}

/// <summary>The SQLite store: the contract, and what is its own (old records, schema versions).</summary>
public sealed class StoreTests : StoreContract, IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("manager-store-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    protected override async Task<IManagerStore> OpenAsync() => await SqliteManagerStore.OpenAsync(Path.Combine(_dir, "m.db"), CancellationToken.None);

    [Fact]
    public async Task ACacheRecordWrittenBeforeRequestIdsExistedStillLoads()
    {
        string path = Path.Combine(_dir, "old.db");
        await using (var store = await SqliteManagerStore.OpenAsync(path, CancellationToken.None))
        {
        }
        // The record as the manager wrote it before CacheRecord had RequestId and AllocateRequest (schema 1 either way).
        var json = System.Text.Json.Nodes.JsonNode.Parse(System.Text.Json.JsonSerializer.Serialize(Cache(9, "a"),
            new System.Text.Json.JsonSerializerOptions { PropertyNamingPolicy = System.Text.Json.JsonNamingPolicy.CamelCase }))!.AsObject();
        Assert.True(json.Remove("requestId") && json.Remove("allocateRequest"));
        using (var connection = new Microsoft.Data.Sqlite.SqliteConnection($"Data Source={path};Pooling=False"))
        {
            connection.Open();
            using var command = connection.CreateCommand();
            command.CommandText = "INSERT INTO caches (cache_id, tenant, record) VALUES (9, 'a', $record)";
            command.Parameters.AddWithValue("$record", json.ToJsonString());
            command.ExecuteNonQuery();
        }
        await using (var store = await SqliteManagerStore.OpenAsync(path, CancellationToken.None))
        {
            var cache = Assert.Single((await store.LoadAsync(CancellationToken.None)).Caches);
            Assert.Equal(9UL, cache.CacheId);
            Assert.Null(cache.RequestId);
            Assert.Null(cache.AllocateRequest);
        }
    }

    [Fact]
    public async Task AFileOfSchema1IsUpgradedAndItsEventsKeptAWholeWindow()
    {
        string path = Path.Combine(_dir, "v1.db");
        using (var connection = new Microsoft.Data.Sqlite.SqliteConnection($"Data Source={path};Pooling=False"))
        {
            connection.Open();
            using var command = connection.CreateCommand();
            // Schema 1 as the manager created it, with one event.
            command.CommandText = """
                CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE caches (cache_id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, record TEXT NOT NULL);
                CREATE TABLE servers (server_id TEXT PRIMARY KEY, record TEXT NOT NULL);
                CREATE TABLE events (sequence INTEGER PRIMARY KEY AUTOINCREMENT, cache_id INTEGER NOT NULL, tenant TEXT NOT NULL, payload BLOB NOT NULL);
                CREATE INDEX events_by_cache ON events (cache_id, sequence);
                INSERT INTO meta (key, value) VALUES ('schema', '1');
                INSERT INTO events (cache_id, tenant, payload) VALUES (4, 'a', x'01');
                """;
            command.ExecuteNonQuery();
        }
        await using var store = await SqliteManagerStore.OpenAsync(path, CancellationToken.None);
        await store.CompactEventsAsync(DateTimeOffset.UtcNow.AddMinutes(-1), 10, CancellationToken.None);
        Assert.Single(await store.EventsAsync(4, 1, CancellationToken.None));
        Assert.Equal(1, await store.EventFloorAsync(4, CancellationToken.None));
        var change = new StoreChange();
        change.Events.Add((4, "a", _ => new byte[] { 2 }));
        Assert.Equal(2, Assert.Single(await store.ApplyAsync(change, CancellationToken.None)).Sequence);
    }

    [Fact]
    public async Task AFileOfAnotherSchemaIsRefused()
    {
        string path = Path.Combine(_dir, "other.db");
        await using (var store = await SqliteManagerStore.OpenAsync(path, CancellationToken.None))
        {
        }
        using (var connection = new Microsoft.Data.Sqlite.SqliteConnection($"Data Source={path};Pooling=False"))
        {
            connection.Open();
            using var command = connection.CreateCommand();
            command.CommandText = "UPDATE meta SET value = '99' WHERE key = 'schema'";
            command.ExecuteNonQuery();
        }
        var e = await Assert.ThrowsAsync<InvalidOperationException>(() => SqliteManagerStore.OpenAsync(path, CancellationToken.None));
        Assert.Contains("schema version 99", e.Message);
    }
}

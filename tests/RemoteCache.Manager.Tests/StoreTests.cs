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

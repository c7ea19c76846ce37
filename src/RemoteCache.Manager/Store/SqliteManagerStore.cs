using System;
using System.Collections.Generic;
using System.Linq;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Data.Sqlite;

namespace RemoteCache.Manager.Store;

/// <summary>
/// <see cref="IManagerStore"/> in one SQLite file (WAL, synchronous=FULL: a committed change survives a crash of the
/// manager or the machine). Records are JSON in their rows; the event log is appended to with the sequence as its key
/// (AUTOINCREMENT: a sequence is never reused, even after events are compacted away) and trimmed by
/// <see cref="CompactEventsAsync"/>, which keeps each cache's floor in <c>event_floors</c>.
/// </summary>
public sealed class SqliteManagerStore : IManagerStore
{
    // 2: events carry their append time (appended_ms) and each cache's compaction floor is kept (event_floors).
    private const int SchemaVersion = 2;

    private readonly SqliteConnection _connection;
    private readonly SemaphoreSlim _gate = new(1, 1);

    // Caches that got events since the last compaction (under _gate): only they can have grown past the cap. Null until
    // the first compaction of this process, which looks at every cache.
    private HashSet<ulong>? _grown;

    private SqliteManagerStore(SqliteConnection connection) => _connection = connection;

    /// <summary>Opens (or creates) the store in <paramref name="path"/>; a file of schema 1 is upgraded in place.</summary>
    /// <exception cref="InvalidOperationException">The file is not a store of this manager (or of a newer one).</exception>
    public static async Task<SqliteManagerStore> OpenAsync(string path, CancellationToken cancellationToken)
    {
        var connection = new SqliteConnection(new SqliteConnectionStringBuilder { DataSource = path, Mode = SqliteOpenMode.ReadWriteCreate, Pooling = false }.ToString());
        try
        {
            await connection.OpenAsync(cancellationToken).ConfigureAwait(false);
            Execute(connection, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000;");
            Execute(connection, """
                CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS caches (cache_id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, record TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS servers (server_id TEXT PRIMARY KEY, record TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS events (sequence INTEGER PRIMARY KEY AUTOINCREMENT, cache_id INTEGER NOT NULL,
                                                   tenant TEXT NOT NULL, payload BLOB NOT NULL, appended_ms INTEGER NOT NULL);
                CREATE INDEX IF NOT EXISTS events_by_cache ON events (cache_id, sequence);
                CREATE TABLE IF NOT EXISTS event_floors (cache_id INTEGER PRIMARY KEY, floor INTEGER NOT NULL);
                CREATE TABLE IF NOT EXISTS join_tokens (token_id TEXT PRIMARY KEY, record TEXT NOT NULL);
                INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', '2');
                """);
            string? version = Scalar(connection, "SELECT value FROM meta WHERE key = 'schema'");
            if (version == "1")
                UpgradeFrom1(connection);
            else if (version != SchemaVersion.ToString(System.Globalization.CultureInfo.InvariantCulture))
                throw new InvalidOperationException($"{path} has schema version {version}; this manager reads version {SchemaVersion}");
            return new SqliteManagerStore(connection);
        }
        catch
        {
            await connection.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    // Schema 1 kept no append times: its events count as appended now (they are kept a whole retention window from the
    // upgrade, never dropped early). One transaction: a crash leaves schema 1 or 2, and a manager of schema 1 refuses 2.
    private static void UpgradeFrom1(SqliteConnection connection)
    {
        using var transaction = connection.BeginTransaction();
        using var command = connection.CreateCommand();
        command.Transaction = transaction;
        command.CommandText = """
            ALTER TABLE events ADD COLUMN appended_ms INTEGER NOT NULL DEFAULT 0;
            UPDATE events SET appended_ms = $now;
            UPDATE meta SET value = '2' WHERE key = 'schema';
            """;
        command.Parameters.AddWithValue("$now", DateTimeOffset.UtcNow.ToUnixTimeMilliseconds());
        command.ExecuteNonQuery();
        transaction.Commit();
    }

    public async Task<StoreSnapshot> LoadAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var caches = new List<CacheRecord>();
            foreach (string json in Column("SELECT record FROM caches ORDER BY cache_id"))
                caches.Add(JsonSerializer.Deserialize<CacheRecord>(json, RecordJson.Options)!);
            var servers = new List<ServerRecord>();
            foreach (string json in Column("SELECT record FROM servers ORDER BY server_id"))
                servers.Add(JsonSerializer.Deserialize<ServerRecord>(json, RecordJson.Options)!);
            using var command = _connection.CreateCommand();
            // The last sequence ever given, even if its event was deleted: sqlite_sequence keeps AUTOINCREMENT's high mark.
            command.CommandText = "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)";
            long last = Convert.ToInt64(command.ExecuteScalar(), System.Globalization.CultureInfo.InvariantCulture);
            return new StoreSnapshot(caches, servers, last);
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<IReadOnlyList<StoredEvent>> ApplyAsync(StoreChange change, CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var transaction = _connection.BeginTransaction();
            foreach (var cache in change.PutCaches)
                Run(transaction, "INSERT OR REPLACE INTO caches (cache_id, tenant, record) VALUES ($id, $tenant, $record)",
                    ("$id", (long)cache.CacheId), ("$tenant", cache.Tenant), ("$record", JsonSerializer.Serialize(cache, RecordJson.Options)));
            foreach (ulong id in change.DeleteCaches)
                Run(transaction, "DELETE FROM caches WHERE cache_id = $id", ("$id", (long)id));
            foreach (var server in change.PutServers)
                Run(transaction, "INSERT OR REPLACE INTO servers (server_id, record) VALUES ($id, $record)",
                    ("$id", server.ServerId), ("$record", JsonSerializer.Serialize(server, RecordJson.Options)));
            foreach (string id in change.DeleteServers)
                Run(transaction, "DELETE FROM servers WHERE server_id = $id", ("$id", id));
            foreach (var token in change.PutJoinTokens)
                Run(transaction, "INSERT OR REPLACE INTO join_tokens (token_id, record) VALUES ($id, $record)",
                    ("$id", token.TokenId), ("$record", JsonSerializer.Serialize(token, RecordJson.Options)));
            foreach (string id in change.DeleteJoinTokens)
                Run(transaction, "DELETE FROM join_tokens WHERE token_id = $id", ("$id", id));
            var appended = new List<StoredEvent>();
            foreach (var (cacheId, tenant, payload) in change.Events)
            {
                // Reserve the sequence, then write the payload that carries it.
                using var insert = _connection.CreateCommand();
                insert.Transaction = transaction;
                insert.CommandText = "INSERT INTO events (cache_id, tenant, payload, appended_ms) VALUES ($cache, $tenant, x'', $at) RETURNING sequence";
                insert.Parameters.AddWithValue("$cache", (long)cacheId);
                insert.Parameters.AddWithValue("$tenant", tenant);
                insert.Parameters.AddWithValue("$at", change.Time.ToUnixTimeMilliseconds());
                long sequence = Convert.ToInt64(insert.ExecuteScalar(), System.Globalization.CultureInfo.InvariantCulture);
                byte[] bytes = payload(sequence);
                Run(transaction, "UPDATE events SET payload = $payload WHERE sequence = $sequence", ("$payload", bytes), ("$sequence", sequence));
                appended.Add(new StoredEvent(sequence, cacheId, tenant, bytes));
            }
            transaction.Commit();
            foreach (var e in appended)
                _grown?.Add(e.CacheId);
            return appended;
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<IReadOnlyList<StoredEvent>> EventsAsync(ulong cacheId, long fromSequence, CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var command = _connection.CreateCommand();
            command.CommandText = "SELECT sequence, tenant, payload FROM events WHERE cache_id = $cache AND sequence >= $from ORDER BY sequence";
            command.Parameters.AddWithValue("$cache", (long)cacheId);
            command.Parameters.AddWithValue("$from", fromSequence);
            using var reader = command.ExecuteReader();
            var events = new List<StoredEvent>();
            while (reader.Read())
                events.Add(new StoredEvent(reader.GetInt64(0), cacheId, reader.GetString(1), (byte[])reader.GetValue(2)));
            return events;
        }
        finally
        {
            _gate.Release();
        }
    }

    /// <summary>Every event of every cache, in sequence order (what a migration to another store copies).</summary>
    public async Task<IReadOnlyList<StoredEvent>> AllEventsAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var command = _connection.CreateCommand();
            command.CommandText = "SELECT sequence, cache_id, tenant, payload, appended_ms FROM events ORDER BY sequence";
            using var reader = command.ExecuteReader();
            var events = new List<StoredEvent>();
            while (reader.Read())
                events.Add(new StoredEvent(reader.GetInt64(0), (ulong)reader.GetInt64(1), reader.GetString(2), (byte[])reader.GetValue(3))
                {
                    Appended = DateTimeOffset.FromUnixTimeMilliseconds(reader.GetInt64(4)),
                });
            return events;
        }
        finally
        {
            _gate.Release();
        }
    }

    /// <summary>Every cache's floor above 1 (what a migration to another store copies with the events).</summary>
    public async Task<IReadOnlyDictionary<ulong, long>> EventFloorsAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var command = _connection.CreateCommand();
            command.CommandText = "SELECT cache_id, floor FROM event_floors";
            using var reader = command.ExecuteReader();
            var floors = new Dictionary<ulong, long>();
            while (reader.Read())
                floors[(ulong)reader.GetInt64(0)] = reader.GetInt64(1);
            return floors;
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<long> EventFloorAsync(ulong cacheId, CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var command = _connection.CreateCommand();
            command.CommandText = "SELECT COALESCE((SELECT floor FROM event_floors WHERE cache_id = $cache), 1)";
            command.Parameters.AddWithValue("$cache", (long)cacheId);
            return Convert.ToInt64(command.ExecuteScalar(), System.Globalization.CultureInfo.InvariantCulture);
        }
        finally
        {
            _gate.Release();
        }
    }

    // One transaction: the floors and the deletions they cover commit together or not at all.
    public async Task<CompactionResult> CompactEventsAsync(DateTimeOffset olderThan, int perCacheCap, CancellationToken cancellationToken)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(perCacheCap, 1);
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var transaction = _connection.BeginTransaction();
            // By age: everything below the oldest event that is still young (walks the old events only, in sequence order).
            long? young = ScalarLong(transaction, "SELECT sequence FROM events WHERE appended_ms >= $t ORDER BY sequence LIMIT 1",
                                     ("$t", olderThan.ToUnixTimeMilliseconds()));
            long cut = young is { } y ? y - 1 : ScalarLong(transaction, "SELECT MAX(sequence) FROM events") ?? 0;
            var floors = new Dictionary<ulong, long>();
            foreach (var (cache, last) in Pairs(transaction, "SELECT cache_id, MAX(sequence) FROM events WHERE sequence <= $cut GROUP BY cache_id", ("$cut", cut)))
                floors[cache] = last + 1;
            int removed = Run(transaction, "DELETE FROM events WHERE sequence <= $cut", ("$cut", cut));
            // By count, of live caches (a deleted one's log no longer grows; it goes with the window, as in etcd): only
            // caches that got events since the last compaction can be over the cap (all of them the first time).
            var candidates = _grown is null
                ? Pairs(transaction, "SELECT cache_id, COUNT(*) FROM events GROUP BY cache_id HAVING COUNT(*) > $cap", ("$cap", perCacheCap)).Select(p => p.Key).ToList()
                : _grown.ToList();
            foreach (ulong cache in candidates)
            {
                // The newest event beyond the cap, counting from the newest: it and everything older of the cache go.
                long? last = ScalarLong(transaction, """
                    SELECT sequence FROM events WHERE cache_id = $cache AND EXISTS (SELECT 1 FROM caches WHERE cache_id = $cache)
                    ORDER BY sequence DESC LIMIT 1 OFFSET $cap
                    """, ("$cache", (long)cache), ("$cap", perCacheCap));
                if (last is not { } l)
                    continue;
                removed += Run(transaction, "DELETE FROM events WHERE cache_id = $cache AND sequence <= $last", ("$cache", (long)cache), ("$last", l));
                floors[cache] = Math.Max(floors.GetValueOrDefault(cache), l + 1);
            }
            foreach (var (cache, floor) in floors)
                Run(transaction, "INSERT INTO event_floors (cache_id, floor) VALUES ($cache, $floor) ON CONFLICT (cache_id) DO UPDATE SET floor = MAX(floor, excluded.floor)",
                    ("$cache", (long)cache), ("$floor", floor));
            // A floor outlives its events while the cache lives (a watcher of it must be told what went); once the cache is
            // gone too, a watcher is told that it does not exist, and the floor is of no use.
            Run(transaction, """
                DELETE FROM event_floors WHERE cache_id NOT IN (SELECT cache_id FROM caches)
                                           AND NOT EXISTS (SELECT 1 FROM events WHERE events.cache_id = event_floors.cache_id)
                """);
            transaction.Commit();
            _grown = new HashSet<ulong>();
            return new CompactionResult(removed, floors.Count);
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<IReadOnlyList<JoinTokenRecord>> JoinTokensAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            return Column("SELECT record FROM join_tokens ORDER BY token_id").Select(json => JsonSerializer.Deserialize<JoinTokenRecord>(json, RecordJson.Options)!).ToList();
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<bool> PingAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            using var command = _connection.CreateCommand();
            command.CommandText = "SELECT 1";
            return Convert.ToInt64(command.ExecuteScalar(), System.Globalization.CultureInfo.InvariantCulture) == 1;
        }
        catch (SqliteException)
        {
            return false;
        }
        finally
        {
            _gate.Release();
        }
    }

    public async ValueTask DisposeAsync()
    {
        await _gate.WaitAsync().ConfigureAwait(false);
        try
        {
            await _connection.DisposeAsync().ConfigureAwait(false);
        }
        finally
        {
            _gate.Release();
            _gate.Dispose();
        }
    }

    private List<string> Column(string sql)
    {
        using var command = _connection.CreateCommand();
        command.CommandText = sql;
        using var reader = command.ExecuteReader();
        var values = new List<string>();
        while (reader.Read())
            values.Add(reader.GetString(0));
        return values;
    }

    private int Run(SqliteTransaction transaction, string sql, params (string Name, object Value)[] parameters)
    {
        using var command = Command(transaction, sql, parameters);
        return command.ExecuteNonQuery();
    }

    private long? ScalarLong(SqliteTransaction transaction, string sql, params (string Name, object Value)[] parameters)
    {
        using var command = Command(transaction, sql, parameters);
        return command.ExecuteScalar() is long value ? value : null;
    }

    private List<KeyValuePair<ulong, long>> Pairs(SqliteTransaction transaction, string sql, params (string Name, object Value)[] parameters)
    {
        using var command = Command(transaction, sql, parameters);
        using var reader = command.ExecuteReader();
        var pairs = new List<KeyValuePair<ulong, long>>();
        while (reader.Read())
            pairs.Add(new((ulong)reader.GetInt64(0), reader.GetInt64(1)));
        return pairs;
    }

    private SqliteCommand Command(SqliteTransaction transaction, string sql, (string Name, object Value)[] parameters)
    {
        var command = _connection.CreateCommand();
        command.Transaction = transaction;
        command.CommandText = sql;
        foreach (var (name, value) in parameters)
            command.Parameters.AddWithValue(name, value);
        return command;
    }

    private static string? Scalar(SqliteConnection connection, string sql)
    {
        using var command = connection.CreateCommand();
        command.CommandText = sql;
        return (string?)command.ExecuteScalar();
    }

    private static void Execute(SqliteConnection connection, string sql)
    {
        using var command = connection.CreateCommand();
        command.CommandText = sql;
        command.ExecuteNonQuery();
    }
}

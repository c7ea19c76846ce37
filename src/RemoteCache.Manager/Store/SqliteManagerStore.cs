using System;
using System.Collections.Generic;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Data.Sqlite;

namespace RemoteCache.Manager.Store;

/// <summary>
/// <see cref="IManagerStore"/> in one SQLite file (WAL, synchronous=FULL: a committed change survives a crash of the
/// manager or the machine). Records are JSON in their rows; the event log is append-only with the sequence as its key
/// (AUTOINCREMENT: a sequence is never reused, even after the newest events are deleted).
/// </summary>
public sealed class SqliteManagerStore : IManagerStore
{
    private const int SchemaVersion = 1;

    private readonly SqliteConnection _connection;
    private readonly SemaphoreSlim _gate = new(1, 1);

    private SqliteManagerStore(SqliteConnection connection) => _connection = connection;

    /// <summary>Opens (or creates) the store in <paramref name="path"/>.</summary>
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
                                                   tenant TEXT NOT NULL, payload BLOB NOT NULL);
                CREATE INDEX IF NOT EXISTS events_by_cache ON events (cache_id, sequence);
                INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', '1');
                """);
            using (var command = connection.CreateCommand())
            {
                command.CommandText = "SELECT value FROM meta WHERE key = 'schema'";
                string? version = (string?)command.ExecuteScalar();
                if (version != SchemaVersion.ToString(System.Globalization.CultureInfo.InvariantCulture))
                    throw new InvalidOperationException($"{path} has schema version {version}; this manager reads version {SchemaVersion}");
            }
            return new SqliteManagerStore(connection);
        }
        catch
        {
            await connection.DisposeAsync().ConfigureAwait(false);
            throw;
        }
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
            var appended = new List<StoredEvent>();
            foreach (var (cacheId, tenant, payload) in change.Events)
            {
                // Reserve the sequence, then write the payload that carries it.
                using var insert = _connection.CreateCommand();
                insert.Transaction = transaction;
                insert.CommandText = "INSERT INTO events (cache_id, tenant, payload) VALUES ($cache, $tenant, x'') RETURNING sequence";
                insert.Parameters.AddWithValue("$cache", (long)cacheId);
                insert.Parameters.AddWithValue("$tenant", tenant);
                long sequence = Convert.ToInt64(insert.ExecuteScalar(), System.Globalization.CultureInfo.InvariantCulture);
                byte[] bytes = payload(sequence);
                Run(transaction, "UPDATE events SET payload = $payload WHERE sequence = $sequence", ("$payload", bytes), ("$sequence", sequence));
                appended.Add(new StoredEvent(sequence, cacheId, tenant, bytes));
            }
            transaction.Commit();
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
            command.CommandText = "SELECT sequence, cache_id, tenant, payload FROM events ORDER BY sequence";
            using var reader = command.ExecuteReader();
            var events = new List<StoredEvent>();
            while (reader.Read())
                events.Add(new StoredEvent(reader.GetInt64(0), (ulong)reader.GetInt64(1), reader.GetString(2), (byte[])reader.GetValue(3)));
            return events;
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

    private void Run(SqliteTransaction transaction, string sql, params (string Name, object Value)[] parameters)
    {
        using var command = _connection.CreateCommand();
        command.Transaction = transaction;
        command.CommandText = sql;
        foreach (var (name, value) in parameters)
            command.Parameters.AddWithValue(name, value);
        command.ExecuteNonQuery();
    }

    private static void Execute(SqliteConnection connection, string sql)
    {
        using var command = connection.CreateCommand();
        command.CommandText = sql;
        command.ExecuteNonQuery();
    }
}

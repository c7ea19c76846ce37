using System;
using System.Collections.Generic;

namespace RemoteCache.Manager.Store;

/// <summary>The state of a server the manager knows (the protobuf ServerState without its prefix).</summary>
public enum ServerStatus
{
    /// <summary>Takes new caches.</summary>
    Ready = 1,

    /// <summary>Keeps its cache, takes no new one.</summary>
    Draining = 2,

    /// <summary>A reclaim was announced; it goes at <see cref="ServerRecord.ReclaimDeadline"/>.</summary>
    Reclaiming = 3,

    /// <summary>Missed its probes (or its process ended), or its heartbeats (a joined server).</summary>
    Failed = 4,

    /// <summary>Joined by itself; takes caches once its first heartbeat's endpoints are checked.</summary>
    Joining = 5,
}

/// <summary>A cache server (a VM): where it listens, what it is, and which cache rents it.</summary>
/// <param name="ServerId">The identity capabilities name (the server's <c>--server-id</c>).</param>
/// <param name="Endpoints">Transport → endpoint.</param>
/// <param name="VmType">Its catalogue type.</param>
/// <param name="Spot">Rented on the spot market.</param>
/// <param name="Allocator">"local" (a process the manager started) or "static" (an operator's).</param>
public sealed record ServerRecord(string ServerId, IReadOnlyDictionary<string, string> Endpoints, string VmType, bool Spot, string Allocator)
{
    public ServerStatus Status { get; init; } = ServerStatus.Ready;

    /// <summary>The cache renting it; 0 when free.</summary>
    public ulong CacheId { get; init; }

    /// <summary>Bytes it lent when last probed.</summary>
    public long MemoryLent { get; init; }

    public DateTimeOffset? LastProbe { get; init; }

    /// <summary>A joined server's last accepted heartbeat, as the leader saw it (not stored).</summary>
    [System.Text.Json.Serialization.JsonIgnore]
    public DateTimeOffset? LastHeartbeat { get; init; }

    public DateTimeOffset? ReclaimDeadline { get; init; }

    /// <summary>Process id of a local server (to find it again after a manager restart); 0 otherwise.</summary>
    public int ProcessId { get; init; }

    /// <summary>Why it failed, when it did.</summary>
    public string? FailureReason { get; init; }

    /// <summary>Draining because its host has less memory to spare than its type lends (harvesting), not by an operator.</summary>
    public bool HostDrained { get; init; }

    /// <summary>How it joined, for a server that joined by itself (ServerMembership.Join); null for one added or started by the manager.</summary>
    public JoinRecord? Join { get; init; }

    /// <summary>The endpoint the manager reaches its admin interface on (the tcp one).</summary>
    [System.Text.Json.Serialization.JsonIgnore]
    public string AdminEndpoint => Endpoints.TryGetValue("tcp", out var e) ? e : throw new InvalidOperationException($"server {ServerId} has no tcp endpoint");
}

/// <summary>
/// How a server joined: the name it gave (its id is the name and an incarnation), its labels, cores and the memory it
/// said it lends, the token it joined with, and when.
/// </summary>
public sealed record JoinRecord(string Name, IReadOnlyDictionary<string, string> Labels, int Cores, long Memory, string TokenId, DateTimeOffset Joined);

/// <summary>
/// A join token: <paramref name="Sha256"/> is the hash of the whole token text ("rcj_&lt;id&gt;_&lt;secret&gt;"), which
/// the manager never keeps.
/// </summary>
public sealed record JoinTokenRecord(string TokenId, string Sha256, string Description, DateTimeOffset Created, DateTimeOffset Expires)
{
    /// <summary>When an operator revoked it; null: not revoked.</summary>
    public DateTimeOffset? Revoked { get; init; }

    /// <summary>Servers that joined with it.</summary>
    public long Joins { get; init; }
}

/// <summary>An SLO as stored: bounds in microseconds (null: none), throughput in operations per second.</summary>
public sealed record SloRecord(double? ReadLatencyUs, double? WriteLatencyUs, double Throughput);

/// <summary>A cache the manager allocated.</summary>
public sealed record CacheRecord
{
    public required ulong CacheId { get; init; }

    public required string Tenant { get; init; }

    public string Name { get; init; } = "";

    /// <summary>The secret its clients share (the native token).</summary>
    public required string Token { get; init; }

    public required long RequestedBytes { get; init; }

    public required SloRecord Slo { get; init; }

    public required CacheConfig Config { get; init; }

    public required string Transport { get; init; }

    public required int RecordSize { get; init; }

    /// <summary>Its servers, in the order the cache maps its addresses onto them.</summary>
    public required IReadOnlyList<string> Servers { get; init; }

    public required int RegionsPerServer { get; init; }

    public required long RegionBytes { get; init; }

    public required DateTimeOffset Created { get; init; }

    public required DateTimeOffset LeaseExpires { get; init; }

    public required TimeSpan LeaseLength { get; init; }

    /// <summary>Its likely lifetime; null: until deallocated.</summary>
    public TimeSpan? Duration { get; init; }

    public required double PricePerHour { get; init; }

    public double PredictedLatencyUs { get; init; }

    public double PredictedThroughput { get; init; }

    /// <summary>Whether a LeaseExpiring event was sent for the current lease.</summary>
    public bool ExpiryWarned { get; init; }

    /// <summary>Servers rented to take the place of one of <see cref="Servers"/> (by the id they replace), not yet in place.</summary>
    public IReadOnlyDictionary<string, ReplacementRecord> Replacements { get; init; } = new Dictionary<string, ReplacementRecord>();

    /// <summary>For each of <see cref="Servers"/> that replaced another: which, and the regions that lost their content then.</summary>
    public IReadOnlyDictionary<string, LineageRecord> Lineage { get; init; } = new Dictionary<string, LineageRecord>();

    /// <summary>
    /// The tenant's idempotency key of the Allocate that placed it (AllocateRequest.request_id), or null. Absent in
    /// records written before it existed: they read as null (records are JSON), so no schema change was needed.
    /// </summary>
    public string? RequestId { get; init; }

    /// <summary>That Allocate's request as sent, without its request_id (protobuf, base64): a retry must ask for the same.</summary>
    public string? AllocateRequest { get; init; }

    /// <summary>Bytes it provides: servers × regions × region size.</summary>
    public long CapacityBytes => Servers.Count * (long)RegionsPerServer * RegionBytes;
}

/// <summary>A server rented to replace one of a cache's: <paramref name="ServerId"/>, and the client moving the regions.</summary>
public sealed record ReplacementRecord(string ServerId, string Mover);

/// <summary>
/// A server that took the place of <paramref name="Replaced"/> in a cache; <paramref name="LostRegions"/> (0-based, its
/// own) did not get their content from it.
/// </summary>
public sealed record LineageRecord(string Replaced, IReadOnlyList<int> LostRegions);

/// <summary>An event as stored: its sequence, whose cache and tenant, and the serialized protobuf CacheEvent.</summary>
public sealed record StoredEvent(long Sequence, ulong CacheId, string Tenant, byte[] Payload)
{
    /// <summary>
    /// When the store appended it (<see cref="StoreChange.Time"/>), as far as the store says (a migration carries it
    /// over); null when not read back.
    /// </summary>
    public DateTimeOffset? Appended { get; init; }
}

/// <summary>What one compaction of the event log removed: events, and the caches whose floor it raised.</summary>
public sealed record CompactionResult(int Events, int Caches);

/// <summary>What the manager recovers at start.</summary>
public sealed record StoreSnapshot(IReadOnlyList<CacheRecord> Caches, IReadOnlyList<ServerRecord> Servers, long LastSequence)
{
    /// <summary>The join tokens, where the reader asked for them (a state migrated between stores); empty otherwise.</summary>
    public IReadOnlyList<JoinTokenRecord> JoinTokens { get; init; } = Array.Empty<JoinTokenRecord>();
}

/// <summary>
/// One atomic change of the durable state: caches and servers written or removed, events appended (their sequence
/// numbers are given by the store, in order).
/// </summary>
public sealed class StoreChange
{
    public List<CacheRecord> PutCaches { get; } = new();

    public List<ulong> DeleteCaches { get; } = new();

    public List<ServerRecord> PutServers { get; } = new();

    public List<string> DeleteServers { get; } = new();

    public List<JoinTokenRecord> PutJoinTokens { get; } = new();

    public List<string> DeleteJoinTokens { get; } = new();

    /// <summary>
    /// When the change is made, by the clock of the manager that makes it: the store records it as its events' append
    /// time, which is all that compaction by age (<see cref="IManagerStore.CompactEventsAsync"/>) compares.
    /// </summary>
    public DateTimeOffset Time { get; set; } = DateTimeOffset.UtcNow;

    /// <summary>Events to append: cache, tenant and a payload built from the sequence the store assigns.</summary>
    public List<(ulong CacheId, string Tenant, Func<long, byte[]> Payload)> Events { get; } = new();

    /// <summary>
    /// The most keys one change may write (<see cref="Writes"/>): etcd's default limit of operations in one transaction
    /// (its <c>--max-txn-ops</c>).
    /// </summary>
    public const int MaxWrites = 128;

    /// <summary>
    /// The keys the change writes: each record put or deleted, two per event (the event and its log entry) and two of the
    /// store's own (the last sequence and the change's id).
    /// </summary>
    public int Writes => PutCaches.Count + DeleteCaches.Count + PutServers.Count + DeleteServers.Count + PutJoinTokens.Count + DeleteJoinTokens.Count +
                         2 * Events.Count + 2;

    /// <summary>
    /// One change that makes <paramref name="changes"/> in their order: a record both written and removed in them ends as
    /// the last of them left it (written once, or removed), events are appended in order.
    /// </summary>
    public static StoreChange Merge(IReadOnlyList<StoreChange> changes)
    {
        if (changes.Count == 1)
            return changes[0];
        var caches = new Dictionary<ulong, CacheRecord?>();
        var servers = new Dictionary<string, ServerRecord?>(StringComparer.Ordinal);
        var tokens = new Dictionary<string, JoinTokenRecord?>(StringComparer.Ordinal);
        var merged = new StoreChange();
        foreach (var change in changes)
        {
            foreach (ulong id in change.DeleteCaches)
                caches[id] = null;
            foreach (var cache in change.PutCaches)
                caches[cache.CacheId] = cache;
            foreach (string id in change.DeleteServers)
                servers[id] = null;
            foreach (var server in change.PutServers)
                servers[server.ServerId] = server;
            foreach (string id in change.DeleteJoinTokens)
                tokens[id] = null;
            foreach (var token in change.PutJoinTokens)
                tokens[token.TokenId] = token;
            merged.Events.AddRange(change.Events);
        }
        foreach (var (id, cache) in caches)
        {
            if (cache is null)
                merged.DeleteCaches.Add(id);
            else
                merged.PutCaches.Add(cache);
        }
        foreach (var (id, server) in servers)
        {
            if (server is null)
                merged.DeleteServers.Add(id);
            else
                merged.PutServers.Add(server);
        }
        foreach (var (id, token) in tokens)
        {
            if (token is null)
                merged.DeleteJoinTokens.Add(id);
            else
                merged.PutJoinTokens.Add(token);
        }
        return merged;
    }
}

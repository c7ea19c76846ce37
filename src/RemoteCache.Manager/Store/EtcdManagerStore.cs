using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Text;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using dotnet_etcd;
using Etcdserverpb;
using Google.Protobuf;
using Grpc.Core;

namespace RemoteCache.Manager.Store;

/// <summary>
/// <see cref="IManagerStore"/> on etcd v3, for managers that share their state (a cluster). Under a key prefix:
/// <list type="bullet">
/// <item><c>meta/schema</c>: the layout's version; <c>meta/sequence</c>: the last event sequence given;
/// <c>meta/change</c>: the id of the last change committed.</item>
/// <item><c>caches/&lt;id, 16 hex digits&gt;</c>, <c>servers/&lt;id&gt;</c> and <c>tokens/&lt;join token id&gt;</c>: the
/// records, JSON as in SQLite (a prefix written before join tokens existed simply has none).</item>
/// <item><c>events/&lt;cache id, 16 hex&gt;/&lt;sequence, 19 digits&gt;</c>: an event (its tenant and payload).</item>
/// <item><c>log/&lt;sequence, 19 digits&gt;</c>: the same event's cache and append time (unix ms), in sequence order
/// across caches: what compaction by age reads, oldest first, without listing the events.</item>
/// <item><c>floors/&lt;cache id, 16 hex&gt;</c>: the cache's compaction floor (<see cref="EventFloorAsync"/>).</item>
/// </list>
/// Every change is one etcd transaction that compares <c>meta/sequence</c>'s revision with the one of the state its
/// user last loaded or committed (the state the change was built on), and rewrites that key: a change made by another
/// writer since fails the comparison and this one is refused (<see cref="StoreConflictException"/>), never merged; the
/// user loads the state again before its next change. A transaction whose answer is lost (a member died, a
/// deadline passed) is resolved by reading <c>meta/change</c> back: committed or not, never both.
/// </summary>
public sealed class EtcdManagerStore : IManagerStore
{
    /// <summary>The layout version this manager reads and writes (2: the <c>log/</c> index and <c>floors/</c>; 1 is upgraded at open).</summary>
    public const int SchemaVersion = 2;

    // Log entries read per page by compaction, and pages per compaction: one run is bounded, the next goes on.
    private const int CompactionPage = 500;
    private const int CompactionPages = 100;

    // Caches per compaction transaction: a compare, a floor write and a range delete each, within MaxTxnOps.
    private const int FloorBatch = 60;

    // Present while a state is being imported (ImportAsync): no manager starts on the prefix then.
    private const string MigratingKey = "meta/migrating";

    // etcd's default limit of operations in one transaction (its --max-txn-ops).
    private const int MaxTxnOps = StoreChange.MaxWrites;

    // Operations per import transaction, below that limit.
    private const int ImportBatch = 100;

    /// <summary>The prefix of every key when none is given.</summary>
    public const string DefaultPrefix = "/remotecache/";

    /// <summary>Bounds each call to etcd: a member that does not answer fails the call, never hangs it.</summary>
    public static readonly TimeSpan CallTimeout = TimeSpan.FromSeconds(5);

    // How a change whose answer was lost is read back (CommittedAsync): attempts, each bounded by the timeout.
    private const int ReadBackAttempts = 4;
    private static readonly TimeSpan ReadBackTimeout = TimeSpan.FromSeconds(1);

    // Bounds PingAsync (health checks), well below a probe's usual timeout.
    private static readonly TimeSpan PingTimeout = TimeSpan.FromSeconds(1);

    private readonly EtcdClient _client;
    private readonly string _prefix;
    private readonly string _endpoints;
    private readonly SemaphoreSlim _gate = new(1, 1);

    // The state this store's user has seen: the last sequence and meta/sequence's revision as of the last load or of this
    // store's own last commit (under _gate). A change is built on that state, so it commits only if nothing else has since.
    private long _last;
    private long _revision;

    // Fencing (replicas): when on, a change commits only while meta/leader is the key this manager created when it was
    // elected (its create revision); 0 while it is not the leader. See Fence.
    private bool _fenced;
    private long _leaderRevision;

    private EtcdManagerStore(EtcdClient client, string endpoints, string prefix)
    {
        _client = client;
        _endpoints = endpoints;
        _prefix = prefix;
    }

    /// <summary>
    /// Connects to the etcd cluster <paramref name="connection"/> names and checks or writes the layout version under
    /// <paramref name="prefix"/>.
    /// </summary>
    /// <exception cref="StoreUnavailableException">No member answered within <see cref="CallTimeout"/>.</exception>
    /// <exception cref="InvalidOperationException">The prefix holds another layout version.</exception>
    public static Task<EtcdManagerStore> OpenAsync(EtcdConnection connection, string prefix, CancellationToken cancellationToken) =>
        OpenAsync(connection, prefix, forImport: false, cancellationToken);

    /// <summary>As <see cref="OpenAsync(EtcdConnection, string, CancellationToken)"/>, also over an import that did not finish (to run it again).</summary>
    public static Task<EtcdManagerStore> OpenForImportAsync(EtcdConnection connection, string prefix, CancellationToken cancellationToken) =>
        OpenAsync(connection, prefix, forImport: true, cancellationToken);

    private static async Task<EtcdManagerStore> OpenAsync(EtcdConnection connection, string prefix, bool forImport, CancellationToken cancellationToken)
    {
        if (!prefix.StartsWith('/') || !prefix.EndsWith('/'))
            throw new ArgumentException($"the etcd key prefix '{prefix}' must begin and end with '/'", nameof(prefix));
        string endpoints = connection.Endpoints;
        var store = new EtcdManagerStore(connection.CreateClient(), endpoints, prefix);
        try
        {
            var schema = store.Key("meta/schema");
            var txn = new TxnRequest();
            txn.Compare.Add(new Compare { Key = schema, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 });
            txn.Success.Add(new RequestOp { RequestPut = new PutRequest { Key = schema, Value = ByteString.CopyFromUtf8(SchemaVersion.ToString(CultureInfo.InvariantCulture)) } });
            txn.Failure.Add(new RequestOp { RequestRange = new RangeRequest { Key = schema } });
            var response = await store.CallAsync((deadline, ct) => store._client.TransactionAsync(txn, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            if (!response.Succeeded)
            {
                string version = response.Responses[0].ResponseRange.Kvs[0].Value.ToStringUtf8();
                if (version == "1")
                    await store.UpgradeFrom1Async(cancellationToken).ConfigureAwait(false);
                else if (version != SchemaVersion.ToString(CultureInfo.InvariantCulture))
                    throw new InvalidOperationException($"etcd {endpoints} holds layout version {version} under '{prefix}'; this manager reads version {SchemaVersion}");
            }
            if (!forImport && await store.GetAsync(MigratingKey, cancellationToken).ConfigureAwait(false) is not null)
                throw new InvalidOperationException($"a migration into etcd {endpoints} under '{prefix}' did not finish: run migrate-state again");
            if (!forImport)
                await store.LoadAsync(cancellationToken).ConfigureAwait(false);  // the state the first change is built on
            return store;
        }
        catch
        {
            await store.DisposeAsync().ConfigureAwait(false);
            throw;
        }
    }

    // Layout 1 had no log/ index: one entry per event, as appended now (kept a whole retention window from the upgrade,
    // never dropped early), then the version, compared on 1. Idempotent: an upgrade cut off is run again by the next open.
    // Managers of layout 1 refuse 2 at their start; stop them before starting this one.
    private async Task UpgradeFrom1Async(CancellationToken cancellationToken)
    {
        long now = DateTimeOffset.UtcNow.ToUnixTimeMilliseconds();
        var events = Key("events/");
        var from = events;
        while (true)
        {
            var page = new RangeRequest { Key = from, RangeEnd = RangeEnd(events), KeysOnly = true, Limit = ImportBatch, SortOrder = RangeRequest.Types.SortOrder.Ascend };
            var response = await CallAsync((deadline, ct) => _client.GetAsync(page, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            if (response.Kvs.Count == 0)
                break;
            var txn = new TxnRequest();
            foreach (var kv in response.Kvs)
            {
                var (cacheId, sequence) = ParseEventKey(kv.Key);
                txn.Success.Add(Put(LogKey(sequence), LogEntry(cacheId, now)));
            }
            await CallAsync((deadline, ct) => _client.TransactionAsync(txn, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            if (!response.More)
                break;
            from = ByteString.CopyFrom(response.Kvs[^1].Key.Concat(new byte[] { 0 }).ToArray());
        }
        var schema = Key("meta/schema");
        var finish = new TxnRequest();
        finish.Compare.Add(new Compare { Key = schema, Target = Compare.Types.CompareTarget.Value, Result = Compare.Types.CompareResult.Equal, Value = ByteString.CopyFromUtf8("1") });
        finish.Success.Add(Put(schema, Encoding.UTF8.GetBytes(SchemaVersion.ToString(CultureInfo.InvariantCulture))));
        await CallAsync((deadline, ct) => _client.TransactionAsync(finish, null, deadline, ct), cancellationToken).ConfigureAwait(false);
    }

    public async Task<StoreSnapshot> LoadAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            return await LoadLockedAsync(cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _gate.Release();
        }
    }

    // Under _gate: the state, which becomes the one the next change is built on.
    private async Task<StoreSnapshot> LoadLockedAsync(CancellationToken cancellationToken)
    {
        // One transaction of three reads: the records and the sequence as of one revision.
        var read = new TxnRequest();
        foreach (string part in new[] { "caches/", "servers/" })
            read.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key(part), RangeEnd = RangeEnd(Key(part)) } });
        read.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key("meta/sequence") } });
        var response = await CallAsync((deadline, ct) => _client.TransactionAsync(read, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        var caches = response.Responses[0].ResponseRange.Kvs
            .Select(kv => JsonSerializer.Deserialize<CacheRecord>(kv.Value.Span, RecordJson.Options)!).OrderBy(c => c.CacheId).ToList();
        var servers = response.Responses[1].ResponseRange.Kvs
            .Select(kv => JsonSerializer.Deserialize<ServerRecord>(kv.Value.Span, RecordJson.Options)!).OrderBy(s => s.ServerId, StringComparer.Ordinal).ToList();
        var sequence = response.Responses[2].ResponseRange.Kvs;
        (_last, _revision) = sequence.Count == 0 ? (0, 0) : (long.Parse(sequence[0].Value.ToStringUtf8(), CultureInfo.InvariantCulture), sequence[0].ModRevision);
        return new StoreSnapshot(caches, servers, _last);
    }

    public async Task<IReadOnlyList<StoredEvent>> ApplyAsync(StoreChange change, CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            long last = _last, revision = _revision;
            var sequenceKey = Key("meta/sequence");
            var changeId = ByteString.CopyFromUtf8(Guid.NewGuid().ToString("N"));
            var txn = new TxnRequest();
            long leader = Interlocked.Read(ref _leaderRevision);
            if (_fenced)
            {
                if (leader == 0)
                    throw new StoreFencedException($"this manager is not the leader of the managers on etcd {_endpoints} under '{_prefix}'; the change was not made");
                // A deposed leader (its lease ended, its key deleted or taken over) commits nothing.
                txn.Compare.Add(new Compare { Key = Key(LeaderKey), Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = leader });
            }
            // Nothing changed since the state the change was built on (a key that does not exist yet has create revision 0).
            txn.Compare.Add(revision == 0
                ? new Compare { Key = sequenceKey, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 }
                : new Compare { Key = sequenceKey, Target = Compare.Types.CompareTarget.Mod, Result = Compare.Types.CompareResult.Equal, ModRevision = revision });
            foreach (var cache in change.PutCaches)
                txn.Success.Add(Put(CacheKey(cache.CacheId), JsonSerializer.SerializeToUtf8Bytes(cache, RecordJson.Options)));
            foreach (ulong id in change.DeleteCaches)
                txn.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = CacheKey(id) } });
            foreach (var server in change.PutServers)
                txn.Success.Add(Put(Key("servers/" + server.ServerId), JsonSerializer.SerializeToUtf8Bytes(server, RecordJson.Options)));
            foreach (string id in change.DeleteServers)
                txn.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = Key("servers/" + id) } });
            foreach (var token in change.PutJoinTokens)
                txn.Success.Add(Put(Key("tokens/" + token.TokenId), JsonSerializer.SerializeToUtf8Bytes(token, RecordJson.Options)));
            foreach (string id in change.DeleteJoinTokens)
                txn.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = Key("tokens/" + id) } });
            var appended = new List<StoredEvent>();
            foreach (var (cacheId, tenant, payload) in change.Events)
            {
                long sequence = last + appended.Count + 1;
                byte[] bytes = payload(sequence);
                txn.Success.Add(Put(EventKey(cacheId, sequence), JsonSerializer.SerializeToUtf8Bytes(new EventEnvelope(tenant, bytes), RecordJson.Options)));
                txn.Success.Add(Put(LogKey(sequence), LogEntry(cacheId, change.Time.ToUnixTimeMilliseconds())));
                appended.Add(new StoredEvent(sequence, cacheId, tenant, bytes));
            }
            txn.Success.Add(Put(sequenceKey, Encoding.UTF8.GetBytes((last + appended.Count).ToString(CultureInfo.InvariantCulture))));
            txn.Success.Add(new RequestOp { RequestPut = new PutRequest { Key = Key("meta/change"), Value = changeId } });
            if (txn.Success.Count > MaxTxnOps)
                throw new InvalidOperationException(
                    $"a change of {txn.Success.Count} writes is more than etcd takes in one transaction by default ({MaxTxnOps}; etcd's --max-txn-ops); it was not made");

            // On a failed comparison: who leads (when fenced), and the last change's id and revision, which tell a change
            // that an earlier attempt of this very call committed (the client library retries a call whose answer it lost).
            if (_fenced)
                txn.Failure.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key(LeaderKey) } });
            txn.Failure.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key("meta/change") } });
            txn.Failure.Add(new RequestOp { RequestRange = new RangeRequest { Key = sequenceKey } });
            long at;
            try
            {
                var response = await CallAsync((deadline, ct) => _client.TransactionAsync(txn, null, deadline, ct), cancellationToken).ConfigureAwait(false);
                if (response.Succeeded)
                {
                    at = response.Header.Revision;
                }
                else
                {
                    var answers = response.Responses.Select(r => r.ResponseRange.Kvs).ToList();
                    if (_fenced && (answers[0].Count == 0 || answers[0][0].CreateRevision != leader))
                        throw new StoreFencedException(
                            $"this manager is no longer the leader of the managers on etcd {_endpoints} under '{_prefix}' (another was elected, or its leadership lease ended); the change was not made");
                    var (lastChange, sequence) = (answers[^2], answers[^1]);
                    if (lastChange.Count == 0 || lastChange[0].Value != changeId)
                        throw new StoreConflictException(
                            $"etcd {_endpoints}: the state under '{_prefix}' changed since it was read (another manager wrote it); the change was not made");
                    at = sequence[0].ModRevision;
                }
            }
            catch (StoreUnavailableException lost)
            {
                // The answer was lost, not necessarily the change: it committed exactly when meta/change is its id.
                at = await CommittedAsync(changeId, lost).ConfigureAwait(false) ?? throw new StoreUnavailableException(
                    $"{lost.Message}; the change was not made (read back after the new etcd leader took over)", lost);
            }
            (_last, _revision) = (last + appended.Count, at);
            return appended;
        }
        finally
        {
            _gate.Release();
        }
    }

    // The revision at which the change `changeId` committed, or null when it did not, read back after its answer was lost
    // (`lost`); asked a few times, since the member that lost it may be the one that died. An outcome that cannot be
    // learnt is refused as unknown.
    private async Task<long?> CommittedAsync(ByteString changeId, StoreUnavailableException lost)
    {
        var read = new TxnRequest();
        read.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key("meta/change") } });
        read.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key("meta/sequence") } });
        for (int attempt = 0; ; attempt++)
        {
            try
            {
                // Short attempts: while the outcome is unknown the leader's next changes wait, and a new term's takeover
                // waits for them; a cluster with a quorum answers a read in milliseconds.
                var response = await CallAsync((deadline, ct) => _client.TransactionAsync(read, null, deadline, ct), CancellationToken.None, ReadBackTimeout).ConfigureAwait(false);
                var change = response.Responses[0].ResponseRange.Kvs;
                // Every change rewrites both keys: when meta/change is this one's, meta/sequence was last written by it too.
                return change.Count == 1 && change[0].Value == changeId ? response.Responses[1].ResponseRange.Kvs[0].ModRevision : null;
            }
            catch (StoreUnavailableException) when (attempt < ReadBackAttempts - 1)
            {
                await Task.Delay(ReadBackTimeout / 5).ConfigureAwait(false);
            }
            catch (StoreUnavailableException again)
            {
                throw new StoreUnavailableException($"{lost.Message}; whether the change was made is unknown: {again.Message}", lost) { OutcomeUnknown = true };
            }
        }
    }

    /// <summary>The key of the leader among the managers on the prefix (relative to it): see <see cref="Fence"/>.</summary>
    internal const string LeaderKey = "meta/leader";

    /// <summary>
    /// Turns fencing on: from now on a change commits only while this manager is the leader, that is while the leader key
    /// is the one it created when elected (<paramref name="leaderRevision"/>, that key's create revision); null: it is not
    /// the leader, and every change is refused (<see cref="StoreFencedException"/>). A leader whose lease ended (its key
    /// deleted by etcd) or that another replaced cannot commit anything, even if it still runs.
    /// </summary>
    public void Fence(long? leaderRevision)
    {
        _fenced = true;
        Interlocked.Exchange(ref _leaderRevision, leaderRevision ?? 0);
    }

    /// <summary>The etcd client (the leader election shares its connection).</summary>
    internal EtcdClient Client => _client;

    /// <summary>The members, as configured (for messages).</summary>
    internal string Endpoints => _endpoints;

    /// <summary>The full key of <paramref name="key"/>, relative to the prefix.</summary>
    internal ByteString KeyOf(string key) => Key(key);

    /// <summary>
    /// Claims the prefix for managers of <paramref name="identity"/>: the first to start writes it (<c>meta/identity</c>),
    /// every later one must match it, so that managers that would mint capabilities the servers refuse, or place caches
    /// by another catalogue, never share a state.
    /// </summary>
    /// <exception cref="InvalidOperationException">The prefix was claimed with another admission key or catalogue (the message says which).</exception>
    public async Task ClaimAsync(StoreIdentity identity, CancellationToken cancellationToken)
    {
        var key = Key("meta/identity");
        var txn = new TxnRequest();
        txn.Compare.Add(new Compare { Key = key, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 });
        txn.Success.Add(Put(key, JsonSerializer.SerializeToUtf8Bytes(identity.Fingerprint, RecordJson.Options)));
        txn.Failure.Add(new RequestOp { RequestRange = new RangeRequest { Key = key } });
        var response = await CallAsync((deadline, ct) => _client.TransactionAsync(txn, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        if (response.Succeeded)
            return;
        var claimed = JsonSerializer.Deserialize<StoreIdentity.Prints>(response.Responses[0].ResponseRange.Kvs[0].Value.Span, RecordJson.Options)!;
        var differ = identity.Fingerprint.Differences(claimed);
        if (differ.Count > 0)
            throw new InvalidOperationException(
                $"etcd {_endpoints} under '{_prefix}' holds the state of managers with another {string.Join(" and another ", differ)}: " +
                "managers that share a state share their admission key and catalogue");
    }

    /// <summary>
    /// Copies a whole state (another store's) into this prefix, which must hold none: records and events keep their
    /// ids and sequences, and the next event continues after <see cref="StoreSnapshot.LastSequence"/>. A state too large
    /// for one etcd transaction is written in several, between a marker that a manager refuses to start on and the
    /// last transaction, which writes the sequence and removes the marker: an import that is interrupted leaves a prefix
    /// no manager uses, and an import run again over it starts over.
    /// </summary>
    /// <exception cref="InvalidOperationException">The prefix already holds a state.</exception>
    public async Task ImportAsync(StoreSnapshot state, IReadOnlyList<StoredEvent> events, IReadOnlyDictionary<ulong, long> floors, CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var marker = Key(MigratingKey);
            if (await GetAsync(MigratingKey, cancellationToken).ConfigureAwait(false) is null)
            {
                // Only an empty state is written over: no sequence, no record, no event.
                var begin = new TxnRequest();
                begin.Compare.Add(new Compare { Key = Key("meta/sequence"), Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 });
                foreach (string part in new[] { "caches/", "servers/", "tokens/", "events/", "log/", "floors/" })
                    begin.Compare.Add(new Compare
                    {
                        Key = Key(part), RangeEnd = RangeEnd(Key(part)), Target = Compare.Types.CompareTarget.Create,
                        Result = Compare.Types.CompareResult.Equal, CreateRevision = 0,
                    });
                begin.Success.Add(Put(marker, Encoding.UTF8.GetBytes(DateTimeOffset.UtcNow.ToString("O", CultureInfo.InvariantCulture))));
                if (!(await CallAsync((deadline, ct) => _client.TransactionAsync(begin, null, deadline, ct), cancellationToken).ConfigureAwait(false)).Succeeded)
                    throw new InvalidOperationException($"etcd {_endpoints} already holds a manager's state under '{_prefix}': a state is imported into an empty prefix only");
            }
            else
            {
                // An import that did not finish: what it wrote goes, the marker stays.
                foreach (string part in new[] { "caches/", "servers/", "tokens/", "events/", "log/", "floors/", "meta/sequence", "meta/change" })
                {
                    var range = new DeleteRangeRequest { Key = Key(part) };
                    if (part.EndsWith('/'))
                        range.RangeEnd = RangeEnd(Key(part));
                    await CallAsync((deadline, ct) => _client.DeleteAsync(range, null, deadline, ct), cancellationToken).ConfigureAwait(false);
                }
            }
            var puts = state.Caches.Select(c => Put(CacheKey(c.CacheId), JsonSerializer.SerializeToUtf8Bytes(c, RecordJson.Options)))
                .Concat(state.Servers.Select(s => Put(Key("servers/" + s.ServerId), JsonSerializer.SerializeToUtf8Bytes(s, RecordJson.Options))))
                .Concat(state.JoinTokens.Select(t => Put(Key("tokens/" + t.TokenId), JsonSerializer.SerializeToUtf8Bytes(t, RecordJson.Options))))
                .Concat(events.Select(e => Put(EventKey(e.CacheId, e.Sequence), JsonSerializer.SerializeToUtf8Bytes(new EventEnvelope(e.Tenant, e.Payload), RecordJson.Options))))
                .Concat(events.Select(e => Put(LogKey(e.Sequence), LogEntry(e.CacheId, (e.Appended ?? DateTimeOffset.UtcNow).ToUnixTimeMilliseconds()))))
                .Concat(floors.Select(f => Put(FloorKey(f.Key), Encoding.UTF8.GetBytes(f.Value.ToString(CultureInfo.InvariantCulture)))));
            foreach (var batch in puts.Chunk(ImportBatch))
            {
                var txn = new TxnRequest();
                txn.Compare.Add(new Compare { Key = marker, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Greater, CreateRevision = 0 });
                txn.Success.AddRange(batch);
                if (!(await CallAsync((deadline, ct) => _client.TransactionAsync(txn, null, deadline, ct), cancellationToken).ConfigureAwait(false)).Succeeded)
                    throw new InvalidOperationException($"the import into etcd {_endpoints} under '{_prefix}' was interrupted by another (its marker went)");
            }
            var finish = new TxnRequest();
            finish.Compare.Add(new Compare { Key = marker, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Greater, CreateRevision = 0 });
            finish.Success.Add(Put(Key("meta/sequence"), Encoding.UTF8.GetBytes(Math.Max(state.LastSequence, events.Count == 0 ? 0 : events.Max(e => e.Sequence)).ToString(CultureInfo.InvariantCulture))));
            finish.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = marker } });
            if (!(await CallAsync((deadline, ct) => _client.TransactionAsync(finish, null, deadline, ct), cancellationToken).ConfigureAwait(false)).Succeeded)
                throw new InvalidOperationException($"the import into etcd {_endpoints} under '{_prefix}' was interrupted by another (its marker went)");
        }
        finally
        {
            _gate.Release();
        }
    }

    public async Task<IReadOnlyList<StoredEvent>> EventsAsync(ulong cacheId, long fromSequence, CancellationToken cancellationToken)
    {
        string prefix = $"events/{cacheId:x16}/";
        var request = new RangeRequest
        {
            Key = EventKey(cacheId, Math.Max(fromSequence, 0)),
            RangeEnd = RangeEnd(Key(prefix)),
            SortOrder = RangeRequest.Types.SortOrder.Ascend,
            SortTarget = RangeRequest.Types.SortTarget.Key,
        };
        var response = await CallAsync((deadline, ct) => _client.GetAsync(request, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        return response.Kvs.Select(kv =>
        {
            long sequence = long.Parse(kv.Key.ToStringUtf8().AsSpan(_prefix.Length + prefix.Length), CultureInfo.InvariantCulture);
            var envelope = JsonSerializer.Deserialize<EventEnvelope>(kv.Value.Span, RecordJson.Options)!;
            return new StoredEvent(sequence, cacheId, envelope.Tenant, envelope.Payload);
        }).ToList();
    }

    public async Task<long> EventFloorAsync(ulong cacheId, CancellationToken cancellationToken)
    {
        var kv = await GetAsync($"floors/{cacheId:x16}", cancellationToken).ConfigureAwait(false);
        return kv is null ? 1 : ParseFloor(kv);
    }

    // Not under _gate: it writes none of what changes are compared on (meta/sequence), and each of its transactions
    // compares the floors it raises, so that two compactions (two managers) never lower one another's.
    public async Task<CompactionResult> CompactEventsAsync(DateTimeOffset olderThan, int perCacheCap, CancellationToken cancellationToken)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(perCacheCap, 1);
        int removed = 0, raised = 0;

        // By age: the log index oldest first, up to the first young entry (or a bounded number of pages).
        long cutoff = olderThan.ToUnixTimeMilliseconds();
        var through = new Dictionary<ulong, long>();
        long? lastOld = null;
        var log = Key("log/");
        var from = log;
        for (int page = 0; page < CompactionPages; page++)
        {
            var request = new RangeRequest { Key = from, RangeEnd = RangeEnd(log), Limit = CompactionPage, SortOrder = RangeRequest.Types.SortOrder.Ascend };
            var response = await CallAsync((deadline, ct) => _client.GetAsync(request, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            bool young = false;
            foreach (var kv in response.Kvs)
            {
                long sequence = long.Parse(kv.Key.ToStringUtf8().AsSpan(_prefix.Length + "log/".Length), CultureInfo.InvariantCulture);
                var (cacheId, appended) = ParseLogEntry(kv.Value);
                if (appended >= cutoff)
                {
                    young = true;
                    break;
                }
                through[cacheId] = sequence;
                lastOld = sequence;
            }
            if (young || !response.More || response.Kvs.Count == 0)
                break;
            from = LogKey(lastOld!.Value + 1);
        }
        var (aged, agedCaches) = await RaiseFloorsAsync(through, cancellationToken).ConfigureAwait(false);
        if (aged is null)
            return new CompactionResult(0, 0);  // another compaction raised a floor meanwhile: the next run goes on
        removed += aged.Value;
        raised += agedCaches;
        if (lastOld is { } old)
        {
            // Only once every event it points at is gone: a crash before leaves entries whose deletions the next run redoes.
            var drop = new DeleteRangeRequest { Key = log, RangeEnd = LogKey(old + 1) };
            await CallAsync((deadline, ct) => _client.DeleteAsync(drop, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        }

        // By count: every live cache's events counted by etcd (count-only ranges, MaxTxnOps a transaction); the log entries
        // of what goes stay until they age out (deleting an absent range again is harmless).
        var caches = await KeysAsync("caches/", cancellationToken).ConfigureAwait(false);
        var live = caches.Select(k => ulong.Parse(k.AsSpan(_prefix.Length + "caches/".Length), NumberStyles.HexNumber, CultureInfo.InvariantCulture)).ToList();
        var over = new Dictionary<ulong, long>();
        foreach (var batch in live.Chunk(MaxTxnOps))
        {
            var count = new TxnRequest();
            foreach (ulong id in batch)
                count.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key($"events/{id:x16}/"), RangeEnd = RangeEnd(Key($"events/{id:x16}/")), CountOnly = true } });
            var counted = await CallAsync((deadline, ct) => _client.TransactionAsync(count, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            for (int i = 0; i < batch.Length; i++)
            {
                long excess = counted.Responses[i].ResponseRange.Count - perCacheCap;
                if (excess <= 0)
                    continue;
                // The oldest `excess` events go: the last of them bounds the range.
                var oldest = new RangeRequest
                {
                    Key = Key($"events/{batch[i]:x16}/"), RangeEnd = RangeEnd(Key($"events/{batch[i]:x16}/")), KeysOnly = true, Limit = excess,
                    SortOrder = RangeRequest.Types.SortOrder.Ascend,
                };
                var keys = await CallAsync((deadline, ct) => _client.GetAsync(oldest, null, deadline, ct), cancellationToken).ConfigureAwait(false);
                if (keys.Kvs.Count > 0)
                    over[batch[i]] = ParseEventKey(keys.Kvs[^1].Key).Sequence;
            }
        }
        var (capped, cappedCaches) = await RaiseFloorsAsync(over, cancellationToken).ConfigureAwait(false);
        removed += capped ?? 0;
        raised += cappedCaches;

        await ForgetFloorsAsync(live.ToHashSet(), cancellationToken).ConfigureAwait(false);
        return new CompactionResult(removed, raised);
    }

    // For each cache, raises its floor to past `through[cache]` and deletes its events up to that, in one transaction per
    // FloorBatch caches that compares each floor with the one read: the floor never goes down and never lags a deletion.
    // Returns the events deleted and the caches whose floor rose, or null events when a comparison failed.
    private async Task<(int? Events, int Caches)> RaiseFloorsAsync(Dictionary<ulong, long> through, CancellationToken cancellationToken)
    {
        int removed = 0, caches = 0;
        foreach (var batch in through.Chunk(FloorBatch))
        {
            var read = new TxnRequest();
            foreach (var (id, _) in batch)
                read.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = FloorKey(id) } });
            var floors = await CallAsync((deadline, ct) => _client.TransactionAsync(read, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            var write = new TxnRequest();
            for (int i = 0; i < batch.Length; i++)
            {
                var (id, last) = batch[i];
                var kvs = floors.Responses[i].ResponseRange.Kvs;
                long floor = kvs.Count == 0 ? 1 : ParseFloor(kvs[0]);
                write.Compare.Add(kvs.Count == 0
                    ? new Compare { Key = FloorKey(id), Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 }
                    : new Compare { Key = FloorKey(id), Target = Compare.Types.CompareTarget.Mod, Result = Compare.Types.CompareResult.Equal, ModRevision = kvs[0].ModRevision });
                write.Success.Add(Put(FloorKey(id), Encoding.UTF8.GetBytes(Math.Max(floor, last + 1).ToString(CultureInfo.InvariantCulture))));
                write.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = EventKey(id, 0), RangeEnd = EventKey(id, last + 1) } });
            }
            var response = await CallAsync((deadline, ct) => _client.TransactionAsync(write, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            if (!response.Succeeded)
                return (null, caches);
            removed += response.Responses.Where(r => r.ResponseCase == ResponseOp.ResponseOneofCase.ResponseDeleteRange).Sum(r => (int)r.ResponseDeleteRange.Deleted);
            caches += batch.Length;
        }
        return (removed, caches);
    }

    // Deletes the floors of caches that are gone and whose events are all gone too (a watcher of such a cache is told it
    // does not exist): each compared on the floor as read and on the cache's absence.
    private async Task ForgetFloorsAsync(HashSet<ulong> live, CancellationToken cancellationToken)
    {
        var request = new RangeRequest { Key = Key("floors/"), RangeEnd = RangeEnd(Key("floors/")) };
        var floors = await CallAsync((deadline, ct) => _client.GetAsync(request, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        var gone = floors.Kvs.Select(kv => (Kv: kv, Id: ulong.Parse(kv.Key.ToStringUtf8().AsSpan(_prefix.Length + "floors/".Length), NumberStyles.HexNumber, CultureInfo.InvariantCulture)))
                         .Where(f => !live.Contains(f.Id)).ToList();
        foreach (var batch in gone.Chunk(FloorBatch))
        {
            var count = new TxnRequest();
            foreach (var (_, id) in batch)
                count.Success.Add(new RequestOp { RequestRange = new RangeRequest { Key = Key($"events/{id:x16}/"), RangeEnd = RangeEnd(Key($"events/{id:x16}/")), CountOnly = true } });
            var counted = await CallAsync((deadline, ct) => _client.TransactionAsync(count, null, deadline, ct), cancellationToken).ConfigureAwait(false);
            var forget = new TxnRequest();
            for (int i = 0; i < batch.Length; i++)
            {
                if (counted.Responses[i].ResponseRange.Count > 0)
                    continue;
                var (kv, id) = batch[i];
                forget.Compare.Add(new Compare { Key = kv.Key, Target = Compare.Types.CompareTarget.Mod, Result = Compare.Types.CompareResult.Equal, ModRevision = kv.ModRevision });
                forget.Compare.Add(new Compare { Key = CacheKey(id), Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 });
                forget.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = kv.Key } });
            }
            if (forget.Success.Count > 0)
                await CallAsync((deadline, ct) => _client.TransactionAsync(forget, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        }
    }

    private async Task<List<string>> KeysAsync(string part, CancellationToken cancellationToken)
    {
        var request = new RangeRequest { Key = Key(part), RangeEnd = RangeEnd(Key(part)), KeysOnly = true };
        var response = await CallAsync((deadline, ct) => _client.GetAsync(request, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        return response.Kvs.Select(kv => kv.Key.ToStringUtf8()).ToList();
    }

    public async Task<IReadOnlyList<JoinTokenRecord>> JoinTokensAsync(CancellationToken cancellationToken)
    {
        var range = new RangeRequest { Key = Key("tokens/"), RangeEnd = RangeEnd(Key("tokens/")) };
        var response = await CallAsync((deadline, ct) => _client.GetAsync(range, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        return response.Kvs.Select(kv => JsonSerializer.Deserialize<JoinTokenRecord>(kv.Value.Span, RecordJson.Options)!).ToList();
    }

    public async Task<bool> PingAsync(CancellationToken cancellationToken)
    {
        // A health probe wants an answer within its own timeout: a member that does not answer in a second is not healthy.
        using var bounded = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        bounded.CancelAfter(PingTimeout);
        try
        {
            return await GetAsync("meta/schema", bounded.Token).ConfigureAwait(false) is not null;
        }
        catch (Exception e) when (e is StoreUnavailableException || e is OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            return false;
        }
    }

    public ValueTask DisposeAsync()
    {
        _client.Dispose();
        _gate.Dispose();
        return ValueTask.CompletedTask;
    }

    // An event as stored: the payload is a serialized CacheEvent, opaque here.
    private sealed record EventEnvelope(string Tenant, byte[] Payload);

    private async Task<Mvccpb.KeyValue?> GetAsync(string key, CancellationToken cancellationToken)
    {
        var response = await CallAsync((deadline, ct) => _client.GetAsync(new RangeRequest { Key = Key(key) }, null, deadline, ct), cancellationToken).ConfigureAwait(false);
        return response.Kvs.Count == 0 ? null : response.Kvs[0];
    }

    // Runs one call with a deadline; etcd's failures become StoreUnavailableException naming the endpoints.
    private async Task<T> CallAsync<T>(Func<DateTime, CancellationToken, Task<T>> call, CancellationToken cancellationToken, TimeSpan? timeout = null)
    {
        try
        {
            return await call(DateTime.UtcNow + (timeout ?? CallTimeout), cancellationToken).ConfigureAwait(false);
        }
        catch (RpcException e) when (e.StatusCode != StatusCode.Cancelled || !cancellationToken.IsCancellationRequested)
        {
            throw new StoreUnavailableException($"etcd {_endpoints} did not answer or refused: {e.Status.StatusCode} {e.Status.Detail}", e);
        }
        catch (OperationCanceledException e) when (!cancellationToken.IsCancellationRequested)
        {
            // A connection attempt that timed out (a member that does not answer, a TLS handshake that never completes).
            throw new StoreUnavailableException($"etcd {_endpoints} did not answer: {e.Message}", e);
        }
    }

    private ByteString Key(string key) => ByteString.CopyFromUtf8(_prefix + key);

    private ByteString CacheKey(ulong cacheId) => Key($"caches/{cacheId:x16}");

    private ByteString EventKey(ulong cacheId, long sequence) => Key($"events/{cacheId:x16}/{sequence:D19}");

    private (ulong CacheId, long Sequence) ParseEventKey(ByteString key)
    {
        // <prefix>events/<16 hex>/<19 digits>
        var rest = key.ToStringUtf8().AsSpan(_prefix.Length + "events/".Length);
        return (ulong.Parse(rest[..16], NumberStyles.HexNumber, CultureInfo.InvariantCulture), long.Parse(rest[17..], CultureInfo.InvariantCulture));
    }

    private ByteString LogKey(long sequence) => Key($"log/{sequence:D19}");

    private ByteString FloorKey(ulong cacheId) => Key($"floors/{cacheId:x16}");

    // A log entry: "<cache id, 16 hex> <append time, unix ms>".
    private static byte[] LogEntry(ulong cacheId, long appendedMs) => Encoding.UTF8.GetBytes(string.Create(CultureInfo.InvariantCulture, $"{cacheId:x16} {appendedMs}"));

    private static (ulong CacheId, long AppendedMs) ParseLogEntry(ByteString value)
    {
        var text = value.ToStringUtf8().AsSpan();
        return (ulong.Parse(text[..16], NumberStyles.HexNumber, CultureInfo.InvariantCulture), long.Parse(text[17..], CultureInfo.InvariantCulture));
    }

    private static long ParseFloor(Mvccpb.KeyValue kv) => long.Parse(kv.Value.ToStringUtf8(), CultureInfo.InvariantCulture);

    private static RequestOp Put(ByteString key, byte[] value) => new() { RequestPut = new PutRequest { Key = key, Value = ByteString.CopyFrom(value) } };

    // The end of the range of every key that starts with `prefix`: the prefix with its last byte one higher.
    private static ByteString RangeEnd(ByteString prefix)
    {
        byte[] end = prefix.ToByteArray();
        end[^1]++;
        return ByteString.CopyFrom(end);
    }
}

/// <summary>
/// The store did not answer (etcd unreachable, or no quorum); the message names the endpoints. Nothing was written,
/// unless <see cref="OutcomeUnknown"/>: a commit's answer was lost and could not be learnt after.
/// </summary>
public sealed class StoreUnavailableException : Exception
{
    public StoreUnavailableException(string message, Exception inner) : base(message, inner)
    {
    }

    /// <summary>The change may or may not have been made.</summary>
    public bool OutcomeUnknown { get; init; }
}

/// <summary>This manager is not (or no longer) the leader of the replicas sharing the store; the change was not made.</summary>
public sealed class StoreFencedException : Exception
{
    public StoreFencedException(string message) : base(message)
    {
    }
}

/// <summary>Another writer changed the state after this one read it; the change was not made.</summary>
public sealed class StoreConflictException : Exception
{
    public StoreConflictException(string message) : base(message)
    {
    }
}

using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Net.Http;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>
/// The cache manager's tenant API from .NET (Redy's client API, Table 1): <see cref="CreateAsync(ManagedCacheRequest, CancellationToken)"/>
/// rents a cache for an SLO and opens it; the returned <see cref="ManagedCache"/> reshapes and deletes it. Thread-safe;
/// one per manager and API key is enough for a process. Disposing it closes the caches it opened (without deleting them).
/// </summary>
/// <remarks>
/// A manager run as replicas (<see cref="RemoteCacheManagerOptions.Addresses"/>) is one manager to this client: every
/// call goes to the replica that answered last and, when that one is unavailable or not the leader, on to the leader
/// it names or the next replica, with waits after each round that found none, for up to
/// <see cref="RemoteCacheManagerOptions.CallTimeout"/>. Event streams resume on the new leader after the last event
/// they returned, and an open cache's lease renewals go on through the switch.
/// </remarks>
public sealed class RemoteCacheManagerClient : IAsyncDisposable, IDisposable
{
    // A call's waits between rounds of its replicas: short, since a new leader is elected within seconds and the call's
    // deadline bounds the whole; never longer than RetryLimit. The limit is what a call may still wait after the new
    // leader serves (it serves within a poll, 100 ms, of the old one's lease ending): at 500 ms that wait was a sixth of
    // the failover after a kill -9 (benchmarks/Manager failover); a round is a few refusals, cheap to repeat.
    private static readonly TimeSpan FailoverFirstWait = TimeSpan.FromMilliseconds(50);
    private static readonly TimeSpan FailoverWaitLimit = TimeSpan.FromMilliseconds(200);

    // A connection attempt to a replica whose host is gone (SYNs unanswered) gives up after this, so that one dead
    // address does not take a whole call's deadline while the next replica could answer.
    private static readonly TimeSpan ConnectLimit = TimeSpan.FromSeconds(5);

    private readonly HttpMessageHandler _handler;
    private readonly ManagerReplica[] _replicas;
    private ManagerReplica _preferred;  // where calls go first: the replica that answered last
    private readonly List<ManagedCache> _open = new();
    private bool _disposed;

    /// <summary>
    /// Creates a client of the manager at <see cref="RemoteCacheManagerOptions.Addresses"/> (one channel per replica);
    /// nothing is sent yet.
    /// </summary>
    /// <exception cref="ArgumentException">The options are not valid (the message names the option).</exception>
    public RemoteCacheManagerClient(RemoteCacheManagerOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        Options = options;
        Logger = options.Cache.LoggerFactory?.CreateLogger<RemoteCacheManagerClient>() ?? NullLogger<RemoteCacheManagerClient>.Instance;
        // One handler for every replica: it pools connections per host, and is disposed once, with the client.
        _handler = options.HttpHandler ?? new SocketsHttpHandler
        {
            // Pings on an idle connection are how a manager that vanished without closing it (a dead host) is noticed.
            KeepAlivePingDelay = TimeSpan.FromSeconds(15),
            KeepAlivePingTimeout = TimeSpan.FromSeconds(10),
            KeepAlivePingPolicy = HttpKeepAlivePingPolicy.WithActiveRequests,
            ConnectTimeout = options.CallTimeout < ConnectLimit ? options.CallTimeout : ConnectLimit,
            EnableMultipleHttp2Connections = true,
        };
        var addresses = options.Addresses.Count > 0 ? options.Addresses.ToList() : new List<Uri> { RemoteCacheManagerOptions.DefaultAddress };
        _replicas = addresses.Select((address, i) =>
        {
            var channel = GrpcChannel.ForAddress(address, new GrpcChannelOptions
            {
                HttpHandler = _handler,
                DisposeHttpClient = false,
                LoggerFactory = options.Cache.LoggerFactory is { } loggers ? new WarningsOnlyLoggerFactory(loggers) : null,
                // A replica the channel failed to reach is not tried again before its reconnect back-off ends (by default
                // 1 s, growing to 2 min): a replica restarted and then elected would refuse this client's calls at once for
                // that long. The client paces its own attempts (Failover), so the channel's wait stays within one of its rounds.
                InitialReconnectBackoff = FailoverFirstWait,
                MaxReconnectBackoff = FailoverWaitLimit,
            });
            CallInvoker invoker = channel.CreateCallInvoker();
            if (options.ApiKey is { } key)
                invoker = invoker.Intercept(metadata =>
                {
                    metadata.Add("authorization", "Bearer " + key);
                    return metadata;
                });
            return new ManagerReplica(i, address, channel, invoker);
        }).ToArray();
        _preferred = _replicas[0];
    }

    /// <summary>The address calls go to first: the replica that answered last (at first the first address).</summary>
    public Uri Address => Volatile.Read(ref _preferred).Address;

    /// <summary>The managers' addresses, as configured (<see cref="RemoteCacheManagerOptions.DefaultAddress"/> if none was).</summary>
    public IReadOnlyList<Uri> Addresses => _replicas.Select(r => r.Address).ToList();

    internal RemoteCacheManagerOptions Options { get; }

    internal ILogger Logger { get; }

    /// <summary>Creates a cache (Redy's Create) and opens it; see <see cref="CreateAsync(ManagedCacheRequest, CancellationToken)"/>.</summary>
    public Task<ManagedCache> CreateAsync(long capacity, RemoteCacheSlo? slo, TimeSpan? duration, string? populateFrom = null,
                                          CancellationToken cancellationToken = default) =>
        CreateAsync(new ManagedCacheRequest { Capacity = capacity, Slo = slo, Duration = duration, PopulateFrom = populateFrom }, cancellationToken);

    /// <summary>
    /// Creates a cache: the manager turns the SLO into a configuration and places the cache on the cheapest servers
    /// that carry it; the cache is then opened with the manager's capabilities, filled from
    /// <see cref="ManagedCacheRequest.PopulateFrom"/> if asked, and returned with its lease renewed in the background.
    /// All or nothing: if opening or filling fails, or the call is cancelled, the cache is deallocated again.
    /// </summary>
    /// <exception cref="ArgumentException">The request is not valid.</exception>
    /// <exception cref="RemoteCacheManagerException">The manager refused (no capacity, quota, no configuration meets the SLO) or did not answer.</exception>
    /// <exception cref="RemoteCacheException">A server of the cache could not be reached.</exception>
    public async Task<ManagedCache> CreateAsync(ManagedCacheRequest request, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(request);
        ThrowIfDisposed();
        if (request.Problem() is { } problem)
            throw new ArgumentException($"the cache request {problem}", nameof(request));
        var allocate = new AllocateRequest
        {
            Capacity = (ulong)Options.Cache.ServerBytesFor(request.Capacity),  // an encrypted cache's trailers too
            Slo = Contract.ToProto(request.Slo),
            RecordSize = (uint)(request.Slo?.RecordSize ?? 0),
            Name = request.Name ?? "",
            Transport = request.Transport ?? "",
            // One per logical Create, the same across its retries: a retry whose first attempt placed the cache gets it back.
            RequestId = request.RequestId ?? Guid.NewGuid().ToString("N"),
        };
        if (request.Duration is { } duration)
            allocate.Duration = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(duration);
        if (request.Lease is { } lease)
            allocate.Lease = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(lease);
        // Retried like every call (CallAsync); safe because of the request_id: an attempt whose answer was lost placed
        // the cache, and the retry gets that cache back instead of a second one.
        var response = await CallAsync("Allocate", (m, o) => m.Grpc.AllocateAsync(allocate, o), cancellationToken).ConfigureAwait(false);
        var cache = response.Cache;
        ManagedCache? managed = null;
        try
        {
            managed = await OpenCoreAsync(cache, (long)response.EventSequence, request.Exclusive, cancellationToken).ConfigureAwait(false);
            if (request.PopulateFrom is { } path)
            {
                long length = Math.Min(request.Capacity, new FileInfo(path).Length);
                var fill = managed.StartPopulate(path, length);
                if (!request.PopulateInBackground)
                    await fill.WaitAsync(cancellationToken).ConfigureAwait(false);
            }
            return managed;
        }
        catch
        {
            // All or nothing: the cache goes back.
            if (managed is not null)
                await managed.DeleteQuietlyAsync("its creation failed").ConfigureAwait(false);
            else
                await DeallocateQuietlyAsync(cache.CacheId).ConfigureAwait(false);
            throw;
        }
    }

    /// <summary>
    /// Opens a cache this tenant already has (created by another process, or by the command line): its lease is renewed
    /// and its events followed from its allocation on while it is open here.
    /// </summary>
    /// <exception cref="RemoteCacheManagerException">No such cache of this tenant (<see cref="StatusCode.NotFound"/>), or no answer.</exception>
    public async Task<ManagedCache> OpenAsync(ulong cacheId, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var cache = await CallAsync("GetCache", (m, o) => m.Grpc.GetCacheAsync(new GetCacheRequest { CacheId = cacheId }, o), cancellationToken).ConfigureAwait(false);
        return await OpenCoreAsync(cache, 1, exclusive: false, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>The caches of this tenant, oldest first.</summary>
    public async Task<IReadOnlyList<ManagedCacheInfo>> ListAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var response = await CallAsync("ListCaches", (m, o) => m.Grpc.ListCachesAsync(new ListCachesRequest(), o), cancellationToken).ConfigureAwait(false);
        return response.Caches.Select(Contract.FromProto).ToList();
    }

    /// <summary>
    /// Deletes a cache of this tenant by id (one opened here is better deleted with <see cref="ManagedCache.DeleteAsync"/>).
    /// When an attempt's outcome was lost (the replica went away while it ran) and the retry finds no such cache, the
    /// first attempt deleted it: that counts as done.
    /// </summary>
    /// <exception cref="RemoteCacheManagerException">No such cache of this tenant (<see cref="StatusCode.NotFound"/>), or no answer.</exception>
    public async Task DeleteAsync(ulong cacheId, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        await DeallocateAsync(cacheId, cancellationToken).ConfigureAwait(false);
    }

    // Deallocate: a retry after an attempt whose outcome is unknown (not a not-leader refusal, which carried nothing
    // out) may find the cache gone because that attempt deleted it; NOT_FOUND then means done. A NOT_FOUND on the first
    // attempt, or after not-leader refusals only, is the caller's to see.
    internal Task DeallocateAsync(ulong cacheId, CancellationToken cancellationToken) =>
        CallAsync("Deallocate", (m, o) => m.Grpc.DeallocateAsync(new DeallocateRequest { CacheId = cacheId }, o), cancellationToken,
                  notFoundOnRetry: () => new DeallocateResponse());

    /// <summary>
    /// The events of a cache of this tenant from <paramref name="fromSequence"/> on (1: all of them; 0: only new ones),
    /// then live ones, until the cache is deleted (its <see cref="CacheDeletedEvent"/> is the last). A lost connection,
    /// a manager restart or a change of leader among replicas (a follower's refusal, a deposed leader ending the stream)
    /// is bridged: the stream resumes on the leader named, or the next replica, after the last event it returned, so
    /// none is missed or repeated. Events of kinds this client does not know (a newer manager) are skipped.
    /// </summary>
    /// <exception cref="RemoteCacheManagerException">
    /// No such cache of this tenant, or the API key was refused; or <see cref="StatusCode.OutOfRange"/> with
    /// <see cref="RemoteCacheManagerException.EventsCompacted"/>: the events from <paramref name="fromSequence"/> (or after
    /// a long interruption) were compacted away by the manager's retention, and resuming would skip some.
    /// </exception>
    public async IAsyncEnumerable<ManagedCacheEvent> WatchAsync(ulong cacheId, long fromSequence = 1,
                                                                [EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(fromSequence);
        ThrowIfDisposed();
        // No deadline: the stream is retried until cancelled, across replicas as a call is, with RetryLimit's waits
        // between rounds (it may wait out a long outage).
        var failover = StartFailover(new Backoff(Options.RetryLimit));
        long next = fromSequence;
        while (true)
        {
            var replica = failover.Replica;
            RpcException? interrupted = null;
            using (var call = replica.Grpc.WatchEvents(new WatchEventsRequest { CacheId = cacheId, FromSequence = (ulong)next }, cancellationToken: cancellationToken))
            {
                var stream = call.ResponseStream;
                while (true)
                {
                    CacheEvent e;
                    try
                    {
                        if (!await stream.MoveNext(cancellationToken).ConfigureAwait(false))
                            break;  // the replica is shutting down: resume from `next` on another
                        e = stream.Current;
                    }
                    catch (RpcException ex) when (!cancellationToken.IsCancellationRequested && IsTransient(ex.StatusCode))
                    {
                        // Also a follower's refusal and a deposed leader's end of the stream (UNAVAILABLE, not-leader).
                        interrupted = ex;
                        break;
                    }
                    catch (RpcException ex) when (!cancellationToken.IsCancellationRequested)
                    {
                        Prefer(replica);  // it answered, with a refusal
                        throw RemoteCacheManagerException.From(ex, "WatchEvents", replica.Address);
                    }
                    catch (RpcException ex)
                    {
                        throw new OperationCanceledException("WatchEvents was cancelled", ex, cancellationToken);
                    }
                    failover.Answered();
                    Prefer(replica);
                    next = (long)e.Sequence + 1;
                    if (Contract.FromProto(e) is { } managed)
                    {
                        yield return managed;
                        if (managed is CacheDeletedEvent)
                            yield break;
                    }
                }
            }
            string said = interrupted is null ? "the stream ended" : failover.Describe(interrupted);
            var wait = failover.MoveOn(interrupted);
            Log.WatchInterrupted(Logger, $"cache {cacheId}", replica.Address, said, next, failover.Replica.Address, wait.TotalMilliseconds);
            await Task.Delay(wait, cancellationToken).ConfigureAwait(false);
        }
    }

    // Failures a retry can outlive: the manager down or restarting, a call cut, a watcher that fell behind.
    private static bool IsTransient(StatusCode status) =>
        status is StatusCode.Unavailable or StatusCode.Cancelled or StatusCode.DeadlineExceeded or StatusCode.Internal or StatusCode.Unknown
            or StatusCode.ResourceExhausted or StatusCode.Aborted;

    /// <summary>
    /// Asks every manager replica's health service (grpc.health.v1) at once whether it serves: a replica serves while its
    /// store answers and it knows a leader. One answer per address, in <see cref="Addresses"/> order; each replica has
    /// <see cref="RemoteCacheManagerOptions.CallTimeout"/> to answer. Needs no API key.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    public async Task<IReadOnlyList<RemoteCacheManagerState>> CheckManagersAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var checks = _replicas.Select(async replica =>
        {
            try
            {
                var options = new CallOptions(deadline: DateTime.UtcNow + Options.CallTimeout, cancellationToken: cancellationToken);
                var answer = await replica.Health.CheckAsync(new Grpc.Health.V1.HealthCheckRequest(), options).ConfigureAwait(false);
                return new RemoteCacheManagerState(replica.Address, answer.Status == Grpc.Health.V1.HealthCheckResponse.Types.ServingStatus.Serving,
                                                   answer.Status.ToString());
            }
            catch (RpcException e) when (!cancellationToken.IsCancellationRequested)
            {
                string detail = e.Status.Detail.Length <= ContractLimits.MaxStringLength ? e.Status.Detail : e.Status.Detail[..ContractLimits.MaxStringLength] + "…";
                return new RemoteCacheManagerState(replica.Address, false, $"{e.StatusCode}: {detail}");
            }
            catch (RpcException e)
            {
                throw new OperationCanceledException("the managers' health check was cancelled", e, cancellationToken);
            }
        });
        return await Task.WhenAll(checks).ConfigureAwait(false);
    }

    /// <summary>The caches opened through this client and not closed yet.</summary>
    public IReadOnlyList<ManagedCache> OpenCaches
    {
        get
        {
            lock (_open)
                return _open.ToList();
        }
    }

    // ---- operators -------------------------------------------------------------------------------------------

    /// <summary>The manager's servers and what their last probes said (needs an API key with the operator role).</summary>
    public async Task<IReadOnlyList<ManagedServerInfo>> ListServersAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var response = await CallAsync("ListServers", (m, o) => m.Pool.ListServersAsync(new ListServersRequest(), o), cancellationToken).ConfigureAwait(false);
        return response.Servers.Select(Contract.FromProto).ToList();
    }

    /// <summary>
    /// Issues a join token (operator role): servers that present it join the pool by themselves until it expires
    /// (<paramref name="ttl"/>, at most 365 days) or is revoked. The text is returned this once. A call retried after a
    /// lost answer may have issued a token nobody holds; it joins nothing and ends with its TTL.
    /// </summary>
    public async Task<IssuedJoinToken> IssueJoinTokenAsync(TimeSpan ttl, string? description = null, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var request = new IssueJoinTokenRequest { Ttl = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(ttl), Description = description ?? "" };
        var response = await CallAsync("IssueJoinToken", (m, o) => m.Pool.IssueJoinTokenAsync(request, o), cancellationToken).ConfigureAwait(false);
        return new IssuedJoinToken(Contract.FromProto(response.Token), response.Secret);
    }

    /// <summary>The join tokens the manager keeps (operator role): live ones, and ended ones for a day after they ended.</summary>
    public async Task<IReadOnlyList<JoinTokenInfo>> ListJoinTokensAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var response = await CallAsync("ListJoinTokens", (m, o) => m.Pool.ListJoinTokensAsync(new ListJoinTokensRequest(), o), cancellationToken).ConfigureAwait(false);
        return response.Tokens.Select(Contract.FromProto).ToList();
    }

    /// <summary>Revokes a join token (operator role): later joins with it are refused; servers that joined with it stay.</summary>
    public async Task<JoinTokenInfo> RevokeJoinTokenAsync(string tokenId, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var response = await CallAsync("RevokeJoinToken", (m, o) => m.Pool.RevokeJoinTokenAsync(new RevokeJoinTokenRequest { TokenId = tokenId }, o), cancellationToken)
                             .ConfigureAwait(false);
        return Contract.FromProto(response);
    }

    /// <summary>
    /// Announces that a server will be reclaimed after <paramref name="notice"/> (operator role): the watchers of its
    /// cache get a <see cref="ReclaimNoticeEvent"/>; returns the deadline.
    /// </summary>
    public async Task<DateTimeOffset> ReclaimServerAsync(string serverId, TimeSpan notice, CancellationToken cancellationToken = default)
    {
        ArgumentException.ThrowIfNullOrEmpty(serverId);
        ThrowIfDisposed();
        var request = new ReclaimServerRequest { ServerId = serverId, Notice = Google.Protobuf.WellKnownTypes.Duration.FromTimeSpan(notice) };
        var response = await CallAsync("ReclaimServer", (m, o) => m.Pool.ReclaimServerAsync(request, o), cancellationToken).ConfigureAwait(false);
        return response.Deadline.ToDateTimeOffset();
    }

    private async Task<ManagedCache> OpenCoreAsync(Cache cache, long watchFrom, bool exclusive, CancellationToken cancellationToken)
    {
        var template = Options.Cache;
        var name = string.IsNullOrEmpty(cache.Name) ? $"cache {cache.CacheId}" : $"{cache.Name} (cache {cache.CacheId})";
        var options = new RemoteCacheOptions
        {
            CacheId = cache.CacheId,
            Token = cache.Token,
            Capabilities = cache.Servers.Select(s => s.Capability).ToList(),
            RegionsPerServer = (int)cache.Servers[0].Regions,
            Config = Contract.FromProto(cache.Config),
            Name = name,
            Exclusive = exclusive,
            OperationTimeout = template.OperationTimeout,
            ConnectTimeout = template.ConnectTimeout,
            Lanes = template.Lanes,
            SessionCapacity = template.SessionCapacity,
            LoggerFactory = template.LoggerFactory,
            MeterFactory = template.MeterFactory,
            EncryptionKey = template.EncryptionKey,
            EncryptionKeyProvider = template.EncryptionKeyProvider,
            EncryptionBlockSize = template.EncryptionBlockSize,
            Reconnect = false,  // the manager replaces a failed server with another (ManagedCache.Replacement)
        };
        var client = await RemoteCacheClient.OpenAsync(cache.Servers.Select(s => s.Endpoint).ToList(), options, cancellationToken).ConfigureAwait(false);
        var managed = new ManagedCache(this, cache, client, options, name, watchFrom);
        lock (_open)
        {
            if (_disposed)
            {
                managed.Dispose();
                throw new ObjectDisposedException(nameof(RemoteCacheManagerClient));
            }
            _open.Add(managed);
        }
        Log.ManagedCacheOpened(Logger, name, cache.Servers.Count, (long)cache.Capacity, options.Config.Value);
        return managed;
    }

    internal void Forget(ManagedCache cache)
    {
        lock (_open)
            _open.Remove(cache);
    }

    internal async Task DeallocateQuietlyAsync(ulong cacheId)
    {
        try
        {
            await DeallocateAsync(cacheId, CancellationToken.None).ConfigureAwait(false);
        }
        catch (RemoteCacheManagerException e)
        {
            Log.DeallocateFailed(Logger, cacheId, e.Message);
        }
    }

    /// <summary>
    /// One unary call, the one way every call reaches the manager: attempts on the replicas (<see cref="Failover"/>)
    /// while they answer UNAVAILABLE (down, restarting, the connection cut, not the leader), all within the deadline of
    /// <see cref="RemoteCacheManagerOptions.CallTimeout"/> (or <paramref name="timeout"/>) from the first; the replica that
    /// answers is where the next call goes first. Other refusals, and UNAVAILABLE at the deadline naming every address
    /// tried, as <see cref="RemoteCacheManagerException"/>. Only calls that are safe to repeat come here: each either
    /// changes nothing the second time (RenewLease, GetCache, a MoveRegion of the same regions), names itself
    /// (Allocate's request_id) or is told apart: <paramref name="notFoundOnRetry"/> gives the answer when NOT_FOUND comes
    /// after an attempt whose outcome is unknown (UNAVAILABLE other than a not-leader refusal), which then did what the
    /// call asked and removed what the retry looked for (Deallocate).
    /// </summary>
    internal async Task<T> CallAsync<T>(string call, Func<ManagerReplica, CallOptions, AsyncUnaryCall<T>> start, CancellationToken cancellationToken,
                                        TimeSpan? timeout = null, Func<T>? notFoundOnRetry = null)
    {
        var deadline = DateTime.UtcNow + (timeout ?? Options.CallTimeout);
        var failover = StartFailover(new Backoff(FailoverFirstWait, Options.RetryLimit < FailoverWaitLimit ? Options.RetryLimit : FailoverWaitLimit));
        var conflicts = new Backoff(FailoverFirstWait, Options.RetryLimit < FailoverWaitLimit ? Options.RetryLimit : FailoverWaitLimit);
        bool outcomeUnknown = false;
        RpcException? unavailable = null;
        while (true)
        {
            var replica = failover.Replica;
            RpcException failed;
            try
            {
                using var rpc = start(replica, new CallOptions(deadline: deadline, cancellationToken: cancellationToken));
                var response = await rpc.ResponseAsync.ConfigureAwait(false);
                Prefer(replica);
                return response;
            }
            catch (RpcException e) when (e.StatusCode == StatusCode.Cancelled && cancellationToken.IsCancellationRequested)
            {
                throw new OperationCanceledException($"{call} was cancelled", cancellationToken);
            }
            catch (RpcException e)
            {
                failed = e;
            }
            if (failed.StatusCode == StatusCode.DeadlineExceeded)
            {
                // The deadline is the call's, not the attempt's: no time is left. A replica that hung (its host gone
                // without closing the connection) is not tried first by the next call.
                PassOver(replica);
                if (unavailable is null)
                {
                    failover.Note(failover.Describe(failed));
                    throw RemoteCacheManagerException.NoAnswer(failed, call, failover.Tried);
                }
                // The deadline passed while the replicas were refusing: what they said is the answer (UNAVAILABLE).
                throw RemoteCacheManagerException.NoAnswer(unavailable, call, failover.Tried);
            }
            if (failed.StatusCode == StatusCode.Aborted)
            {
                // ABORTED is the manager's store conflict: another write committed first (seen when the leader's term
                // changes under a call: it stepped down and was elected again, reloading the state). Nothing was done and
                // the manager re-read the state, so the same call again is built on it: retried on the same replica,
                // within the deadline, rather than handed to the application as a failure (streams already retry it).
                Prefer(replica);
                var again = conflicts.Next();
                if (DateTime.UtcNow + again >= deadline)
                    throw RemoteCacheManagerException.From(failed, call, replica.Address);
                Log.CallRetried(Logger, LogLevel.Information, call, replica.Address, failover.Describe(failed), replica.Address, again.TotalMilliseconds);
                await Task.Delay(again, cancellationToken).ConfigureAwait(false);
                continue;
            }
            if (failed.StatusCode != StatusCode.Unavailable)
            {
                Prefer(replica);  // it answered, with a refusal
                if (failed.StatusCode == StatusCode.NotFound && outcomeUnknown && notFoundOnRetry is not null)
                    return notFoundOnRetry();
                throw RemoteCacheManagerException.From(failed, call, replica.Address);
            }
            unavailable = failed;
            outcomeUnknown |= !Failover.IsNotLeader(failed);
            string said = failover.Describe(failed);
            var wait = failover.MoveOn(failed);
            if (DateTime.UtcNow + wait >= deadline)
                throw RemoteCacheManagerException.NoAnswer(failed, call, failover.Tried);
            // Within a round the next replica is tried at once; a round that found none ends in a wait, worth a warning.
            Log.CallRetried(Logger, wait > TimeSpan.Zero ? LogLevel.Warning : LogLevel.Information, call, replica.Address, said, failover.Replica.Address,
                            wait.TotalMilliseconds);
            if (wait > TimeSpan.Zero)
                await Task.Delay(wait, cancellationToken).ConfigureAwait(false);
        }
    }

    private Failover StartFailover(Backoff backoff) => new(_replicas, Volatile.Read(ref _preferred), backoff);

    // Calls go first to the replica that answered last (concurrent calls may disagree; the last answer wins).
    private void Prefer(ManagerReplica replica) => Volatile.Write(ref _preferred, replica);

    // Unless another call found a replica meanwhile, the next call starts after this one.
    private void PassOver(ManagerReplica replica) =>
        Interlocked.CompareExchange(ref _preferred, _replicas[(replica.Index + 1) % _replicas.Length], replica);

    private void ThrowIfDisposed() => ObjectDisposedException.ThrowIf(_disposed, this);

    /// <summary>Closes the caches opened here (they stay allocated until deleted or their lease ends) and the channels.</summary>
    public async ValueTask DisposeAsync()
    {
        List<ManagedCache> open;
        lock (_open)
        {
            if (_disposed)
                return;
            _disposed = true;
            open = _open.ToList();
        }
        foreach (var cache in open)
            await cache.DisposeAsync().ConfigureAwait(false);
        foreach (var replica in _replicas)
            replica.Channel.Dispose();
        _handler.Dispose();
    }

    /// <inheritdoc cref="DisposeAsync"/>
    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();
}

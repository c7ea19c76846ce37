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
public sealed class RemoteCacheManagerClient : IAsyncDisposable, IDisposable
{
    private readonly GrpcChannel _channel;
    private readonly List<ManagedCache> _open = new();
    private bool _disposed;

    /// <summary>Creates a client of the manager at <see cref="RemoteCacheManagerOptions.Address"/>; nothing is sent yet.</summary>
    /// <exception cref="ArgumentException">The options are not valid (the message names the option).</exception>
    public RemoteCacheManagerClient(RemoteCacheManagerOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        Options = options;
        Logger = options.Cache.LoggerFactory?.CreateLogger<RemoteCacheManagerClient>() ?? NullLogger<RemoteCacheManagerClient>.Instance;
        var handler = options.HttpHandler ?? new SocketsHttpHandler
        {
            // Pings on an idle connection are how a manager that vanished without closing it (a dead host) is noticed.
            KeepAlivePingDelay = TimeSpan.FromSeconds(15),
            KeepAlivePingTimeout = TimeSpan.FromSeconds(10),
            KeepAlivePingPolicy = HttpKeepAlivePingPolicy.WithActiveRequests,
            ConnectTimeout = options.CallTimeout,
            EnableMultipleHttp2Connections = true,
        };
        _channel = GrpcChannel.ForAddress(options.Address, new GrpcChannelOptions
        {
            HttpHandler = handler,
            DisposeHttpClient = true,
            LoggerFactory = options.Cache.LoggerFactory,
        });
        CallInvoker invoker = _channel.CreateCallInvoker();
        if (options.ApiKey is { } key)
            invoker = invoker.Intercept(metadata =>
            {
                metadata.Add("authorization", "Bearer " + key);
                return metadata;
            });
        Grpc = new CacheManager.CacheManagerClient(invoker);
        Pool = new ServerPool.ServerPoolClient(invoker);
    }

    /// <summary>The manager's address.</summary>
    public Uri Address => Options.Address;

    internal RemoteCacheManagerOptions Options { get; }

    internal ILogger Logger { get; }

    internal CacheManager.CacheManagerClient Grpc { get; }

    internal ServerPool.ServerPoolClient Pool { get; }

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
            Capacity = (ulong)request.Capacity,
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
        var response = await AllocateAsync(allocate, cancellationToken).ConfigureAwait(false);
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

    // Allocate, retried while the manager is unavailable (down, restarting, the connection cut) for up to CallTimeout
    // from the first attempt, waits from Backoff. Safe because of the request_id: an attempt whose answer was lost
    // placed the cache, and the retry gets that cache back instead of a second one.
    private async Task<AllocateResponse> AllocateAsync(AllocateRequest allocate, CancellationToken cancellationToken)
    {
        var retry = new Backoff(Options.RetryLimit);
        var until = DateTime.UtcNow + Options.CallTimeout;
        while (true)
        {
            try
            {
                return await CallAsync("Allocate", o => Grpc.AllocateAsync(allocate, o), cancellationToken).ConfigureAwait(false);
            }
            catch (RemoteCacheManagerException e) when (e.Status == StatusCode.Unavailable && DateTime.UtcNow < until)
            {
                var delay = retry.Next();
                Log.AllocateRetried(Logger, delay.TotalMilliseconds, e.Message);
                await Task.Delay(delay, cancellationToken).ConfigureAwait(false);
            }
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
        var cache = await CallAsync("GetCache", o => Grpc.GetCacheAsync(new GetCacheRequest { CacheId = cacheId }, o), cancellationToken).ConfigureAwait(false);
        return await OpenCoreAsync(cache, 1, exclusive: false, cancellationToken).ConfigureAwait(false);
    }

    /// <summary>The caches of this tenant, oldest first.</summary>
    public async Task<IReadOnlyList<ManagedCacheInfo>> ListAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var response = await CallAsync("ListCaches", o => Grpc.ListCachesAsync(new ListCachesRequest(), o), cancellationToken).ConfigureAwait(false);
        return response.Caches.Select(Contract.FromProto).ToList();
    }

    /// <summary>Deletes a cache of this tenant by id (one opened here is better deleted with <see cref="ManagedCache.DeleteAsync"/>).</summary>
    public async Task DeleteAsync(ulong cacheId, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        await CallAsync("Deallocate", o => Grpc.DeallocateAsync(new DeallocateRequest { CacheId = cacheId }, o), cancellationToken).ConfigureAwait(false);
    }

    /// <summary>
    /// The events of a cache of this tenant from <paramref name="fromSequence"/> on (1: all of them; 0: only new ones),
    /// then live ones, until the cache is deleted (its <see cref="CacheDeletedEvent"/> is the last). A lost connection
    /// or a manager restart is bridged: the stream resumes after the last event it returned, so none is missed or
    /// repeated. Events of kinds this client does not know (a newer manager) are skipped.
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
        var retry = new Backoff(Options.RetryLimit);
        long next = fromSequence;
        while (true)
        {
            using var call = Grpc.WatchEvents(new WatchEventsRequest { CacheId = cacheId, FromSequence = (ulong)next }, cancellationToken: cancellationToken);
            var stream = call.ResponseStream;
            while (true)
            {
                CacheEvent e;
                try
                {
                    if (!await stream.MoveNext(cancellationToken).ConfigureAwait(false))
                        break;  // the manager is shutting down: resume from `next` with the next one
                    e = stream.Current;
                }
                catch (RpcException ex) when (!cancellationToken.IsCancellationRequested && IsTransient(ex.StatusCode))
                {
                    Log.WatchInterrupted(Logger, $"cache {cacheId}", next, ex.StatusCode, ex.Status.Detail);
                    break;
                }
                catch (RpcException ex) when (!cancellationToken.IsCancellationRequested)
                {
                    throw RemoteCacheManagerException.From(ex, "WatchEvents", Address);
                }
                catch (RpcException ex)
                {
                    throw new OperationCanceledException("WatchEvents was cancelled", ex, cancellationToken);
                }
                retry.Reset();
                next = (long)e.Sequence + 1;
                if (Contract.FromProto(e) is { } managed)
                {
                    yield return managed;
                    if (managed is CacheDeletedEvent)
                        yield break;
                }
            }
            await Task.Delay(retry.Next(), cancellationToken).ConfigureAwait(false);
        }
    }

    // Failures a retry can outlive: the manager down or restarting, a call cut, a watcher that fell behind.
    private static bool IsTransient(StatusCode status) =>
        status is StatusCode.Unavailable or StatusCode.Cancelled or StatusCode.DeadlineExceeded or StatusCode.Internal or StatusCode.Unknown
            or StatusCode.ResourceExhausted or StatusCode.Aborted;

    // ---- operators -------------------------------------------------------------------------------------------

    /// <summary>The manager's servers and what their last probes said (needs an API key with the operator role).</summary>
    public async Task<IReadOnlyList<ManagedServerInfo>> ListServersAsync(CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        var response = await CallAsync("ListServers", o => Pool.ListServersAsync(new ListServersRequest(), o), cancellationToken).ConfigureAwait(false);
        return response.Servers.Select(Contract.FromProto).ToList();
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
        var response = await CallAsync("ReclaimServer", o => Pool.ReclaimServerAsync(request, o), cancellationToken).ConfigureAwait(false);
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
        };
        var client = await RemoteCacheClient.OpenAsync(cache.Servers.Select(s => s.Endpoint).ToList(), options, cancellationToken).ConfigureAwait(false);
        var managed = new ManagedCache(this, cache, client, name, watchFrom);
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
            await CallAsync("Deallocate", o => Grpc.DeallocateAsync(new DeallocateRequest { CacheId = cacheId }, o), CancellationToken.None).ConfigureAwait(false);
        }
        catch (RemoteCacheManagerException e)
        {
            Log.DeallocateFailed(Logger, cacheId, e.Message);
        }
    }

    /// <summary>
    /// One unary call with the deadline of <see cref="RemoteCacheManagerOptions.CallTimeout"/> (or <paramref name="timeout"/>);
    /// refusals as <see cref="RemoteCacheManagerException"/>.
    /// </summary>
    internal async Task<T> CallAsync<T>(string call, Func<CallOptions, AsyncUnaryCall<T>> start, CancellationToken cancellationToken, TimeSpan? timeout = null)
    {
        try
        {
            using var rpc = start(new CallOptions(deadline: DateTime.UtcNow + (timeout ?? Options.CallTimeout), cancellationToken: cancellationToken));
            return await rpc.ResponseAsync.ConfigureAwait(false);
        }
        catch (RpcException e) when (e.StatusCode != StatusCode.Cancelled || !cancellationToken.IsCancellationRequested)
        {
            throw RemoteCacheManagerException.From(e, call, Address);
        }
        catch (RpcException) when (cancellationToken.IsCancellationRequested)
        {
            throw new OperationCanceledException($"{call} was cancelled", cancellationToken);
        }
    }

    private void ThrowIfDisposed() => ObjectDisposedException.ThrowIf(_disposed, this);

    /// <summary>Closes the caches opened here (they stay allocated until deleted or their lease ends) and the channel.</summary>
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
        _channel.Dispose();
    }

    /// <inheritdoc cref="DisposeAsync"/>
    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();
}

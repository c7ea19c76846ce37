using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Interop;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>
/// A cache in remote memory: a flat byte-addressable space [0, <see cref="Capacity"/>) lent by one or
/// more cache servers. Thread-safe; requests from one thread keep program order.
/// </summary>
/// <remarks>
/// Callers are spread over a few native sessions ("lanes"). A thread awaiting an operation moves the
/// data itself for a few microseconds (which also sends a partly filled batch); a background poller
/// finishes whatever is left. Completions run on the thread that harvested them.
/// </remarks>
public sealed partial class RemoteCacheClient : IAsyncDisposable, IDisposable
{
    private readonly CacheHandle _cache;
    private int _endpointCount;         // changed by Grow and Shrink under _resize
    private long _capacity;
    private readonly EncryptedLayout? _encrypted;  // null: a plain cache
    private readonly object _resize = new();
    private readonly ILogger _logger;
    private readonly Instruments _instruments;
    private int _failuresLogged;  // bit (-status) set once a failing status was logged
    private readonly Lane[] _lanes;
    private readonly Thread _poller;
    private readonly ManualResetEventSlim _work = new(false);      // new work on an idle client
    // Hand-offs wake a poller that stays out of busy callers' way; a separate event, so that their new work (which
    // sets _work) costs them no futex wake while it sleeps.
    private readonly ManualResetEventSlim _handoffs = new(false);
    private volatile bool _stopping;
    private int _disposed;

    private RemoteCacheClient(CacheHandle cache, RemoteCacheOptions options, SloPlan? plan, int endpointCount, ILogger logger)
    {
        SloPlan = plan;
        SloModelPath = string.IsNullOrWhiteSpace(options.SloModelPath) ? null : options.SloModelPath;
        _cache = cache;
        _endpointCount = endpointCount;
        _logger = logger;
        Name = options.EffectiveName;
        CacheId = options.CacheId;
        IsExclusive = options.Exclusive;
        ConfigGiven = options.Config is not null || plan is not null;
        _capacity = (long)NativeMethods.CacheCapacity(cache);
        _encrypted = options.Encrypted ? new EncryptedLayout(options.EncryptionBlockSize) : null;
        var instruments = Instruments.For(options.MeterFactory);
        Metrics = new ClientMetrics(instruments, Name);
        var lanes = new List<Lane>();
        try
        {
            for (int i = 0; i < options.Lanes; i++)
                lanes.Add(new Lane(this, OpenNativeSession(), Math.Max(MinLaneCapacity, options.SessionCapacity)));
        }
        catch
        {
            foreach (var lane in lanes)
                lane.Dispose();
            throw;
        }
        _lanes = lanes.ToArray();
        _laneHolders = _lanes.Select(_ => new List<Thread>()).ToArray();
        _instruments = instruments;
        instruments.Register(this, Metrics.CacheTag);
        _poller = new Thread(PollerLoop) { IsBackground = true, Name = $"RemoteCache poller ({Name})" };
        _poller.Start();
        _operationTimeout = options.OperationTimeout;
        for (int i = 0; i < endpointCount; i++)
            _holderCapabilities.Add(options.Capabilities is { Count: > 0 } given ? given[i] : null);
        if (options.Reconnect)
        {
            _recoveryStop = new CancellationTokenSource();
            _recovery = WatchServersAsync(options.ReconnectDelay, options.ReconnectMaxDelay, _recoveryStop.Token);
        }
        if (plan is { Config: { } planned })
        {
            var samples = new LatencySamples();
            Metrics.Samples = samples;
            _sloMonitor = new SloMonitor(this, new SloTuner(plan.Model, plan.Slo, planned, plan.Cost), samples, plan.Slo.Window, logger);
        }
    }

    private readonly SloMonitor? _sloMonitor;
    private readonly TimeSpan _operationTimeout;

    /// <summary>
    /// Raised after each window of a cache opened for an SLO (<see cref="RemoteCacheOptions.Slo"/>), every
    /// <see cref="RemoteCacheSlo.Window"/>, on a timer thread: what the cache achieved, whether it met the SLO, and the
    /// configuration it switched to if it retuned. A handler that throws is logged and does not stop the watch.
    /// </summary>
    public event EventHandler<SloObservation>? SloObserved;

    /// <summary>The last window judged against the SLO, or null (no SLO, or no window yet).</summary>
    public SloObservation? LastSloObservation => _sloMonitor?.Last;

    /// <summary>1 while the last judged window met the SLO, 0 while not, null before one was judged or without an SLO.</summary>
    internal int? SloConformance => _sloMonitor?.Conformance;

    internal void RaiseSloObserved(SloObservation observation)
    {
        try
        {
            SloObserved?.Invoke(this, observation);
        }
        catch (Exception e)
        {
            Log.SloHandlerFailed(_logger, Name, e);
        }
    }

    // A lane's operation pool never goes below this, so that a tiny SessionCapacity still lets callbacks chain.
    private const int MinLaneCapacity = 16;

    /// <summary>
    /// Connects to every endpoint ("tcp:HOST:PORT", "shm:SOCKET_PATH", "verbs:HOST:PORT") and maps the cache onto
    /// their regions in order. Blocks for the connects (up to <see cref="RemoteCacheOptions.ConnectTimeout"/> per
    /// server); <see cref="OpenAsync"/> does not.
    /// </summary>
    /// <exception cref="ArgumentException">An option or endpoint is malformed (<see cref="RemoteCacheOptions.Validate"/>).</exception>
    /// <exception cref="RemoteCacheException">
    /// A server is unreachable (<see cref="RemoteCacheStatus.Disconnected"/>, <see cref="RemoteCacheStatus.Timeout"/>),
    /// refused admission (<see cref="RemoteCacheStatus.Auth"/>), lacks the memory (<see cref="RemoteCacheStatus.NoMemory"/>),
    /// is at a connection limit (<see cref="RemoteCacheStatus.Limit"/>), or the cache is open exclusively by another
    /// client, or open when an exclusive open was asked for (<see cref="RemoteCacheStatus.InUse"/>).
    /// </exception>
    /// <exception cref="InvalidOperationException">The native library is not the version this assembly needs.</exception>
    /// <exception cref="SloNotMetException">
    /// Opened for an SLO (<see cref="RemoteCacheOptions.Slo"/>) that no configuration of the model is predicted to meet
    /// (thrown before anything connects).
    /// </exception>
    public static RemoteCacheClient Open(IEnumerable<string> endpoints, RemoteCacheOptions options)
    {
        var (list, plan) = Checked(endpoints, options);
        var key = KeyAsync(options, CancellationToken.None).AsTask().GetAwaiter().GetResult();
        return OpenKeyed(list, options, key, plan, LoggerFor(options));
    }

    /// <summary>
    /// Opens a cache as <see cref="Open"/> does, without blocking the caller: the connects run on a thread of their own.
    /// </summary>
    /// <remarks>
    /// Cancelling returns at once with <see cref="OperationCanceledException"/>; connects already under way finish or
    /// time out in the background (<see cref="RemoteCacheOptions.ConnectTimeout"/>), and a cache they open then is
    /// closed, so nothing is left allocated on the servers.
    /// </remarks>
    /// <exception cref="ArgumentException">An option or endpoint is malformed (thrown before anything starts).</exception>
    /// <exception cref="RemoteCacheException">As for <see cref="Open"/>, from the task.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    /// <exception cref="SloNotMetException">As for <see cref="Open"/> (thrown before anything starts).</exception>
    public static async Task<RemoteCacheClient> OpenAsync(IEnumerable<string> endpoints, RemoteCacheOptions options,
                                                          CancellationToken cancellationToken = default)
    {
        var (list, plan) = Checked(endpoints, options);
        cancellationToken.ThrowIfCancellationRequested();
        var logger = LoggerFor(options);
        var key = await KeyAsync(options, cancellationToken).ConfigureAwait(false);
        var opening = BlockingCall.Start(() => OpenKeyed(list, options, key, plan, logger));
        try
        {
            return await opening.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested && !opening.IsCompleted)
        {
            Log.CacheOpenCancelled(logger, options.EffectiveName, string.Join(", ", list));
            _ = opening.ContinueWith(static t =>
            {
                if (t.IsCompletedSuccessfully)
                    t.Result.Dispose();
                else
                    _ = t.Exception;  // observed: the caller has gone
            }, CancellationToken.None, TaskContinuationOptions.ExecuteSynchronously, TaskScheduler.Default);
            throw;
        }
    }

    private static (string[] List, SloPlan? Plan) Checked(IEnumerable<string> endpoints, RemoteCacheOptions options)
    {
        ArgumentNullException.ThrowIfNull(endpoints);
        ArgumentNullException.ThrowIfNull(options);
        var list = endpoints.ToArray();
        options.Validate(list);
        NativeMethods.EnsureCompatible();
        return (list, options.Slo is null ? null : PlanSlo(list, options));
    }

    // The configuration an SLO asks for, through the options' model; refused before anything connects.
    private static SloPlan PlanSlo(string[] endpoints, RemoteCacheOptions options)
    {
        string name = options.EffectiveName, path = options.SloModelPath!;
        PerformanceModel model;
        try
        {
            model = PerformanceModel.Load(path);
        }
        catch (FormatException e)
        {
            throw new ArgumentException($"{name}: {nameof(RemoteCacheOptions)}.{nameof(RemoteCacheOptions.SloModelPath)}: {e.Message}",
                                        nameof(RemoteCacheOptions.SloModelPath), e);
        }
        foreach (var endpoint in endpoints)
        {
            string transport = endpoint.Split(':', 2)[0];
            if (!string.Equals(transport, model.Transport, StringComparison.OrdinalIgnoreCase))
                throw new ArgumentException($"{name}: endpoint {endpoint} is {transport}, but the SLO model {path} was measured over {model.Transport}",
                                            nameof(endpoints));
        }
        SloPlan plan;
        try
        {
            plan = new SloPlanner(model).Plan(options.Slo!);
        }
        catch (ArgumentException e)
        {
            throw new ArgumentException($"{name}: {nameof(RemoteCacheOptions)}.{nameof(RemoteCacheOptions.Slo)}: {e.Message} (model {path})",
                                        nameof(RemoteCacheOptions.Slo), e);
        }
        if (plan.Config is not { } config)
            throw new SloNotMetException(name, plan);
        if (config.Problem() is { } problem)
            throw new ArgumentException($"{name}: the SLO model {path} chose {config}, which {problem}: the model's space goes past this library's limits",
                                        nameof(RemoteCacheOptions.SloModelPath));
        return plan;
    }

    // The key to open with: the options' own, the provider's (checked), or none for a plain cache.
    private static async ValueTask<byte[]?> KeyAsync(RemoteCacheOptions options, CancellationToken cancellationToken)
    {
        if (options.EncryptionKeyProvider is not { } provider)
            return options.EncryptionKey;
        var key = await provider.GetKeyAsync(options.CacheId, cancellationToken).ConfigureAwait(false);
        if (key is null || key.Length != RemoteCacheOptions.EncryptionKeyBytes)
        {
            if (key is not null)
                CryptographicOperations.ZeroMemory(key);
            throw new ArgumentException($"{options.EffectiveName}: {nameof(RemoteCacheOptions)}.{nameof(RemoteCacheOptions.EncryptionKeyProvider)} " +
                                        $"gave {(key is null ? "no key" : $"a key of {key.Length} bytes")}; an AES-256 key has {RemoteCacheOptions.EncryptionKeyBytes}",
                                        nameof(RemoteCacheOptions.EncryptionKeyProvider));
        }
        return key;
    }

    // Opens with `key` (null: a plain cache); a key from the provider is cleared once the library has copied it.
    private static RemoteCacheClient OpenKeyed(string[] list, RemoteCacheOptions options, byte[]? key, SloPlan? plan, ILogger logger)
    {
        try
        {
            return OpenChecked(list, options, key, plan, logger);
        }
        finally
        {
            if (key is not null && options.EncryptionKeyProvider is not null)
                CryptographicOperations.ZeroMemory(key);
        }
    }

    private static ILogger LoggerFor(RemoteCacheOptions options) =>
        (ILogger?)options.LoggerFactory?.CreateLogger<RemoteCacheClient>() ?? NullLogger.Instance;

    private static unsafe RemoteCacheClient OpenChecked(string[] list, RemoteCacheOptions options, byte[]? key, SloPlan? plan, ILogger logger)
    {
        string name = options.EffectiveName;
        long started = Stopwatch.GetTimestamp();
        var capabilities = options.Capabilities is { Count: > 0 } given ? given.ToArray() : null;
        using var strings = new Utf8StringArray(list);
        using var tokenString = new Utf8StringArray(string.IsNullOrEmpty(options.Token) ? Array.Empty<string>() : new[] { options.Token });
        using var capabilityStrings = new Utf8StringArray(capabilities ?? Array.Empty<string>());
        var config = options.Config ?? plan?.Config ?? CacheConfig.HighThroughput;
        var native = new RcCacheOptions
        {
            CacheId = options.CacheId,
            Token = tokenString.Count > 0 ? tokenString.Pointers[0] : IntPtr.Zero,  // none: the library makes a random one
            RegionsPerServer = (uint)options.RegionsPerServer,
            Config = config.ToNative(),
            SessionCapacity = (uint)options.SessionCapacity,
            OpTimeoutMs = RemoteCacheOptions.Milliseconds(options.OperationTimeout),
            ConnectTimeoutMs = RemoteCacheOptions.Milliseconds(options.ConnectTimeout),
            Flags = options.Exclusive ? NativeLimits.OpenExclusive : 0,
            Capabilities = capabilities is null ? IntPtr.Zero : (IntPtr)capabilityStrings.Pointers,
            SealBlockSize = key is null ? 0 : (uint)options.EncryptionBlockSize,
        };
        RemoteCacheStatus status;
        CacheHandle cache;
        fixed (byte* keyBytes = key)  // the library copies it during the call
        {
            native.SealKey = (IntPtr)keyBytes;
            status = NativeMethods.CacheOpen(strings.Pointers, (nuint)list.Length, &native, out cache);
        }
        if (status != RemoteCacheStatus.Ok)
        {
            cache.Dispose();
            var error = Errors.For(status, name, -1, 0);
            Log.CacheOpenFailed(logger, name, string.Join(", ", list), status, error);
            throw error;
        }
        RemoteCacheClient client;
        try
        {
            client = new RemoteCacheClient(cache, options, plan, list.Length, logger);
        }
        catch
        {
            cache.Dispose();
            throw;
        }
        Log.CacheOpened(logger, name, options.CacheId, string.Join(", ", list), client.Capacity, config, options.Lanes,
                        (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
        if (plan is not null)
            Log.SloPlanned(logger, name, plan.Slo.ToString(), config, plan.Describe(), options.SloModelPath!);
        return client;
    }

    private SessionHandle OpenNativeSession()
    {
        var status = NativeMethods.SessionOpen(_cache, out var session);
        if (status != RemoteCacheStatus.Ok)
        {
            session.Dispose();
            throw Errors.For(status, Name, -1, 0);
        }
        session.HoldParent(_cache);
        return session;
    }

    /// <summary>The id the cache was opened with (<see cref="RemoteCacheOptions.CacheId"/>).</summary>
    public ulong CacheId { get; }

    /// <summary>
    /// Whether the cache was opened exclusively (<see cref="RemoteCacheOptions.Exclusive"/>): no other client can open
    /// it while this one has it open.
    /// </summary>
    public bool IsExclusive { get; }

    /// <summary>
    /// The block size of an encrypted cache (<see cref="RemoteCacheOptions.EncryptionBlockSize"/>): writes cover whole
    /// blocks of it. Null for a plain cache.
    /// </summary>
    public int? EncryptionBlockSize => _encrypted?.Block;

    /// <summary>
    /// Whether the cache was opened with a configuration (<see cref="RemoteCacheOptions.Config"/>) or for an SLO
    /// (<see cref="RemoteCacheOptions.Slo"/>), rather than with the default.
    /// </summary>
    public bool ConfigGiven { get; }

    /// <summary>The SLO the cache was opened for and the configuration chosen for it, or null when opened without one.</summary>
    public SloPlan? SloPlan { get; }

    /// <summary>The performance model the cache was opened with (<see cref="RemoteCacheOptions.SloModelPath"/>), or null.</summary>
    public string? SloModelPath { get; }

    /// <summary>The name used in messages and exceptions.</summary>
    public string Name { get; }

    /// <summary>Bytes in the cache: its servers' regions, end to end (changed by <see cref="GrowAsync"/> and <see cref="ShrinkAsync"/>).</summary>
    public long Capacity => Volatile.Read(ref _capacity);

    /// <summary>How many servers the cache spans (changed by <see cref="GrowAsync"/> and <see cref="ShrinkAsync"/>).</summary>
    public int ServerCount => Volatile.Read(ref _endpointCount);

    /// <summary>The current data-path configuration.</summary>
    public CacheConfig Config
    {
        get
        {
            ThrowIfDisposed();
            Errors.ThrowIfFailed(NativeMethods.CacheGetConfig(_cache, out var config), Name);
            return CacheConfig.FromNative(config);
        }
    }

    // ReconfigureAsync's work (the configuration checked there), and a retune's or a widened window's, which are valid.
    internal void Reconfigure(CacheConfig config)
    {
        lock (_resize)
        {
            ThrowIfDisposed();  // a change that started after Dispose (from another thread) touches nothing
            config = Widened(config);
            var old = Config;
            if (old == config)
                return;
            var native = config.ToNative();
            Errors.ThrowIfFailed(NativeMethods.CacheReconfigure(_cache, in native), Name);
            Log.CacheReconfigured(_logger, Name, old, config);
        }
    }

    /// <summary>
    /// Keeps the cache's batch size and queue depth at least <paramref name="batchSize"/> and <paramref name="queueDepth"/>
    /// from now on, whatever configuration is applied later (<see cref="ReconfigureAsync"/>, a retune for the SLO, the
    /// manager's): for a user with many requests in flight at once, such as a FASTER device, on a cache whose configuration
    /// was chosen for one request's latency. Both are the client's own window: they cost no server core, and a lone
    /// request still goes out the moment it is submitted. Client and server threads stay as configured. Raises the current
    /// configuration's now if it is narrower.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">A value outside its limits (<see cref="CacheConfig"/>).</exception>
    public void KeepWindowAtLeast(int batchSize, int queueDepth)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(batchSize, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(batchSize, CacheConfig.MaxBatchSize);
        ArgumentOutOfRangeException.ThrowIfLessThan(queueDepth, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(queueDepth, CacheConfig.MaxQueueDepth);
        ThrowIfDisposed();
        lock (_resize)
        {
            _window = (Math.Max(_window.BatchSize, batchSize), Math.Max(_window.QueueDepth, queueDepth));
            Reconfigure(Config);
        }
    }

    // The least batch size and queue depth (KeepWindowAtLeast). Under _resize.
    private (int BatchSize, int QueueDepth) _window = (1, 1);

    private CacheConfig Widened(CacheConfig config) =>
        config with { BatchSize = Math.Max(config.BatchSize, _window.BatchSize), QueueDepth = Math.Max(config.QueueDepth, _window.QueueDepth) };

    // RenewAsync's work, on a thread of its own.
    internal unsafe void Renew(IReadOnlyList<string?> capabilities)
    {
        ArgumentNullException.ThrowIfNull(capabilities);
        ThrowIfDisposed();
        using var strings = new Utf8StringArray(capabilities.Select(c => string.IsNullOrEmpty(c) ? null : c).ToList());
        lock (_resize)
        {
            ThrowIfDisposed();  // a change that started after Dispose (from another thread) touches nothing
            int holders = (int)NativeMethods.CacheHolderCount(_cache);
            if (capabilities.Count != holders)
                throw new ArgumentException(
                    $"{Name}: give one capability per holder ({holders}), in holder order (null for a holder let go)", nameof(capabilities));
            Errors.ThrowIfFailed(NativeMethods.CacheRenew(_cache, strings.Pointers), Name);
            for (int i = 0; i < capabilities.Count; i++)
                SetHolderCapability(i, string.IsNullOrEmpty(capabilities[i]) ? null : capabilities[i]);
        }
        Log.LeaseRenewed(_logger, Name, capabilities.Count);
    }

    // GrowAsync's work, on a thread of its own (arguments checked there).
    internal unsafe void Grow(IReadOnlyList<string> endpoints, IReadOnlyList<string>? capabilities)
    {
        using var endpointStrings = new Utf8StringArray(endpoints);
        using var capabilityStrings = capabilities is null ? null : new Utf8StringArray(capabilities);
        lock (_resize)
        {
            ThrowIfDisposed();  // a change that started after Dispose (from another thread) touches nothing
            int oldServers = _endpointCount;
            long oldCapacity = _capacity;
            Errors.ThrowIfFailed(NativeMethods.CacheGrow(_cache, endpointStrings.Pointers, (nuint)endpoints.Count,
                                                         capabilityStrings is null ? null : capabilityStrings.Pointers), Name);
            int first = (int)NativeMethods.CacheHolderCount(_cache) - endpoints.Count;
            for (int i = 0; i < endpoints.Count; i++)
                SetHolderCapability(first + i, capabilities?[i]);
            Resized(oldServers, oldCapacity);
        }
    }

    // ShrinkAsync's work, on a thread of its own (its count checked again under the lock: servers may have changed).
    internal void Shrink(int serverCount)
    {
        ThrowIfDisposed();
        lock (_resize)
        {
            ThrowIfDisposed();  // a change that started after Dispose (from another thread) touches nothing
            ArgumentOutOfRangeException.ThrowIfLessThan(serverCount, 1);
            ArgumentOutOfRangeException.ThrowIfGreaterThan(serverCount, _endpointCount);
            int oldServers = _endpointCount;
            long oldCapacity = _capacity;
            Errors.ThrowIfFailed(NativeMethods.CacheShrink(_cache, (nuint)serverCount), Name);
            Resized(oldServers, oldCapacity);
        }
    }

    /// <summary>
    /// Applies a new (c, s, b, q) while the cache is in use; nothing submitted is lost or reordered. Its servers are told
    /// the new server threads and, with client threads, new connections are made, on a thread of its own. The batch size
    /// and queue depth applied are at least those of <see cref="KeepWindowAtLeast"/>; a configuration the cache has
    /// already changes nothing.
    /// </summary>
    /// <param name="config">The configuration.</param>
    /// <param name="cancellationToken">Stops the wait, not the change: a change under way finishes (or fails) in the
    /// background, and the cache then runs the old or the new configuration.</param>
    /// <exception cref="ArgumentException">A parameter is out of range (<see cref="CacheConfig"/> names the limits).</exception>
    /// <exception cref="RemoteCacheException">A server could not be told (the cache keeps its old configuration).</exception>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    public Task ReconfigureAsync(CacheConfig config, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        if (config.Problem() is { } problem)
            throw new ArgumentException($"{Name}: the configuration {config} {problem}", nameof(config));
        return InBackground(() => Reconfigure(config), cancellationToken);
    }

    /// <summary>
    /// Presents new capabilities, one per holder in holder order (after the manager renewed the lease): each server
    /// extends the cache's lease to the new expiry; operations go on undisturbed. Without migrations or recoveries the
    /// holders are the endpoints, in endpoint order (<see cref="RemoteCacheMover.HolderCount"/>, <see cref="RemoteCacheMover.GetHolderEndpoint"/>);
    /// a holder let go takes null. On failure the cache keeps its old lease.
    /// </summary>
    /// <param name="capabilities">One per holder.</param>
    /// <param name="cancellationToken">Stops the wait, not the renewal (which finishes or fails in the background).</param>
    /// <exception cref="ArgumentException">Not one capability per holder, or none for a holder in use.</exception>
    /// <exception cref="RemoteCacheException">A server refused a capability (<see cref="RemoteCacheStatus.Auth"/>) or is unreachable.</exception>
    public Task RenewAsync(IReadOnlyList<string?> capabilities, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(capabilities);
        ThrowIfDisposed();
        return InBackground(() => Renew(capabilities), cancellationToken);
    }

    /// <summary>
    /// Appends servers to the cache (Redy §3.3's grow): each is connected with this cache's id and token and lends
    /// <see cref="RemoteCacheOptions.RegionsPerServer"/> regions, which extend the address space past
    /// <see cref="Capacity"/> in the order given. All or nothing; operations in flight are not disturbed. A cache
    /// allocated by the manager grows through its ManagedCache (ReshapeAsync).
    /// </summary>
    /// <param name="endpoints">The new servers, in address order.</param>
    /// <param name="capabilities">One per new server when the cache was opened with capabilities; otherwise null.</param>
    /// <param name="cancellationToken">Stops the wait, not the growth: connects under way finish in the background (each
    /// bounded by <see cref="RemoteCacheOptions.ConnectTimeout"/>), and the cache then has grown or is as it was.</param>
    /// <exception cref="ArgumentException">No endpoints, or the capabilities do not match them.</exception>
    /// <exception cref="RemoteCacheException">A new server refused or could not be reached; the cache is as it was.</exception>
    public Task GrowAsync(IReadOnlyList<string> endpoints, IReadOnlyList<string>? capabilities = null, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(endpoints);
        ThrowIfDisposed();
        if (endpoints.Count == 0 || endpoints.Any(string.IsNullOrEmpty))
            throw new ArgumentException($"{Name}: growing takes one or more non-empty endpoints", nameof(endpoints));
        if (capabilities is not null && (capabilities.Count != endpoints.Count || capabilities.Any(string.IsNullOrEmpty)))
            throw new ArgumentException($"{Name}: give one non-empty capability per new endpoint ({endpoints.Count})", nameof(capabilities));
        return InBackground(() => Grow(endpoints, capabilities), cancellationToken);
    }

    /// <summary>
    /// Keeps the first <paramref name="serverCount"/> servers and cuts the address space after their regions: from then
    /// on I/O past the new <see cref="Capacity"/> throws <see cref="ArgumentOutOfRangeException"/>, as any range outside
    /// the cache does, and I/O below it is not disturbed. Operations already in flight to the dropped servers complete, or
    /// fail if their server drops the cache first.
    /// </summary>
    /// <param name="serverCount">Servers kept, 1..<see cref="ServerCount"/>.</param>
    /// <param name="cancellationToken">Stops the wait, not the cut (which finishes in the background).</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="serverCount"/> is not 1..<see cref="ServerCount"/>.</exception>
    public Task ShrinkAsync(int serverCount, CancellationToken cancellationToken = default)
    {
        ThrowIfDisposed();
        ArgumentOutOfRangeException.ThrowIfLessThan(serverCount, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(serverCount, ServerCount);
        return InBackground(() => Shrink(serverCount), cancellationToken);
    }

    // Runs a change of the cache (blocking native calls) on a thread of its own; the token stops the caller's wait only.
    private static Task InBackground(Action change, CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested)
            return Task.FromCanceled(cancellationToken);
        var running = BlockingCall.Start(change);
        if (!cancellationToken.CanBeCanceled)
            return running;
        _ = running.ContinueWith(static t => _ = t.Exception, CancellationToken.None, TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously,
                                 TaskScheduler.Default);  // observed when the caller has stopped waiting
        return running.WaitAsync(cancellationToken);
    }

    private void Resized(int oldServers, long oldCapacity)
    {
        Volatile.Write(ref _endpointCount, (int)NativeMethods.CacheServerCount(_cache));
        Volatile.Write(ref _capacity, (long)NativeMethods.CacheCapacity(_cache));
        Log.CacheResized(_logger, Name, oldServers, oldCapacity, _endpointCount, _capacity);
    }

    // ---- ValueTask API ----------------------------------------------------------------------------

    /// <summary>Reads [<paramref name="address"/>, + destination.Length) into <paramref name="destination"/>.</summary>
    /// <remarks>
    /// <paramref name="cancellationToken"/> stops the wait, not the read: a read already sent may still complete on the
    /// server, and <paramref name="destination"/> stays pinned, and may still be written, until it does (at the latest
    /// after <see cref="RemoteCacheOptions.OperationTimeout"/>).
    /// </remarks>
    /// <exception cref="ArgumentOutOfRangeException">The range leaves the cache (thrown before anything is sent).</exception>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    /// <exception cref="RemoteCacheException">The operation failed: server gone, timeout (reported by the task).</exception>
    /// <exception cref="OperationCanceledException">The token was cancelled before the read finished.</exception>
    public ValueTask ReadAsync(long address, Memory<byte> destination, CancellationToken cancellationToken = default) =>
        Submit(address, destination, write: false, cancellationToken);

    /// <summary>Writes <paramref name="source"/> at <paramref name="address"/>.</summary>
    /// <remarks>
    /// <paramref name="cancellationToken"/> stops the wait, not the write: a write already sent may still be applied on
    /// the server, and <paramref name="source"/> stays pinned until it completes (at the latest after
    /// <see cref="RemoteCacheOptions.OperationTimeout"/>); after a cancellation the range holds the old or the new bytes.
    /// </remarks>
    /// <exception cref="ArgumentOutOfRangeException">The range leaves the cache (thrown before anything is sent).</exception>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    /// <exception cref="RemoteCacheException">The operation failed: server gone, timeout (reported by the task).</exception>
    /// <exception cref="OperationCanceledException">The token was cancelled before the write finished.</exception>
    public ValueTask WriteAsync(long address, ReadOnlyMemory<byte> source, CancellationToken cancellationToken = default) =>
        Submit(address, MemoryMarshal.AsMemory(source), write: true, cancellationToken);

    private unsafe ValueTask Submit(long address, Memory<byte> buffer, bool write, CancellationToken cancellationToken)
    {
        CheckRange(address, buffer.Length);
        if (cancellationToken.IsCancellationRequested)
            return ValueTask.FromCanceled(cancellationToken);
        var pin = buffer.Pin();
        bool cancellable = cancellationToken.CanBeCanceled;
        var status = PickLane().Submit(write, address, buffer.Length, pin.Pointer, null, null, pin, cancellable, out var op);
        if (status != RemoteCacheStatus.Ok)
        {
            pin.Dispose();
            throw Errors.For(status, Name, address, buffer.Length);
        }
        // Read the version before the operation can be recycled (a cancellation may finish it from another thread).
        var task = new ValueTask(op!, op!.Version);
        if (cancellable)
            op.CancelOn(cancellationToken);
        return task;
    }

    // ---- low-level callback API (FASTER devices) ----------------------------------------------------

    /// <summary>
    /// Starts a read of <paramref name="length"/> bytes at <paramref name="address"/> into unmanaged or
    /// pinned memory; <paramref name="callback"/> runs with the status on the thread that harvests the
    /// completion (<see cref="Poll"/>, an awaiting caller, or the client's poller). No allocation.
    /// </summary>
    /// <remarks>
    /// Callbacks must be short and must not block: on the poller, one that waits holds up every completion of the
    /// client (and one that waits for another operation of this client waits forever). They may start new operations.
    /// A thread that polls (<see cref="Poll"/>, as FASTER's CompletePending does) harvests its own completions; one
    /// that only starts operations and blocks for their callbacks (Tsavorite) has them harvested by the poller at once.
    /// </remarks>
    /// <param name="address">Where the read starts in the cache.</param>
    /// <param name="destination">Unmanaged or pinned memory of at least <paramref name="length"/> bytes.</param>
    /// <param name="length">Bytes to read.</param>
    /// <param name="callback">Runs once with the outcome.</param>
    /// <param name="context">Passed to <paramref name="callback"/>.</param>
    /// <exception cref="ArgumentOutOfRangeException">The range leaves the cache.</exception>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    public void StartRead(long address, IntPtr destination, int length, IoCallback callback, object? context) =>
        StartRaw(address, destination, length, callback, context, write: false);

    /// <summary>Starts a write from unmanaged or pinned memory; see <see cref="StartRead"/>.</summary>
    /// <exception cref="ArgumentOutOfRangeException">The range leaves the cache.</exception>
    /// <exception cref="ObjectDisposedException">The client is disposed.</exception>
    public void StartWrite(long address, IntPtr source, int length, IoCallback callback, object? context) =>
        StartRaw(address, source, length, callback, context, write: true);

    private unsafe void StartRaw(long address, IntPtr buffer, int length, IoCallback callback, object? context, bool write)
    {
        ArgumentNullException.ThrowIfNull(callback);
        CheckRange(address, length);
        var status = PickLane().Submit(write, address, length, (void*)buffer, callback, context, default, false, out _);
        if (status != RemoteCacheStatus.Ok)
            throw Errors.For(status, Name, address, length);
    }

    /// <summary>
    /// Opens a native session of this cache for one thread at a time (<see cref="RemoteCacheSession"/>):
    /// the lowest-overhead path, for a thread that submits and polls by itself.
    /// </summary>
    /// <remarks>The session keeps the native cache open until it is disposed, before or after the client.</remarks>
    public RemoteCacheSession OpenSession()
    {
        ThrowIfDisposed();
        return new RemoteCacheSession(OpenNativeSession(), Name);
    }

    /// <summary>
    /// Harvests finished operations on the calling thread (running their callbacks); returns how many. The
    /// thread's own lane (where its submissions went) comes first; the others only when it has nothing in flight.
    /// </summary>
    public int Poll()
    {
        // Sweeping every lane on every poll makes busy threads fight over each other's lanes (a gate CAS on a
        // cache line another core owns, completions run on the wrong thread); an idle lane's work is the poller's.
        var own = PickLane();
        int n = own.Drive();
        if (n > 0 || own.Outstanding > 0)
            return n;
        foreach (var lane in _lanes)
            if (lane != own)
                n += lane.Drive();
        return n;
    }

    /// <summary>Operations submitted and not yet finished.</summary>
    public int Outstanding
    {
        get
        {
            int n = 0;
            foreach (var lane in _lanes)
                n += lane.Outstanding;
            return n;
        }
    }

    /// <summary>
    /// Operations in flight on the lane the calling thread submits to: what this thread's own submissions wait
    /// behind. Cheaper than <see cref="Outstanding"/>, which reads every lane's counter (lines other cores write).
    /// </summary>
    public int OutstandingOnCallersLane => PickLane().Outstanding;

    /// <summary>The index of the calling thread's lane (tests).</summary>
    internal int CallersLane => Array.IndexOf(_lanes, PickLane());

    // ---- internals --------------------------------------------------------------------------------

    private void CheckRange(long address, long length)
    {
        ThrowIfDisposed();
        if (address < 0 || length < 0 || address > Capacity - length)
            throw Errors.For(RemoteCacheStatus.OutOfRange, Name, address, length, $"the cache holds {Capacity} bytes");
    }

    // A thread keeps the lane it is given on its first use (its operations stay in order on one native session), and
    // is given the lane the fewest live threads hold, so that busy threads land on lanes of their own. Lanes handed out
    // in turn from a process-wide count put two FASTER threads on one lane whenever some other thread took a turn
    // between them: 0.64x the throughput of separate lanes, in about half of the two-thread runs.
    private readonly ThreadLocal<Lane?> _laneOfThread = new();
    private readonly List<Thread>[] _laneHolders;

    private Lane PickLane() => _laneOfThread.Value ??= AssignLane();

    private Lane AssignLane()
    {
        lock (_laneHolders)
        {
            int best = 0;
            for (int i = 0; i < _laneHolders.Length; i++)
            {
                _laneHolders[i].RemoveAll(static t => !t.IsAlive);
                if (_laneHolders[i].Count < _laneHolders[best].Count)
                    best = i;
            }
            _laneHolders[best].Add(Thread.CurrentThread);
            return _lanes[best];
        }
    }

    internal void NotifyOutstanding() => _work.Set();

    internal ClientMetrics Metrics { get; }

    /// <summary>Operations and bytes of every lane so far (what the operation and byte counters report).</summary>
    internal OperationTotals Totals()
    {
        var sum = default(OperationTotals);
        foreach (var lane in _lanes)
            sum += lane.Totals;
        return sum;
    }

    /// <summary>Logs the first failure of each status (a dead server fails every operation; one line says so).</summary>
    internal void OperationFailed(RemoteCacheStatus status)
    {
        if (status == RemoteCacheStatus.Disconnected)
            KickRecovery();
        int bit = 1 << (-(int)status & 31);
        if ((Volatile.Read(ref _failuresLogged) & bit) != 0 || (Interlocked.Or(ref _failuresLogged, bit) & bit) != 0)
            return;
        Log.OperationsFailing(_logger, Name, status, Errors.Describe(status));
    }

    /// <summary>Wakes the poller for work a caller left it (<see cref="Lane.TakeHandoff"/>).</summary>
    internal void NotifyHandoff() => _handoffs.Set();

    private long _deferredSleeps;

    /// <summary>How often the poller slept while it left lanes to their callers (written by the poller only).</summary>
    internal long DeferredSleeps => Volatile.Read(ref _deferredSleeps);

    [ThreadStatic] private static RemoteCacheClient? t_pollerOf;

    /// <summary>Whether the calling thread is <paramref name="client"/>'s poller.</summary>
    internal static bool IsPollerOf(RemoteCacheClient client) => t_pollerOf == client;

    // A caller's submission or poll keeps the poller off its lane this long: a thread that polls in a loop (FASTER's
    // CompletePending(wait: false), a YCSB client) harvests its own completions and fills its own batches. Short,
    // because a caller that polled and then blocked (CompletePending(wait: true)) leaves no other sign.
    private static readonly long QuietTicks = Stopwatch.Frequency / 200_000;  // 5 µs

    // Callers that polled a lane this recently poll it (FASTER's threads call TryComplete after every few operations);
    // a lane whose callers only submit (Tsavorite's pending reads block for their callbacks) is the poller's at once.
    private static readonly long CallersPollTicks = Stopwatch.Frequency / 1_000;  // 1 ms

    // Without progress for this long, the poller stops spinning and blocks in rc_wait: completions normally come
    // within a few microseconds (tcp on loopback: ~10), a stalled server should not cost a core.
    private static readonly long BlockAfterTicks = Stopwatch.Frequency / 10_000;  // 100 µs

    // Callers that drive their lanes without a pause for this long are left alone: the poller sleeps (until a hand-off,
    // new work or a millisecond) instead of yielding in a loop on cores they and the server need. The price: a caller
    // that drove without a pause this long and then blocks with work in flight, leaving no hand-off, waits up to a
    // millisecond once (a thread that submits and waits for each read pauses long before this).
    private static readonly long SleepWhileDeferredTicks = Stopwatch.Frequency / 66_667;  // 15 µs

    // Finishes what callers leave behind, at once: a lane with outstanding operations is polled unless its callers poll
    // it (within CallersPollTicks) and submitted on it or drove it within QuietTicks; work submitted by completions is handed over
    // explicitly (Lane.TakeHandoff). Without progress it backs off to yields, then blocks in rc_wait on a lone
    // waiting lane (a submitter or caller wakes it with rc_wake); it never sleeps while work is waiting.
    private void PollerLoop()
    {
        t_pollerOf = this;
        var lastActivity = new int[_lanes.Length];
        var lastChange = new long[_lanes.Length];  // when lastActivity last moved
        long lastProgress = Stopwatch.GetTimestamp();
        long deferredSince = 0;  // start of the current run of passes that found only lanes their callers drive
        var lastPolls = new int[_lanes.Length];
        var lastPollAt = new long[_lanes.Length];  // when a caller was last seen polling the lane (0: never, long ago)
        var spin = new SpinWait();
        int next = 0;
        while (!_stopping)
        {
            int done = 0, waiting = 0;
            bool deferred = false;
            Lane? waitingLane = null;
            long now = Stopwatch.GetTimestamp();
            for (int i = 0; i < _lanes.Length; i++)
            {
                var lane = _lanes[i];
                if (lane.Outstanding == 0)
                    continue;
                if (!lane.TakeHandoff())
                {
                    int polls = Volatile.Read(ref lane.Polls);
                    if (polls != lastPolls[i])
                    {
                        lastPolls[i] = polls;
                        lastPollAt[i] = now;
                    }
                    int activity = Volatile.Read(ref lane.Activity);
                    if (activity != lastActivity[i])
                    {
                        lastActivity[i] = activity;
                        lastChange[i] = now;
                    }
                    // Only callers that poll are left their lane: those that submit and block for their callbacks
                    // (Tsavorite) would wait for the poller to notice they stopped.
                    if (now - lastPollAt[i] < CallersPollTicks && now - lastChange[i] < QuietTicks)
                    {
                        deferred = true;
                        continue;
                    }
                }
                waiting++;
                waitingLane = lane;
                done += lane.Drive(byPoller: true);
            }
            if (waiting == 0 && deferred)
            {
                if (deferredSince == 0)
                    deferredSince = now;
                if (now - deferredSince < SleepWhileDeferredTicks)
                {
                    spin.SpinOnce(sleep1Threshold: -1);
                    continue;
                }
                _handoffs.Reset();
                if (!AnyHandoff())
                {
                    _deferredSleeps++;
                    _handoffs.Wait(1);
                }
                continue;
            }
            deferredSince = 0;
            if (done > 0)
            {
                lastProgress = now;
                spin.Reset();
                continue;
            }
            if (waiting == 0 && !deferred)
            {
                // Right after finishing work, the next request usually follows within microseconds (FASTER's thread,
                // woken by the last completion, issues its next read): keep polling a while rather than sleep and
                // need a futex wake for it.
                if (now - lastProgress < BlockAfterTicks)
                {
                    spin.SpinOnce(sleep1Threshold: -1);
                    continue;
                }
                // Nothing outstanding: sleep until there is (the check after Reset catches an earlier signal).
                _work.Reset();
                if (NothingOutstanding())
                    _work.Wait(100);
                spin.Reset();
                continue;
            }
            if (deferred || now - lastProgress < BlockAfterTicks)
            {
                spin.SpinOnce(sleep1Threshold: -1);
                continue;
            }
            if (waiting == 1)
            {
                waitingLane!.DriveBlocking(1);
                continue;
            }
            // Several lanes wait and rc_wait watches one: block on each in turn, briefly (a stalled server).
            next = (next + 1) % _lanes.Length;
            if (_lanes[next].Outstanding > 0)
                _lanes[next].DriveBlocking(1);
        }
    }

    private bool NothingOutstanding()
    {
        foreach (var lane in _lanes)
            if (lane.Outstanding != 0)
                return false;
        return true;
    }

    private bool AnyHandoff()
    {
        foreach (var lane in _lanes)
            if (lane.HasHandoff)
                return true;
        return false;
    }


    // For RemoteCacheMover, which drives the native cache's migration primitives.
    internal CacheHandle Handle => _cache;
    internal ILogger Logger => _logger;
    internal object ResizeLock => _resize;

    internal void ThrowIfDisposed()
    {
        if (Volatile.Read(ref _disposed) != 0)
            throw new ObjectDisposedException(Name);
    }

    /// <summary>
    /// Waits for operations in flight (they complete, or fail after the operation timeout), then closes
    /// the sessions and the cache. Later calls throw <see cref="ObjectDisposedException"/>.
    /// </summary>
    public ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return ValueTask.CompletedTask;
        return new ValueTask(BlockingCall.Start(Shutdown));
    }

    /// <summary>
    /// Synchronous form of <see cref="DisposeAsync"/>. From inside a completion callback that the client's poller runs, or
    /// a <see cref="ContentLost"/> handler that its recovery runs, the shutdown goes on in the background instead (waiting
    /// there would wait for the caller itself).
    /// </summary>
    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        if (IsPollerOf(this) || t_recovering == this)
            _ = BlockingCall.Start(Shutdown);
        else
            Shutdown();
    }

    private void Shutdown()
    {
        _sloMonitor?.Dispose();
        StopRecovery();
        lock (_resize)
        {
            // A change under way (GrowAsync, ReconfigureAsync … whose caller stopped waiting) finishes first; later ones
            // find the client disposed.
        }
        foreach (var lane in _lanes)
            lane.Drain();
        _instruments.Unregister(this);
        _stopping = true;
        _work.Set();
        _handoffs.Set();
        _poller.Join();
        foreach (var lane in _lanes)
            lane.Dispose();
        _cache.Dispose();
        _work.Dispose();
        _handoffs.Dispose();
        Log.CacheClosed(_logger, Name);
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Text;
using Microsoft.Extensions.Logging;
using RemoteCache.Interop;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>How to open a cache: its identity, its size on each server, its data-path configuration and limits.</summary>
/// <remarks>Every value is checked when the cache is opened (<see cref="Validate"/>), with a message naming the option.</remarks>
public sealed class RemoteCacheOptions
{
    /// <summary>Bytes of UTF-8 a <see cref="Token"/> may have (RC_MAX_TOKEN_BYTES of remotecache.h).</summary>
    public const int MaxTokenBytes = NativeLimits.MaxTokenBytes;

    /// <summary>Regions a cache may ask of each server (RC_MAX_REGIONS_PER_SERVER).</summary>
    public const int MaxRegionsPerServer = NativeLimits.MaxRegionsPerServer;

    /// <summary>Servers one cache may span (RC_MAX_ENDPOINTS).</summary>
    public const int MaxEndpoints = NativeLimits.MaxEndpoints;

    /// <summary>The default <see cref="SessionCapacity"/> (RC_DEFAULT_SESSION_CAPACITY).</summary>
    public const int DefaultSessionCapacity = NativeLimits.DefaultSessionCapacity;

    /// <summary>The largest <see cref="SessionCapacity"/> (RC_MAX_SESSION_CAPACITY).</summary>
    public const int MaxSessionCapacity = NativeLimits.MaxSessionCapacity;

    /// <summary>The default <see cref="OperationTimeout"/> (RC_DEFAULT_OP_TIMEOUT_MS).</summary>
    public static TimeSpan DefaultOperationTimeout { get; } = TimeSpan.FromMilliseconds(NativeLimits.DefaultOpTimeoutMs);

    /// <summary>The default <see cref="ConnectTimeout"/> (RC_DEFAULT_CONNECT_TIMEOUT_MS).</summary>
    public static TimeSpan DefaultConnectTimeout { get; } = TimeSpan.FromMilliseconds(NativeLimits.DefaultConnectTimeoutMs);

    /// <summary>The default <see cref="ReconnectDelay"/>: 200 ms.</summary>
    public static TimeSpan DefaultReconnectDelay { get; } = TimeSpan.FromMilliseconds(200);

    /// <summary>The default <see cref="ReconnectMaxDelay"/>: 10 s.</summary>
    public static TimeSpan DefaultReconnectMaxDelay { get; } = TimeSpan.FromSeconds(10);

    /// <summary>The longest <see cref="ReconnectMaxDelay"/>: 1 hour.</summary>
    public static TimeSpan MaxReconnectDelay { get; } = TimeSpan.FromHours(1);

    // Timeouts travel to the native library as 32-bit milliseconds.
    private static readonly TimeSpan s_maxTimeout = TimeSpan.FromMilliseconds(uint.MaxValue);

    /// <summary>Bytes of an <see cref="EncryptionKey"/>: AES-256 (RC_SEAL_KEY_BYTES).</summary>
    public const int EncryptionKeyBytes = NativeLimits.SealKeyBytes;

    /// <summary>The default <see cref="EncryptionBlockSize"/> (RC_DEFAULT_SEAL_BLOCK).</summary>
    public const int DefaultEncryptionBlockSize = NativeLimits.DefaultSealBlock;

    /// <summary>The smallest <see cref="EncryptionBlockSize"/> (RC_MIN_SEAL_BLOCK).</summary>
    public const int MinEncryptionBlockSize = NativeLimits.MinSealBlock;

    /// <summary>The largest <see cref="EncryptionBlockSize"/> (RC_MAX_SEAL_BLOCK).</summary>
    public const int MaxEncryptionBlockSize = NativeLimits.MaxSealBlock;

    /// <summary>Bytes a server holds per encrypted block besides the block (RC_SEAL_TRAILER_BYTES): its nonce and tag.</summary>
    public const int EncryptionOverheadBytes = NativeLimits.SealTrailerBytes;

    /// <summary>Lanes a client may have at most.</summary>
    public const int MaxLanes = 64;

    /// <summary>
    /// Names the cache on its servers, together with <see cref="Token"/>: clients that give the same id and the
    /// same token share the cache. Default: random.
    /// </summary>
    public ulong CacheId { get; set; } = (ulong)Random.Shared.NextInt64(1, long.MaxValue);

    /// <summary>
    /// The cache's shared secret (at most <see cref="MaxTokenBytes"/> bytes of UTF-8). A cache is named by
    /// (<see cref="CacheId"/>, token): give the same token to share a cache with other clients; another token names
    /// another cache. Null or empty (the default): a random token, so the cache is this client's alone.
    /// </summary>
    public string? Token { get; set; }

    /// <summary>
    /// Whether this client must be the cache's only client: no other client may open it while this one has it
    /// open, and the open fails with <see cref="RemoteCacheException"/> (status <see cref="RemoteCacheStatus.InUse"/>)
    /// if another client has it open already. RemoteCacheDevice requires it. Default: false.
    /// </summary>
    public bool Exclusive { get; set; }

    /// <summary>
    /// One capability per endpoint, in endpoint order (the text that <see cref="RemoteCacheCapability.Mint"/> or
    /// <c>remotecache-capability</c> prints), for servers started with an admission key; servers in open mode
    /// ignore them. Null or empty (the default): none. Capabilities are secrets: they never appear in logs.
    /// </summary>
    public IList<string>? Capabilities { get; set; }

    /// <summary>
    /// An AES-256 key (<see cref="EncryptionKeyBytes"/> bytes): the cache is encrypted and authenticated in this process,
    /// so its memory hosts see neither the data nor can change it unnoticed (docs/encryption.md). The address space is cut
    /// into blocks of <see cref="EncryptionBlockSize"/> bytes, each sealed with AES-256-GCM and bound to the cache and its
    /// place; servers hold <see cref="EncryptionOverheadBytes"/> more per block, and <see cref="RemoteCacheClient.Capacity"/>
    /// counts whole blocks. Writes must cover whole blocks; a block that does not authenticate fails its read with
    /// <see cref="RemoteCacheStatus.Integrity"/>. With <see cref="Exclusive"/> the client also detects an older version put
    /// back. The key is copied at open and never leaves the process; a key other than the one the cache was sealed with is
    /// refused at open (<see cref="RemoteCacheStatus.Integrity"/>). Null (the default): a plain cache, unless
    /// <see cref="EncryptionKeyProvider"/> is set.
    /// </summary>
    public byte[]? EncryptionKey { get; set; }

    /// <summary>
    /// Where the key of an encrypted cache comes from when it is opened, instead of <see cref="EncryptionKey"/> (set one
    /// or the other): asked for the cache's id at each open. <see cref="RemoteCacheClient.Open"/> waits for it on the
    /// opening thread; <see cref="RemoteCacheClient.OpenAsync"/> awaits it.
    /// </summary>
    public IRemoteCacheKeyProvider? EncryptionKeyProvider { get; set; }

    /// <summary>Whether caches opened with these options are encrypted (<see cref="EncryptionKey"/> or <see cref="EncryptionKeyProvider"/>).</summary>
    public bool Encrypted => EncryptionKey is not null || EncryptionKeyProvider is not null;

    /// <summary>
    /// Bytes the servers hold for a cache of <paramref name="capacity"/> bytes with these options: the capacity itself for
    /// a plain cache; for an encrypted one, its whole blocks with their trailers and the key check's block.
    /// </summary>
    public long ServerBytesFor(long capacity)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(capacity);
        return Encrypted ? new EncryptedLayout(EncryptionBlockSize).ServerBytes(capacity) : capacity;
    }

    /// <summary>
    /// Bytes per encrypted block: a power of two from <see cref="MinEncryptionBlockSize"/> to
    /// <see cref="MaxEncryptionBlockSize"/>, the unit of writes. Default: <see cref="DefaultEncryptionBlockSize"/>.
    /// </summary>
    public int EncryptionBlockSize { get; set; } = DefaultEncryptionBlockSize;

    /// <summary>Regions requested from each server, 1..<see cref="MaxRegionsPerServer"/> (the region size is the server's).</summary>
    public int RegionsPerServer { get; set; } = 1;

    /// <summary>
    /// The data-path configuration. Null (the default): <see cref="CacheConfig.HighThroughput"/> for the client, and
    /// <see cref="CacheConfig.OneSided"/> once a RemoteCacheDevice takes the cache (it reconfigures a cache opened
    /// without one).
    /// </summary>
    public CacheConfig? Config { get; set; }

    /// <summary>
    /// An SLO to configure the cache for, instead of <see cref="Config"/>: opening picks the cheapest configuration that
    /// <see cref="SloModelPath"/>'s model predicts to meet it (<see cref="SloPlanner"/>), or refuses with
    /// <see cref="SloNotMetException"/> when none does. Needs no manager.
    /// </summary>
    public RemoteCacheSlo? Slo { get; set; }

    /// <summary>
    /// The performance model (a file written by <c>remotecache slo model</c>, measured for the endpoints' transport and
    /// the SLO's record size) that <see cref="Slo"/> is planned with. Given without an SLO, a RemoteCacheDevice plans its
    /// own default SLO with it.
    /// </summary>
    public string? SloModelPath { get; set; }

    /// <summary>
    /// Whether the client reconnects by itself to a server that went away (its process ended, or it closed the cache's
    /// connections) once it comes back at the same endpoint: the regions that server held are lent again, empty;
    /// <see cref="RemoteCacheClient.ContentLost"/> names them before they are served again. Meanwhile their operations fail
    /// at once with <see cref="RemoteCacheStatus.Disconnected"/>; the other servers' regions are not disturbed. Attempts
    /// start <see cref="ReconnectDelay"/> apart and back off to <see cref="ReconnectMaxDelay"/>. Default: true. A cache
    /// placed by the manager (ManagedCache) turns it off: the manager replaces a failed server with another one.
    /// </summary>
    public bool Reconnect { get; set; } = true;

    /// <summary>The first wait between reconnect attempts, positive and at most <see cref="ReconnectMaxDelay"/>. Default: <see cref="DefaultReconnectDelay"/>.</summary>
    public TimeSpan ReconnectDelay { get; set; } = DefaultReconnectDelay;

    /// <summary>
    /// The longest wait between reconnect attempts (each wait doubles up to it, ±25 % jitter), at most
    /// <see cref="MaxReconnectDelay"/>. Default: <see cref="DefaultReconnectMaxDelay"/>.
    /// </summary>
    public TimeSpan ReconnectMaxDelay { get; set; } = DefaultReconnectMaxDelay;

    /// <summary>Operations outstanding per lane at most, 1..<see cref="MaxSessionCapacity"/>. Default: <see cref="DefaultSessionCapacity"/>.</summary>
    public int SessionCapacity { get; set; } = DefaultSessionCapacity;

    /// <summary>An operation older than this fails with <see cref="RemoteCacheException"/> (status Timeout). Default: <see cref="DefaultOperationTimeout"/>.</summary>
    public TimeSpan OperationTimeout { get; set; } = DefaultOperationTimeout;

    /// <summary>How long opening may wait for each server. Default: <see cref="DefaultConnectTimeout"/>.</summary>
    public TimeSpan ConnectTimeout { get; set; } = DefaultConnectTimeout;

    /// <summary>
    /// Native sessions the client spreads its callers over (each is used by one thread at a time),
    /// 1..<see cref="MaxLanes"/>. Default: the processor count, at most 4.
    /// </summary>
    public int Lanes { get; set; } = Math.Clamp(Environment.ProcessorCount, 1, 4);

    /// <summary>A name for messages, logs and metrics. Default: "cache &lt;id&gt;".</summary>
    public string? Name { get; set; }

    /// <summary>Where the client logs (opens, closes, reconfigurations, failing operations). Null: no logging.</summary>
    public ILoggerFactory? LoggerFactory { get; set; }

    /// <summary>
    /// Where the client's meter comes from (<see cref="RemoteCacheMetrics"/>); dependency injection sets it. Null: a
    /// process-wide meter named <see cref="RemoteCacheMetrics.MeterName"/>.
    /// </summary>
    public IMeterFactory? MeterFactory { get; set; }

    /// <summary>The name a client opened with these options goes by.</summary>
    public string EffectiveName => string.IsNullOrEmpty(Name) ? $"cache {CacheId}" : Name;

    /// <summary>
    /// Checks the options for a cache over <paramref name="endpoints"/>; the one place where they are checked (opening
    /// and dependency injection's options validation both call it).
    /// </summary>
    /// <exception cref="ArgumentException">What is wrong, naming the option.</exception>
    public void Validate(IReadOnlyList<string> endpoints)
    {
        ArgumentNullException.ThrowIfNull(endpoints);
        string name = EffectiveName;
        if (endpoints.Count == 0)
            throw new ArgumentException($"{name}: a cache needs at least one endpoint (\"tcp:HOST:PORT\", \"shm:SOCKET\", \"verbs:HOST:PORT\")", nameof(endpoints));
        if (endpoints.Count > MaxEndpoints)
            throw new ArgumentException($"{name}: {endpoints.Count} endpoints; a cache spans at most {MaxEndpoints} servers", nameof(endpoints));
        for (int i = 0; i < endpoints.Count; i++)
            if (string.IsNullOrWhiteSpace(endpoints[i]))
                throw new ArgumentException($"{name}: endpoint {i} is empty", nameof(endpoints));
        if (Token is { } token && Encoding.UTF8.GetByteCount(token) > MaxTokenBytes)
            throw Invalid(nameof(Token), $"has {Encoding.UTF8.GetByteCount(token)} bytes of UTF-8; at most {MaxTokenBytes} are allowed");
        if (RegionsPerServer < 1 || RegionsPerServer > MaxRegionsPerServer)
            throw Invalid(nameof(RegionsPerServer), $"is {RegionsPerServer}; a cache asks each server for 1 to {MaxRegionsPerServer} regions");
        if (Capabilities is { Count: > 0 } capabilities)
        {
            if (capabilities.Count != endpoints.Count)
                throw Invalid(nameof(Capabilities), $"has {capabilities.Count} capabilities for {endpoints.Count} endpoints; give one per endpoint, in endpoint order");
            if (capabilities.Any(string.IsNullOrEmpty))
                throw Invalid(nameof(Capabilities), "has a null or empty capability");
        }
        if (Config is { } config && config.Problem() is { } problem)
            throw Invalid(nameof(Config), problem);
        if (Slo is { } slo)
        {
            if (Config is not null)
                throw Invalid(nameof(Slo), "and Config are both set; give one: a configuration, or an SLO to choose one");
            if (slo.Problem() is { } sloProblem)
                throw Invalid(nameof(Slo), sloProblem);
            if (string.IsNullOrWhiteSpace(SloModelPath))
                throw Invalid(nameof(SloModelPath), "is not set; an SLO is turned into a configuration through a performance model (remotecache slo model)");
        }
        if (SessionCapacity < 1 || SessionCapacity > MaxSessionCapacity)
            throw Invalid(nameof(SessionCapacity), $"is {SessionCapacity}; it must be 1..{MaxSessionCapacity}");
        if (OperationTimeout <= TimeSpan.Zero || OperationTimeout > s_maxTimeout)
            throw Invalid(nameof(OperationTimeout), $"is {OperationTimeout}; it must be positive and at most {s_maxTimeout}");
        if (ConnectTimeout <= TimeSpan.Zero || ConnectTimeout > s_maxTimeout)
            throw Invalid(nameof(ConnectTimeout), $"is {ConnectTimeout}; it must be positive and at most {s_maxTimeout}");
        if (ReconnectMaxDelay <= TimeSpan.Zero || ReconnectMaxDelay > MaxReconnectDelay)
            throw Invalid(nameof(ReconnectMaxDelay), $"is {ReconnectMaxDelay}; it must be positive and at most {MaxReconnectDelay}");
        if (ReconnectDelay <= TimeSpan.Zero || ReconnectDelay > ReconnectMaxDelay)
            throw Invalid(nameof(ReconnectDelay), $"is {ReconnectDelay}; it must be positive and at most ReconnectMaxDelay ({ReconnectMaxDelay})");
        if (Lanes < 1 || Lanes > MaxLanes)
            throw Invalid(nameof(Lanes), $"is {Lanes}; it must be 1..{MaxLanes}");
        if (EncryptionKey is { } key && key.Length != EncryptionKeyBytes)
            throw Invalid(nameof(EncryptionKey), $"has {key.Length} bytes; an AES-256 key has {EncryptionKeyBytes}");
        if (EncryptionKey is not null && EncryptionKeyProvider is not null)
            throw Invalid(nameof(EncryptionKeyProvider), $"is set together with {nameof(EncryptionKey)}; set one or the other");
        if (EncryptionBlockSize < MinEncryptionBlockSize || EncryptionBlockSize > MaxEncryptionBlockSize || !int.IsPow2(EncryptionBlockSize))
            throw Invalid(nameof(EncryptionBlockSize), $"is {EncryptionBlockSize}; it must be a power of two from {MinEncryptionBlockSize} to {MaxEncryptionBlockSize}");
    }

    private ArgumentException Invalid(string option, string problem) =>
        new($"{EffectiveName}: {nameof(RemoteCacheOptions)}.{option} {problem}", option);

    internal static uint Milliseconds(TimeSpan t) => (uint)Math.Ceiling(t.TotalMilliseconds);
}

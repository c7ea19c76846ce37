using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// The data-path configuration of a cache (Redy §5): client threads (c), server threads (s),
/// batch size (b) and queue depth (q). Given at open and changeable while the cache is in use.
/// </summary>
/// <param name="ClientThreads">Client threads, 0..<see cref="MaxClientThreads"/>; 0 = the thread that submits or polls does the client work (best on small machines).</param>
/// <param name="ServerThreads">Server threads polling the cache's connections; 0 = one-sided access only.</param>
/// <param name="BatchSize">Requests per batch, 1..<see cref="MaxBatchSize"/> (a batch also stops at 4 KiB).</param>
/// <param name="QueueDepth">Batches in flight per connection, 1..<see cref="MaxQueueDepth"/>.</param>
public readonly record struct CacheConfig(int ClientThreads, int ServerThreads, int BatchSize, int QueueDepth)
{
    /// <summary>Client threads at most (RC_MAX_CLIENT_THREADS of remotecache.h).</summary>
    public const int MaxClientThreads = NativeLimits.MaxClientThreads;

    /// <summary>Server threads at most (RC_MAX_SERVER_THREADS).</summary>
    public const int MaxServerThreads = NativeLimits.MaxServerThreads;

    /// <summary>Requests per batch at most (RC_MAX_BATCH_SIZE).</summary>
    public const int MaxBatchSize = NativeLimits.MaxBatchSize;

    /// <summary>Batches in flight per connection at most (RC_MAX_QUEUE_DEPTH).</summary>
    public const int MaxQueueDepth = NativeLimits.MaxQueueDepth;

    /// <summary>Latency first: no client threads, one server thread, no batching, one message in flight.</summary>
    public static CacheConfig LowLatency => new(0, 1, 1, 1);

    /// <summary>Throughput first on a small machine: batches of 64, four in flight.</summary>
    public static CacheConfig HighThroughput => new(0, 1, 64, 4);

    /// <summary>
    /// Requests done by the application thread, each one-sided where the transport has a one-sided path (shm, RDMA
    /// verbs: no server CPU at all), up to 8 in flight per connection. tcp has none: there requests go in batches of
    /// up to 16 (whatever has accumulated when the thread polls) to the one thread the server then gives the cache.
    /// What a FASTER device's reads want: RemoteCacheDevice uses it unless the cache was opened with a configuration.
    /// </summary>
    public static CacheConfig OneSided => new(0, 0, 16, 8);

    /// <summary>What is out of range, or null when every parameter is within its limits.</summary>
    internal string? Problem() =>
        ClientThreads < 0 || ClientThreads > MaxClientThreads ? $"has ClientThreads {ClientThreads}; it must be 0..{MaxClientThreads}"
        : ServerThreads < 0 || ServerThreads > MaxServerThreads ? $"has ServerThreads {ServerThreads}; it must be 0..{MaxServerThreads}"
        : BatchSize < 1 || BatchSize > MaxBatchSize ? $"has BatchSize {BatchSize}; it must be 1..{MaxBatchSize}"
        : QueueDepth < 1 || QueueDepth > MaxQueueDepth ? $"has QueueDepth {QueueDepth}; it must be 1..{MaxQueueDepth}"
        : null;

    internal RcConfig ToNative() => new()
    {
        ClientThreads = (uint)ClientThreads,
        ServerThreads = (uint)ServerThreads,
        BatchSize = (uint)BatchSize,
        QueueDepth = (uint)QueueDepth,
    };

    internal static CacheConfig FromNative(in RcConfig c) =>
        new((int)c.ClientThreads, (int)c.ServerThreads, (int)c.BatchSize, (int)c.QueueDepth);

    /// <inheritdoc/>
    public override string ToString() => $"c={ClientThreads} s={ServerThreads} b={BatchSize} q={QueueDepth}";
}

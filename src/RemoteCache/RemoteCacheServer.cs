using System;
using System.Collections.Generic;
using System.Linq;
using System.IO;
using System.Runtime.InteropServices;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>How to start an embedded cache server (<see cref="RemoteCacheServer.Start"/>).</summary>
public sealed class RemoteCacheServerOptions
{
    /// <summary>The default <see cref="RegionSize"/> (RC_DEFAULT_REGION_SIZE: 1 GiB).</summary>
    public const long DefaultRegionSize = (long)NativeLimits.DefaultRegionSize;

    /// <summary>The default <see cref="MemoryLimit"/> (RC_DEFAULT_MEMORY_LIMIT: 4 GiB).</summary>
    public const long DefaultMemoryLimit = (long)NativeLimits.DefaultMemoryLimit;

    // Regions are mapped in whole pages.
    private const long PageSize = 4096;

    /// <summary>Endpoints to listen on: "tcp:HOST:PORT" (port 0 picks one), "shm:SOCKET_PATH", "verbs:HOST:PORT".</summary>
    public IList<string> Listen { get; set; } = new List<string>();

    /// <summary>Bytes per region, a positive multiple of 4096. Default: <see cref="DefaultRegionSize"/>.</summary>
    public long RegionSize { get; set; } = DefaultRegionSize;

    /// <summary>Bytes the server lends in all at most, at least one region. Default: <see cref="DefaultMemoryLimit"/>.</summary>
    public long MemoryLimit { get; set; } = DefaultMemoryLimit;

    /// <summary>Server threads at most; 0 (the default): one per hardware thread.</summary>
    public int MaxThreads { get; set; }

    /// <summary>
    /// Null (the default): open mode, any client that reaches the server may rent its memory. Otherwise the secret (at
    /// least <see cref="RemoteCacheCapability.MinAdmissionKeyBytes"/> bytes) that capabilities must be signed with
    /// (<see cref="RemoteCacheCapability.Mint"/>): a client without a valid one is refused with
    /// <see cref="RemoteCacheStatus.Auth"/>. The server keeps its own copy.
    /// </summary>
    public byte[]? AdmissionKey { get; set; }

    /// <summary>The identity capabilities must name; null (the default) = the first endpoint as bound (<see cref="RemoteCacheServer.ServerId"/>).</summary>
    public string? ServerId { get; set; }

    /// <summary>
    /// True: a low-priority thread keeps spare regions whose pages are already allocated (within
    /// <see cref="MemoryLimit"/>, leaving an eighth of the host's memory available), and new caches take them first,
    /// so that filling a new cache runs at the transport's rate instead of faulting in and zeroing every 4 KiB page
    /// inside the writes; an idle server then holds that memory. False (the default): pages are taken as they are
    /// first written.
    /// </summary>
    public bool CommitMemory { get; set; }

    /// <summary>Where the server logs its start and stop. Null: no logging.</summary>
    public ILoggerFactory? LoggerFactory { get; set; }

    /// <summary>Checks the options; the one place where they are checked.</summary>
    /// <exception cref="ArgumentException">What is wrong, naming the option.</exception>
    public void Validate()
    {
        if (Listen is null || Listen.Count == 0 || Listen.Any(string.IsNullOrWhiteSpace))
            throw Invalid(nameof(Listen), "needs at least one endpoint, none empty (\"tcp:127.0.0.1:0\" picks a port)");
        if (RegionSize <= 0 || RegionSize % PageSize != 0)
            throw Invalid(nameof(RegionSize), $"is {RegionSize}; it must be a positive multiple of {PageSize}");
        if (MemoryLimit < RegionSize)
            throw Invalid(nameof(MemoryLimit), $"is {MemoryLimit}; it must hold at least one region ({RegionSize} bytes)");
        if (MaxThreads < 0)
            throw Invalid(nameof(MaxThreads), $"is {MaxThreads}; it must be 0 (one per hardware thread) or more");
        if (AdmissionKey is { } key && key.Length < RemoteCacheCapability.MinAdmissionKeyBytes)
            throw Invalid(nameof(AdmissionKey), $"has {key.Length} bytes; an admission key has at least {RemoteCacheCapability.MinAdmissionKeyBytes}");
        if (ServerId is { Length: 0 })
            throw Invalid(nameof(ServerId), "is empty (null picks the first endpoint)");
    }

    private static ArgumentException Invalid(string option, string problem) =>
        new($"{nameof(RemoteCacheServerOptions)}.{option} {problem}", option);
}

/// <summary>
/// A cache server embedded in this process: lends memory regions to caches over the given endpoints.
/// For tests, single-host use and the benchmarks' local default; production servers run
/// <c>remotecache-server</c> (<see cref="ExecutablePath"/>).
/// </summary>
public sealed unsafe class RemoteCacheServer : IDisposable
{
    private readonly ServerHandle _server;
    private readonly ILogger _logger;

    private RemoteCacheServer(ServerHandle server, IReadOnlyList<string> endpoints, string serverId, bool admitsByCapability,
                              ILogger logger)
    {
        _server = server;
        _logger = logger;
        Endpoints = endpoints;
        ServerId = serverId;
        AdmitsByCapability = admitsByCapability;
    }

    /// <summary>
    /// The <c>remotecache-server</c> executable shipped with this package (runtimes/linux-x64/native), for running a
    /// server as its own process: <c>remotecache-server --help</c> lists its flags.
    /// </summary>
    public static string ExecutablePath => Path.Combine(NativeMethods.NativeDirectory, "remotecache-server");

    /// <summary>Starts a server.</summary>
    /// <exception cref="ArgumentException">An option is out of range (<see cref="RemoteCacheServerOptions.Validate"/>), or an endpoint is malformed or cannot be listened on.</exception>
    /// <exception cref="RemoteCacheException">The server could not start for another reason.</exception>
    /// <exception cref="InvalidOperationException">The native library is not the version this assembly needs.</exception>
    public static RemoteCacheServer Start(RemoteCacheServerOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        NativeMethods.EnsureCompatible();
        var logger = (ILogger?)options.LoggerFactory?.CreateLogger<RemoteCacheServer>() ?? NullLogger.Instance;
        var key = options.AdmissionKey;
        using var strings = new Utf8StringArray(options.Listen.ToArray());
        using var id = new Utf8StringArray(options.ServerId is null ? Array.Empty<string>() : new[] { options.ServerId });
        RemoteCacheStatus status;
        ServerHandle server;
        fixed (byte* keyBytes = key)
        {
            var native = new RcServerOptions
            {
                Listen = (IntPtr)strings.Pointers,
                ListenCount = (nuint)strings.Count,
                RegionSize = (ulong)options.RegionSize,
                MemoryLimit = (ulong)options.MemoryLimit,
                MaxThreads = (uint)options.MaxThreads,
                AdmissionKey = (IntPtr)keyBytes,
                AdmissionKeyLength = (nuint)(key?.Length ?? 0),
                ServerId = id.Count > 0 ? id.Pointers[0] : IntPtr.Zero,
                CommitMemory = options.CommitMemory ? 1u : 0u,
            };
            status = NativeMethods.ServerStart(&native, out server);
        }
        if (status != RemoteCacheStatus.Ok)
        {
            server.Dispose();
            var error = Errors.For(status, "embedded server", -1, 0);
            Log.ServerStartFailed(logger, string.Join(", ", options.Listen), status, error);
            throw error;
        }
        var bound = new List<string>();
        for (nuint i = 0; NativeMethods.ServerEndpoint(server, i) is var p && p != IntPtr.Zero; i++)
            bound.Add(Marshal.PtrToStringUTF8(p)!);
        var boundId = Marshal.PtrToStringUTF8(NativeMethods.ServerId(server)) ?? "";
        Log.ServerStarted(logger, boundId, string.Join(", ", bound), options.RegionSize, options.MemoryLimit,
                          key is null ? "open" : "by capability");
        return new RemoteCacheServer(server, bound, boundId, key is not null, logger);
    }

    /// <summary>The identity capabilities for this server must name (<see cref="RemoteCacheCapability.Mint"/>).</summary>
    public string ServerId { get; }

    /// <summary>Whether the server was started with an admission key (false: open mode).</summary>
    public bool AdmitsByCapability { get; }

    /// <summary>The endpoints as bound (a port of 0 resolved).</summary>
    public IReadOnlyList<string> Endpoints { get; }

    /// <summary>Bytes currently lent to caches.</summary>
    public long MemoryInUse => (long)NativeMethods.ServerMemoryInUse(_server);

    /// <summary>
    /// Bytes committed ahead for new caches and not lent yet (<see cref="RemoteCacheServerOptions.CommitMemory"/>'s spare
    /// regions; 0 without it). It grows back in the background after a cache is freed.
    /// </summary>
    public long MemoryCommitted => (long)NativeMethods.ServerMemoryCommitted(_server);

    /// <summary>Bytes the server may lend now (<see cref="RemoteCacheServerOptions.MemoryLimit"/>, or what <see cref="SetMemoryLimit"/> set last).</summary>
    public long MemoryLimit => (long)NativeMethods.ServerMemoryLimit(_server);

    /// <summary>
    /// Lends at most <paramref name="bytes"/> from now on (the host wants memory back, or has more to spare): a cache
    /// that would not fit is refused (<see cref="RemoteCacheStatus.NoMemory"/>); caches already lent keep their memory
    /// (<see cref="DropCache"/> gives one back); committed spare memory beyond the limit is freed now. 0 takes no new cache.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="bytes"/> is negative.</exception>
    public void SetMemoryLimit(long bytes)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(bytes);
        var status = NativeMethods.ServerSetMemoryLimit(_server, (ulong)bytes);
        if (status != RemoteCacheStatus.Ok)
            throw Errors.For(status, "embedded server", -1, 0);
    }

    /// <summary>
    /// Drops every cache with <paramref name="cacheId"/> because the host needs its memory back: its clients' connections
    /// get a last notice naming the host and close (their operations fail with <see cref="RemoteCacheStatus.Expired"/>),
    /// and its memory is freed as they do. Returns how many caches had the id.
    /// </summary>
    public int DropCache(ulong cacheId)
    {
        var status = NativeMethods.ServerDropCache(_server, cacheId, out nuint dropped);
        if (status != RemoteCacheStatus.Ok)
            throw Errors.For(status, "embedded server", -1, 0);
        Log.ServerDroppedCache(_logger, ServerId, cacheId);
        return (int)dropped;
    }

    /// <summary>Closes every connection (clients see their operations fail) and stops the server.</summary>
    public void Dispose()
    {
        if (_server.IsClosed)
            return;
        _server.Dispose();
        Log.ServerStopped(_logger, ServerId);
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Security;
using RemoteCache.Slo;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// The main job's control plane: a remotecache-manager in this process (local allocator: it starts the
/// remotecache-server processes), and the cache of the remotecache device created through it with an SLO, as an
/// application would (RemoteCacheManagerClient.CreateAsync). Manager, placement, capabilities and data path together.
/// </summary>
internal sealed class ControlPlane : IAsyncDisposable
{
    /// <summary>The size of FASTER's reads from a device: a sector.</summary>
    public const int FasterReadBytes = 512;

    /// <summary>
    /// The session capacity the YCSB figures were measured with (the C# default before it followed the header's
    /// RC_DEFAULT_SESSION_CAPACITY of 1024): FASTER's threads keep up to the device's throttle limit of reads plus page
    /// flushes in flight per lane, and a full lane makes them poll and retry.
    /// </summary>
    public const int SessionCapacity = 4096;

    private readonly WebApplication? _app;  // null: managers elsewhere (--manager)
    private readonly RemoteCacheManagerClient _client;
    private readonly RemoteCacheManagerClient _encryptedClient;  // its caches are encrypted with a key made for the run
    private readonly YcsbOptions _options;

    private ControlPlane(WebApplication? app, IReadOnlyList<Uri> addresses, string key, YcsbOptions options)
    {
        _app = app;
        _client = ManagerClient(addresses, key, new RemoteCacheOptions { SessionCapacity = SessionCapacity });
        _encryptedClient = ManagerClient(addresses, key, EncryptedCacheOptions());
        _options = options;
    }

    private static RemoteCacheManagerClient ManagerClient(IReadOnlyList<Uri> addresses, string key, RemoteCacheOptions cache) =>
        new(new RemoteCacheManagerOptions { Addresses = addresses.ToList(), ApiKey = key, Cache = cache });

    /// <summary>
    /// How the encrypted device's cache is opened: a random key (it lives as long as the run) and blocks of FASTER's
    /// sector, so that every write FASTER makes covers whole blocks.
    /// </summary>
    private static RemoteCacheOptions EncryptedCacheOptions() => new()
    {
        SessionCapacity = SessionCapacity,
        EncryptionKey = RandomNumberGenerator.GetBytes(RemoteCacheOptions.EncryptionKeyBytes),
        EncryptionBlockSize = FasterReadBytes,
    };

    /// <summary>
    /// What the device's cache is asked for (--slo-read-us, --slo-ops) at FASTER's read size (a 512 B sector); by default
    /// Redy's "reads under 10 µs" and 2 M reads/s. On the shipped shm model the cheapest configuration meeting that is
    /// one-sided (no server thread), what a FASTER device wants on a small machine.
    /// </summary>
    public RemoteCacheSlo Slo =>
        new() { ReadLatency = TimeSpan.FromMicroseconds(_options.SloReadUs), Throughput = _options.SloOpsPerSecond, RecordSize = FasterReadBytes };

    /// <summary>
    /// The SLO the cache is asked with: <see cref="Slo"/>, except from managers elsewhere when none was asked for (they
    /// place by capacity then: their pool may have no model of the transport).
    /// </summary>
    public RemoteCacheSlo? RequestedSlo => _app is null && !_options.SloGiven ? null : Slo;

    /// <summary>The cache, and how long CreateAsync took (Allocate, server start, connect).</summary>
    public ManagedCache? Cache { get; private set; }

    public TimeSpan CreateTime { get; private set; }

    /// <summary>
    /// Starts a manager over <paramref name="stateDirectory"/> whose one VM type holds a cache of <paramref name="bytes"/>,
    /// offering the transport of <paramref name="o"/> (with its models, and over verbs its RDMA device's address).
    /// </summary>
    public static async Task<ControlPlane> StartAsync(string stateDirectory, long bytes, YcsbOptions o)
    {
        Directory.CreateDirectory(stateDirectory);
        // An encrypted cache's servers hold its blocks' trailers too; with one, every VM is sized for it.
        bool encrypted = o.Devices.Contains(RunEnvironment.EncryptedDevice);
        var (regionSize, regions) = Program.CacheRegions(encrypted ? EncryptedCacheOptions().ServerBytesFor(bytes) : bytes);
        var catalogue = new VmCatalogue
        {
            RegionBytes = regionSize,
            // Two: a reclaimed or failed server's replacement runs beside it (the dynamics timelines); a third for the
            // encrypted cache.
            VmTypes = new[] { new VmType("ycsb", regions * regionSize, 1, 0.05, null, encrypted ? 3 : 2, 0) },
        };
        string cataloguePath = Path.Combine(stateDirectory, "catalogue.json");
        await File.WriteAllTextAsync(cataloguePath, catalogue.ToJson()).ConfigureAwait(false);
        string keys = Path.Combine(stateDirectory, "keys.json");
        File.Delete(keys);
        string key = ApiKeyStore.Generate(keys, "ycsb");
        var options = new ManagerOptions
        {
            StateDirectory = stateDirectory,
            Catalogue = cataloguePath,
            Keys = keys,
            Allocator = "local",
            Transports = new() { o.Transport },
            Models = o.Models,
            VerbsAddress = o.VerbsAddress,
        };
        var app = await Manager.Program.BuildAsync(options, new Uri("http://127.0.0.1:0"), TextWriter.Null, CancellationToken.None,
                                                   b => b.Logging.SetMinimumLevel(LogLevel.Warning)).ConfigureAwait(false);
        await app.StartAsync().ConfigureAwait(false);
        var address = Manager.Program.ListenAddress(app);
        return new ControlPlane(app, new[] { address }, key, o);
    }

    /// <summary>The control plane of --manager: managers running elsewhere, reached with the tenant's key from --api-key-file.</summary>
    public static ControlPlane Connect(YcsbOptions o)
    {
        string key = File.ReadAllText(o.ApiKeyFile!).Trim();
        return new ControlPlane(null, o.Managers!.Select(m => new Uri(m)).ToList(), key, o);
    }

    /// <summary>The encrypted device's cache, once created.</summary>
    public ManagedCache? EncryptedCache { get; private set; }

    /// <summary>
    /// Creates a device's cache: exclusive (RemoteCacheDevice requires it: the cache is one store's log); encrypted for
    /// the encrypted device. One of each per run.
    /// </summary>
    public ManagedCache CreateCache(long bytes, bool encrypted)
    {
        if ((encrypted ? EncryptedCache : Cache) is not null)
            throw new InvalidOperationException($"the run has one {(encrypted ? RunEnvironment.EncryptedDevice : "remotecache")} device");
        var clock = Stopwatch.StartNew();
        var request = new ManagedCacheRequest
        {
            Capacity = bytes, Slo = RequestedSlo, Transport = _options.Transport, Name = encrypted ? "ycsb-encrypted" : "ycsb", Exclusive = true,
        };
        var cache = (encrypted ? _encryptedClient : _client).CreateAsync(request).GetAwaiter().GetResult();
        CreateTime = clock.Elapsed;
        if (encrypted)
            EncryptedCache = cache;
        else
            Cache = cache;
        return cache;
    }

    /// <summary>The server holding the cache now (it has one).</summary>
    public string CacheServer => (Cache ?? throw new InvalidOperationException("no cache yet")).Info.Servers.Single().ServerId;

    /// <summary>Announces the reclaim of the cache's server with <paramref name="notice"/>, as the operator would.</summary>
    public Task<DateTimeOffset> ReclaimAsync(TimeSpan notice) => _client.ReclaimServerAsync(CacheServer, notice);

    /// <summary>Kills the cache's server process (SIGKILL), as a machine that fails.</summary>
    public void KillServer()
    {
        string id = CacheServer;
        var server = (_app ?? throw new InvalidOperationException("the cache's server is not this process's to kill (--manager)")).Services.GetRequiredService<Pool>().Servers().Single(s => s.ServerId == id);
        using var process = Process.GetProcessById(server.ProcessId);
        process.Kill();
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var (cache, client) in new[] { (Cache, _client), (EncryptedCache, _encryptedClient) })
        {
            if (cache is null)
                continue;
            // By id: the device disposed the data client it owned, which ends the handle (not the cache).
            await client.DeleteAsync(cache.CacheId).ConfigureAwait(false);
            await cache.DisposeAsync().ConfigureAwait(false);
        }
        await _client.DisposeAsync().ConfigureAwait(false);
        await _encryptedClient.DisposeAsync().ConfigureAwait(false);
        if (_app is not null)
        {
            await _app.StopAsync().ConfigureAwait(false);
            await _app.DisposeAsync().ConfigureAwait(false);
        }
    }
}

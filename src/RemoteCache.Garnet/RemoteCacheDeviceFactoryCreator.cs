using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;

namespace RemoteCache.Garnet;

/// <summary>
/// Garnet's device factory (<c>GarnetServerOptions.DeviceFactoryCreator</c>) with its log tier on remote memory: the
/// store's main log (<c>Store/hlog</c>) and object log (<c>Store/hlog_objs</c>) become a <see cref="TieredDevice"/> of
/// a <see cref="RemoteCacheDevice"/> in front of the device Garnet would have used (its local files, the commit point);
/// the append-only file and checkpoints stay on that local device.
/// </summary>
/// <remarks>
/// Garnet asks for each log once per database it creates (twice for database 0 when it recovers: the first is disposed
/// before use), so a cache is rented for each device asked for and given back when Garnet disposes the device. A
/// server with more than one database (<c>MaxDatabases</c> &gt; 1) names every database's logs alike: give it one.
/// </remarks>
public sealed class RemoteCacheDeviceFactoryCreator : INamedDeviceFactoryCreator
{
    /// <summary>The directory Garnet names its store's logs under.</summary>
    public const string StoreDirectory = "Store";

    /// <summary>The logs placed on remote memory: the main log and the object log.</summary>
    public static readonly IReadOnlyList<string> RemoteLogs = new[] { "hlog", "hlog_objs" };

    private readonly INamedDeviceFactoryCreator _local;
    private readonly Func<FileDescriptor, RentedCache?> _rent;
    private readonly ILoggerFactory? _loggers;
    private readonly List<TieredDevice> _devices = new();
    private readonly List<Task> _releases = new();

    /// <summary>Creates the factory creator over caches the caller opens.</summary>
    /// <param name="local">The factory Garnet would use otherwise (its files): every device not placed on remote memory, and the commit point under those that are.</param>
    /// <param name="cacheFor">
    /// A new cache for one log (its descriptor names which), opened with <see cref="RemoteCacheOptions.Exclusive"/>, which
    /// the device owns from then on; or null to leave that log on <paramref name="local"/>. What it throws reaches
    /// Garnet's constructor, which then does not start.
    /// </param>
    /// <param name="loggers">Where the devices log their set-up, refusals and tier failures.</param>
    /// <param name="cacheOnly">
    /// The logs placed on remote memory get no files under them: the cache is their only copy (their commit point), so
    /// whatever it loses (its server lost) the log loses, and Garnet cannot recover them from a checkpoint.
    /// </param>
    public RemoteCacheDeviceFactoryCreator(INamedDeviceFactoryCreator local, Func<FileDescriptor, RemoteCacheClient?> cacheFor,
                                           ILoggerFactory? loggers = null, bool cacheOnly = false)
        : this(local, WithoutRelease(cacheFor ?? throw new ArgumentNullException(nameof(cacheFor))), loggers, cacheOnly)
    {
    }

    private RemoteCacheDeviceFactoryCreator(INamedDeviceFactoryCreator local, Func<FileDescriptor, RentedCache?> rent, ILoggerFactory? loggers, bool cacheOnly)
    {
        _local = local ?? throw new ArgumentNullException(nameof(local));
        _rent = rent;
        _loggers = loggers;
        CacheOnly = cacheOnly;
    }

    /// <summary>
    /// A factory creator whose caches the manager places: one per log, created from <paramref name="requestFor"/>'s request
    /// (made exclusive and named after the log) when Garnet asks for the log's device, and deleted when Garnet disposes it.
    /// </summary>
    /// <param name="local">The factory Garnet would use otherwise (see the constructor).</param>
    /// <param name="manager">The managers, reached with the tenant's key; it must outlive the devices.</param>
    /// <param name="requestFor">The cache to ask for, per log (capacity: a whole number of the log's segments); null leaves the log on <paramref name="local"/>.</param>
    /// <param name="loggers">Where the devices log.</param>
    /// <param name="cacheOnly">No files under the logs placed on remote memory (see the constructor).</param>
    /// <remarks>A creation the manager refuses throws its <see cref="RemoteCacheManagerException"/> into Garnet's constructor.</remarks>
    public static RemoteCacheDeviceFactoryCreator ThroughManager(INamedDeviceFactoryCreator local, RemoteCacheManagerClient manager,
                                                                 Func<FileDescriptor, ManagedCacheRequest?> requestFor, ILoggerFactory? loggers = null,
                                                                 bool cacheOnly = false)
    {
        ArgumentNullException.ThrowIfNull(manager);
        ArgumentNullException.ThrowIfNull(requestFor);
        return new RemoteCacheDeviceFactoryCreator(local, file =>
        {
            if (requestFor(file) is not { } request)
                return null;
            request.Exclusive = true;  // a log's cache belongs to its device alone
            request.Name ??= $"garnet-{file.fileName}";
            // Garnet creates its devices inside GarnetServer's constructor: synchronously.
            var cache = manager.CreateAsync(request).GetAwaiter().GetResult();
            return new RentedCache(cache.Client, async () =>
            {
                // The device disposed the data client it owned; the cache is freed by id.
                await manager.DeleteAsync(cache.CacheId).ConfigureAwait(false);
                await cache.DisposeAsync().ConfigureAwait(false);
            });
        }, loggers, cacheOnly);
    }

    /// <summary>Whether the logs placed on remote memory have no files under them (the cache is their only copy).</summary>
    public bool CacheOnly { get; }

    /// <summary>Completes when every cache given back so far (a device Garnet disposed) is deleted, or failed to be.</summary>
    public Task WhenReleasedAsync()
    {
        lock (_releases)
            return Task.WhenAll(_releases);
    }

    /// <summary>The tiered devices created so far (disposed ones included), oldest first.</summary>
    public IReadOnlyList<TieredDevice> Devices
    {
        get
        {
            lock (_devices)
                return _devices.ToArray();
        }
    }

    /// <summary>Whether a device Garnet asks for is one of the logs placed on remote memory.</summary>
    public static bool IsRemoteLog(FileDescriptor file) =>
        file.directoryName == StoreDirectory && RemoteLogs.Contains(file.fileName);

    /// <inheritdoc/>
    public INamedDeviceFactory Create(string baseName) => new Factory(this, _local.Create(baseName));

    private IDevice Get(INamedDeviceFactory local, FileDescriptor file)
    {
        if (!IsRemoteLog(file))
            return local.Get(file);
        if (_rent(file) is not { } rented)
            return local.Get(file);
        // Whatever fails below, nothing is left behind: the cache client, the local device and the rented cache.
        IDevice? next;
        try
        {
            next = CacheOnly ? null : local.Get(file);
        }
        catch
        {
            rented.Client.Dispose();
            GiveBack(rented, file);
            throw;
        }
        RemoteCacheDevice cacheTier;
        try
        {
            cacheTier = new RemoteCacheDevice(rented.Client, ownsCache: true, logger: _loggers?.CreateLogger<RemoteCacheDevice>());
        }
        catch
        {
            next?.Dispose();  // the device's constructor disposed the client it was to own
            GiveBack(rented, file);
            throw;
        }
        var tiers = next is null ? new IDevice[] { cacheTier } : new IDevice[] { cacheTier, next };
        TieredDevice device;
        try
        {
            device = new TieredDevice(tiers.Length - 1, tiers, _loggers?.CreateLogger<TieredDevice>());
        }
        catch
        {
            GiveBack(rented, file);  // the tiered device's constructor disposed its tiers
            throw;
        }
        device.Disposed += _ => GiveBack(rented, file);
        lock (_devices)
            _devices.Add(device);
        return device;
    }

    // Garnet disposes devices on its own threads, some inside its constructor: the cache goes back in the background, and a
    // failure to give it back is logged (the manager frees it when its lease ends).
    private void GiveBack(RentedCache rented, FileDescriptor file)
    {
        if (rented.Release is not { } release)
            return;
        var releasing = Task.Run(async () =>
        {
            try
            {
                await release().ConfigureAwait(false);
            }
            catch (Exception e)
            {
                _loggers?.CreateLogger<RemoteCacheDeviceFactoryCreator>().LogWarning(e,
                    "The cache of Garnet's {Directory}/{Log} was not given back; the manager frees it when its lease ends", file.directoryName, file.fileName);
            }
        });
        lock (_releases)
            _releases.Add(releasing);
    }

    private static Func<FileDescriptor, RentedCache?> WithoutRelease(Func<FileDescriptor, RemoteCacheClient?> cacheFor) =>
        file => cacheFor(file) is { } cache ? new RentedCache(cache, null) : null;

    private readonly record struct RentedCache(RemoteCacheClient Client, Func<Task>? Release);

    private sealed class Factory : INamedDeviceFactory
    {
        private readonly RemoteCacheDeviceFactoryCreator _creator;
        private readonly INamedDeviceFactory _local;

        public Factory(RemoteCacheDeviceFactoryCreator creator, INamedDeviceFactory local)
        {
            _creator = creator;
            _local = local;
        }

        public IDevice Get(FileDescriptor fileInfo) => _creator.Get(_local, fileInfo);

        public void Delete(FileDescriptor fileInfo) => _local.Delete(fileInfo);

        public IEnumerable<FileDescriptor> ListContents(string path) => _local.ListContents(path);

        public uint GetSectorSize(FileDescriptor fileInfo) => _local.GetSectorSize(fileInfo);
    }
}

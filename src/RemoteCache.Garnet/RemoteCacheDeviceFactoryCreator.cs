using System;
using System.Collections.Generic;
using System.Linq;
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
/// before use), and a device disposed takes its cache with it, so <c>cacheFor</c> is asked for a new cache each time.
/// A server with more than one database (<c>MaxDatabases</c> &gt; 1) names every database's logs alike: give it one.
/// </remarks>
public sealed class RemoteCacheDeviceFactoryCreator : INamedDeviceFactoryCreator
{
    /// <summary>The directory Garnet names its store's logs under.</summary>
    public const string StoreDirectory = "Store";

    /// <summary>The logs placed on remote memory: the main log and the object log.</summary>
    public static readonly IReadOnlyList<string> RemoteLogs = new[] { "hlog", "hlog_objs" };

    private readonly INamedDeviceFactoryCreator _local;
    private readonly Func<FileDescriptor, RemoteCacheClient> _cacheFor;
    private readonly ILoggerFactory? _loggers;
    private readonly List<TieredDevice> _devices = new();

    /// <summary>Creates the factory creator.</summary>
    /// <param name="local">The factory Garnet would use otherwise (its files): every device not placed on remote memory, and the commit point under those that are.</param>
    /// <param name="cacheFor">
    /// A new cache for one log (its descriptor names which), opened with <see cref="RemoteCacheOptions.Exclusive"/>; the
    /// device owns it from then on. What it throws reaches Garnet's constructor, which then does not start.
    /// </param>
    /// <param name="loggers">Where the devices log their set-up, refusals and tier failures.</param>
    public RemoteCacheDeviceFactoryCreator(INamedDeviceFactoryCreator local, Func<FileDescriptor, RemoteCacheClient> cacheFor, ILoggerFactory? loggers = null)
    {
        _local = local ?? throw new ArgumentNullException(nameof(local));
        _cacheFor = cacheFor ?? throw new ArgumentNullException(nameof(cacheFor));
        _loggers = loggers;
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
        var next = local.Get(file);
        if (!IsRemoteLog(file))
            return next;
        RemoteCacheDevice cacheTier;
        try
        {
            cacheTier = new RemoteCacheDevice(_cacheFor(file), ownsCache: true, logger: _loggers?.CreateLogger<RemoteCacheDevice>());
        }
        catch
        {
            next.Dispose();
            throw;
        }
        var device = new TieredDevice(1, new IDevice[] { cacheTier, next }, _loggers?.CreateLogger<TieredDevice>());
        lock (_devices)
            _devices.Add(device);
        return device;
    }

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

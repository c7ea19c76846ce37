using System;
using System.Collections.Generic;
using FASTER.core;

namespace RemoteCache.Device.Tests;

/// <summary>
/// Checkpoint files as FASTER's <see cref="LocalStorageNamedDeviceFactory"/> makes them, except the DeltaLog of
/// incremental snapshots: it lives on TieredDevice(RemoteCacheDevice over a new cache, the local file). FASTER asks
/// the checkpoint manager for the DeltaLog device (<see cref="DeviceLogCommitCheckpointManager.GetDeltaLogDevice"/>,
/// not virtual), which asks its device factory, so the factory is where the tiers go in.
/// </summary>
public sealed class TieredDeltaLogFactory : INamedDeviceFactory
{
    private static readonly string s_deltaLogName = new DefaultCheckpointNamingScheme().DeltaLog(Guid.Empty).fileName;

    private readonly LocalStorageNamedDeviceFactory _local = new();
    private readonly string _endpoint;
    private readonly int _regions;
    private readonly List<TieredDevice> _deltaLogs = new();

    public TieredDeltaLogFactory(string endpoint, int regions)
    {
        _endpoint = endpoint;
        _regions = regions;
    }

    /// <summary>The DeltaLog devices handed to FASTER so far (FASTER disposes them).</summary>
    public IReadOnlyList<TieredDevice> DeltaLogs
    {
        get
        {
            lock (_deltaLogs)
                return _deltaLogs.ToArray();
        }
    }

    public void Initialize(string baseName) => _local.Initialize(baseName);

    public IDevice Get(FileDescriptor fileInfo)
    {
        var local = _local.Get(fileInfo);
        if (fileInfo.fileName != s_deltaLogName)
            return local;
        var tiered = TestTiers.OverCache(_endpoint, _regions, local, $"delta log {fileInfo.directoryName}");
        lock (_deltaLogs)
            _deltaLogs.Add(tiered);
        return tiered;
    }

    public void Delete(FileDescriptor fileInfo) => _local.Delete(fileInfo);

    public IEnumerable<FileDescriptor> ListContents(string path) => _local.ListContents(path);
}

using System;

namespace RemoteCache.Admin;

/// <summary>What a cache server lends and holds, as one snapshot (<see cref="CacheServerAdmin.GetStatsAsync"/>).</summary>
public sealed record CacheServerStats
{
    /// <summary>The identity capabilities for the server name (<see cref="RemoteCacheCapability.Mint"/>).</summary>
    public string ServerId { get; init; } = "";

    /// <summary>Bytes the server may lend in all.</summary>
    public long MemoryLimit { get; init; }

    /// <summary>Bytes lent now: caches nobody is connected to count until their lease ends or they are dropped; a dropped cache's count until its last connection has closed.</summary>
    public long MemoryLent { get; init; }

    /// <summary>Bytes per region.</summary>
    public long RegionSize { get; init; }

    /// <summary>Live caches (dropped ones and those past their lease excluded).</summary>
    public int Caches { get; init; }

    /// <summary><see cref="MemoryLent"/> in regions.</summary>
    public int RegionsLent { get; init; }

    /// <summary>Established data-path connections.</summary>
    public int DataConnections { get; init; }

    /// <summary>Admin connections, the one asking included (at most <see cref="CacheServerAdmin.MaxConnectionsPerServer"/>).</summary>
    public int AdminConnections { get; init; }

    /// <summary>Server threads polling connections (the server's <c>--threads</c>).</summary>
    public int ServerThreads { get; init; }

    /// <summary>How long the server has been running.</summary>
    public TimeSpan Uptime { get; init; }
}

using System;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary><c>rc_server_stats</c>: what a server holds, as one snapshot.</summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct RcServerStats
{
    /// <summary>In: the size of this struct; out: the bytes the library filled.</summary>
    public uint Size;
    /// <summary>Server threads polling connections.</summary>
    public uint ServerThreads;
    /// <summary>Bytes the server may lend in all.</summary>
    public ulong MemoryLimit;
    /// <summary>Bytes lent now: idle leased caches included, dropped ones until their connections close.</summary>
    public ulong MemoryLent;
    /// <summary>Bytes per region.</summary>
    public ulong RegionSize;
    /// <summary>Milliseconds since the server started.</summary>
    public ulong UptimeMs;
    /// <summary>Live caches.</summary>
    public uint Caches;
    /// <summary><see cref="MemoryLent"/> in regions.</summary>
    public uint RegionsLent;
    /// <summary>Established data-path connections.</summary>
    public uint DataConnections;
    /// <summary>Admin connections, the caller's included.</summary>
    public uint AdminConnections;
    /// <summary>The server id, NUL-terminated UTF-8.</summary>
    public fixed byte ServerId[NativeLimits.MaxServerIdBytes + 1];
}

/// <summary><c>rc_admin_cache</c>: one cache a server holds.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcAdminCache
{
    /// <summary>The cache id (several caches may share one: caches are named by id and token).</summary>
    public ulong CacheId;
    /// <summary>When its lease ends, in milliseconds since 1970; 0 = no lease.</summary>
    public ulong LeaseEndUnixMs;
    /// <summary>Regions lent to it.</summary>
    public uint Regions;
    /// <summary>Its data connections.</summary>
    public uint Connections;
    /// <summary>Its s: server threads polling its connections.</summary>
    public uint ServerThreads;
    /// <summary>1 when opened exclusively, else 0.</summary>
    public uint Exclusive;
}

/// <summary><c>rc_pull_request</c>: a region pull the target server runs (live migration).</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcPullRequest
{
    /// <summary>The one live cache with this id on each server.</summary>
    public ulong CacheId;
    /// <summary>The region to overwrite, within the target's cache.</summary>
    public uint TargetRegion;
    /// <summary>The region to copy, within the source's cache.</summary>
    public uint SourceRegion;
    /// <summary>NUL-terminated UTF-8: the source's endpoint as the target reaches it.</summary>
    public IntPtr SourceEndpoint;
    /// <summary>NUL-terminated: a migration capability for the source, in text form.</summary>
    public IntPtr SourceCapability;
    /// <summary>Bound of the pull on the target in milliseconds; 0 = <see cref="NativeLimits.DefaultPullTimeoutMs"/>.</summary>
    public uint TimeoutMs;
    /// <summary>Paces the copy to at most this many MiB/s; 0 = as fast as the transport goes.</summary>
    public uint MaxMibPerS;
    /// <summary>Consecutive regions copied from <see cref="SourceRegion"/> into <see cref="TargetRegion"/> on; 0 = 1.</summary>
    public uint Regions;
    public uint Reserved;
}

/// <summary><c>rc_pull_result</c>: what a region pull did.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcPullResult
{
    /// <summary>Bytes copied.</summary>
    public ulong Bytes;
    /// <summary>The pull's time on the target, in nanoseconds.</summary>
    public ulong ElapsedNs;
    /// <summary>1: one-sided reads; 0: batched reads on the message path.</summary>
    public uint OneSided;
    /// <summary>0.</summary>
    public uint Reserved;
}

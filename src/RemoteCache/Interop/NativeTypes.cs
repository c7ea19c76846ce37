using System;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>The data-path configuration <c>rc_config</c>: (c, s, b, q) of the Redy paper.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcConfig
{
    /// <summary>Client threads; 0 = the application thread does the client work.</summary>
    public uint ClientThreads;
    /// <summary>Server threads polling the cache's connections; 0 = one-sided access only.</summary>
    public uint ServerThreads;
    /// <summary>Requests per batch, 1..<see cref="NativeLimits.MaxBatchSize"/>.</summary>
    public uint BatchSize;
    /// <summary>Messages in flight per connection, 1..<see cref="NativeLimits.MaxQueueDepth"/>.</summary>
    public uint QueueDepth;
}

/// <summary>
/// <c>rc_cache_options</c>. <see cref="Token"/> points to a NUL-terminated UTF-8 string, <see cref="Capabilities"/>
/// to an array of them; both may be zero.
/// </summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcCacheOptions
{
    /// <summary>Names the cache on its servers, together with the token.</summary>
    public ulong CacheId;
    /// <summary>NUL-terminated UTF-8 secret of at most <see cref="NativeLimits.MaxTokenBytes"/> bytes; zero or "" = a random one.</summary>
    public IntPtr Token;
    /// <summary>Regions requested from each server, 1..<see cref="NativeLimits.MaxRegionsPerServer"/>.</summary>
    public uint RegionsPerServer;
    /// <summary>The initial configuration.</summary>
    public RcConfig Config;
    /// <summary>Operations outstanding per session at most; 0 = <see cref="NativeLimits.DefaultSessionCapacity"/>.</summary>
    public uint SessionCapacity;
    /// <summary>Operation deadline in milliseconds; 0 = <see cref="NativeLimits.DefaultOpTimeoutMs"/>.</summary>
    public uint OpTimeoutMs;
    /// <summary>Connect deadline in milliseconds; 0 = <see cref="NativeLimits.DefaultConnectTimeoutMs"/>.</summary>
    public uint ConnectTimeoutMs;
    /// <summary><see cref="NativeLimits.OpenExclusive"/> or 0.</summary>
    public uint Flags;
    /// <summary>
    /// Zero, or a pointer to one NUL-terminated capability text per endpoint, in endpoint order (required by
    /// servers started with an admission key).
    /// </summary>
    public IntPtr Capabilities;
    /// <summary>Zero, or <see cref="NativeLimits.SealKeyBytes"/> bytes of AES-256 key: a sealed (encrypted) cache.</summary>
    public IntPtr SealKey;
    /// <summary>Plaintext bytes per sealed block; 0 = <see cref="NativeLimits.DefaultSealBlock"/>.</summary>
    public uint SealBlockSize;
    /// <summary>0.</summary>
    public uint Reserved;
}

/// <summary><c>rc_server_options</c>. <see cref="Listen"/> points to an array of UTF-8 endpoint strings.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcServerOptions
{
    /// <summary>Pointer to <see cref="ListenCount"/> NUL-terminated UTF-8 endpoints.</summary>
    public IntPtr Listen;
    /// <summary>How many endpoints.</summary>
    public nuint ListenCount;
    /// <summary>Bytes per region; 0 = <see cref="NativeLimits.DefaultRegionSize"/>.</summary>
    public ulong RegionSize;
    /// <summary>Bytes the server may lend in all; 0 = <see cref="NativeLimits.DefaultMemoryLimit"/>.</summary>
    public ulong MemoryLimit;
    /// <summary>Server threads at most; 0 = hardware threads.</summary>
    public uint MaxThreads;
    /// <summary>Established connections in all; 0 = <see cref="NativeLimits.DefaultMaxConnections"/>.</summary>
    public uint MaxConnections;
    /// <summary>Connections from one peer (tcp: IP address, shm: uid); 0 = <see cref="NativeLimits.DefaultMaxConnectionsPerPeer"/>.</summary>
    public uint MaxConnectionsPerPeer;
    /// <summary>Permission bits of shm socket files; 0 = <see cref="NativeLimits.DefaultShmSocketMode"/>.</summary>
    public uint ShmSocketMode;
    /// <summary>Admission key bytes; zero = open mode (any client that reaches the server is admitted).</summary>
    public IntPtr AdmissionKey;
    /// <summary>Bytes of <see cref="AdmissionKey"/> (at least <see cref="NativeLimits.MinAdmissionKeyBytes"/>).</summary>
    public nuint AdmissionKeyLength;
    /// <summary>NUL-terminated UTF-8 identity that capabilities name; zero = the first endpoint as bound.</summary>
    public IntPtr ServerId;
    /// <summary>Pointer to <see cref="AllowedUidCount"/> uids admitted on abstract shm endpoints besides the server's own.</summary>
    public IntPtr AllowedUids;
    /// <summary>How many uids.</summary>
    public nuint AllowedUidCount;
    /// <summary>1: keep spare regions committed ahead for new caches; 0: a cache's pages are taken as they are first written.</summary>
    public uint CommitMemory;
}

/// <summary><c>rc_object_counts</c>: native objects alive in this process.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcObjectCounts
{
    /// <summary>Open caches.</summary>
    public ulong Caches;
    /// <summary>Open sessions.</summary>
    public ulong Sessions;
    /// <summary>Running servers.</summary>
    public ulong Servers;
}

/// <summary><c>rc_region_info</c>: where a region of the address space lives now.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct RcRegionInfo
{
    /// <summary>The holder (a server the cache is connected to, by join order) it lives on.</summary>
    public uint Holder;
    /// <summary>Its index among the regions that holder lent the cache.</summary>
    public uint HolderRegion;
    /// <summary>Bytes.</summary>
    public ulong Size;
    /// <summary>1 while it migrates.</summary>
    public uint Moving;
    /// <summary>0.</summary>
    public uint Reserved;
}

using System;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>Status codes of <c>remotecache.h</c> (<c>rc_status</c>); zero is success, errors are negative.</summary>
public enum RcStatus
{
    /// <summary>Success.</summary>
    Ok = 0,
    /// <summary>A null handle, a bad option or a malformed endpoint.</summary>
    InvalidArgument = -1,
    /// <summary>The range leaves the cache.</summary>
    OutOfRange = -2,
    /// <summary>The server holding the range is gone.</summary>
    Disconnected = -3,
    /// <summary>
    /// The server refused admission: it has an admission key and the capability is missing, forged, expired, for
    /// another cache or server, or grants fewer regions (or the uid is not allowed on an abstract shm socket).
    /// </summary>
    Auth = -4,
    /// <summary>The server cannot lend that much memory.</summary>
    NoMemory = -5,
    /// <summary>The session has as many operations outstanding as it can hold: poll, then retry.</summary>
    Busy = -6,
    /// <summary>An operation or a connect exceeded its deadline.</summary>
    Timeout = -7,
    /// <summary>The peer sent something that does not parse.</summary>
    Protocol = -8,
    /// <summary>The handle is being closed.</summary>
    Closed = -9,
    /// <summary>The transport or option is not available here.</summary>
    Unsupported = -10,
    /// <summary>A bug or a system-call failure.</summary>
    Internal = -11,
    /// <summary>The cache's lease ended: its server dropped it and its data.</summary>
    Expired = -12,
    /// <summary>The cache is open exclusively by another client (or is open, and an exclusive open was asked for).</summary>
    InUse = -13,
    /// <summary>A server limit is reached: connections in all, or connections from this peer.</summary>
    Limit = -14,
}

/// <summary>The data-path configuration <c>rc_config</c>: (c, s, b, q) of the Redy paper.</summary>
[StructLayout(LayoutKind.Sequential)]
public struct RcConfig
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
public struct RcCacheOptions
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
}

/// <summary>A finished operation, <c>rc_completion</c>.</summary>
[StructLayout(LayoutKind.Sequential)]
public struct RcCompletion
{
    /// <summary>The tag given when the operation was submitted.</summary>
    public ulong Tag;
    /// <summary>An <see cref="RcStatus"/> value.</summary>
    public int Status;
    /// <summary>Unused.</summary>
    public uint Reserved;
}

/// <summary><c>rc_server_options</c>. <see cref="Listen"/> points to an array of UTF-8 endpoint strings.</summary>
[StructLayout(LayoutKind.Sequential)]
public struct RcServerOptions
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
}

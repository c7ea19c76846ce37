using System.Runtime.InteropServices;

namespace RemoteCache;

/// <summary>
/// Why an operation, an open or a server start failed; <see cref="Ok"/> is success and every error is negative. The
/// values are the native library's <c>rc_status</c> codes, stable across versions.
/// </summary>
public enum RemoteCacheStatus
{
    /// <summary>Success.</summary>
    Ok = 0,
    /// <summary>A bad option, argument or endpoint.</summary>
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
    /// <summary>The cache, session or server is being closed.</summary>
    Closed = -9,
    /// <summary>The transport or option is not available here.</summary>
    Unsupported = -10,
    /// <summary>A bug or a system-call failure.</summary>
    Internal = -11,
    /// <summary>
    /// The cache's lease ended, or its manager dropped it (<see cref="Admin.CacheServerAdmin.DropCacheAsync"/>): its
    /// server freed it and its data.
    /// </summary>
    Expired = -12,
    /// <summary>The cache is open exclusively by another client (or is open, and an exclusive open was asked for).</summary>
    InUse = -13,
    /// <summary>A server limit is reached: connections in all, or connections from this peer.</summary>
    Limit = -14,
    /// <summary>
    /// A block of an encrypted cache (<see cref="RemoteCacheOptions.EncryptionKey"/>) did not authenticate: the memory
    /// host altered it, moved it or put an older version back, or it was never written, or another key sealed it. The
    /// client's own verdict; the read's buffer holds zeros, never the block's bytes.
    /// </summary>
    Integrity = -15,
}

/// <summary>
/// A finished operation of a <see cref="RemoteCacheSession"/>: the tag it was started with and how it ended. Laid out
/// as the native <c>rc_completion</c>, so sessions poll straight into a span of these.
/// </summary>
[StructLayout(LayoutKind.Sequential)]
public readonly struct RemoteCacheCompletion
{
    private readonly ulong _tag;
    private readonly RemoteCacheStatus _status;
    private readonly uint _reserved;

    /// <summary>Creates a completion (for tests of code that consumes them).</summary>
    public RemoteCacheCompletion(ulong tag, RemoteCacheStatus status)
    {
        _tag = tag;
        _status = status;
        _reserved = 0;
    }

    /// <summary>The tag given when the operation was started.</summary>
    public ulong Tag => _tag;

    /// <summary><see cref="RemoteCacheStatus.Ok"/>, or why the operation failed.</summary>
    public RemoteCacheStatus Status => _status;

    /// <inheritdoc/>
    public override string ToString() => $"tag {Tag}: {Status}";
}

using System;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// A cache operation failed for a reason other than bad arguments: the server is gone
/// (<see cref="RcStatus.Disconnected"/>), did not answer in time (<see cref="RcStatus.Timeout"/>), refused
/// admission (<see cref="RcStatus.Auth"/>), the memory (<see cref="RcStatus.NoMemory"/>) or a connection
/// (<see cref="RcStatus.Limit"/>), dropped the cache when its lease ended (<see cref="RcStatus.Expired"/>),
/// has the cache open exclusively for another client (<see cref="RcStatus.InUse"/>), or broke the protocol.
/// </summary>
public sealed class RemoteCacheException : Exception
{
    /// <summary>Creates the exception.</summary>
    public RemoteCacheException(RcStatus status, string cacheName, long address, long length, string message)
        : base(message)
    {
        Status = status;
        CacheName = cacheName;
        Address = address;
        Length = length;
    }

    /// <summary>The native status.</summary>
    public RcStatus Status { get; }

    /// <summary>The cache the operation was on.</summary>
    public string CacheName { get; }

    /// <summary>The first byte of the operation (-1 when not about one operation).</summary>
    public long Address { get; }

    /// <summary>The length of the operation (0 when not about one operation).</summary>
    public long Length { get; }
}

/// <summary>Turns native statuses into the exceptions the API documents.</summary>
internal static class Errors
{
    public static Exception For(RcStatus status, string cache, long address, long length, string? detail = null)
    {
        detail ??= NativeMethods.LastError();
        var what = address < 0
            ? $"{cache}: {status}"
            : $"{cache}: [{address}, +{length}): {status}";
        if (!string.IsNullOrEmpty(detail))
            what += $" ({detail})";
        return status switch
        {
            RcStatus.OutOfRange => new ArgumentOutOfRangeException(nameof(address), address, what),
            RcStatus.InvalidArgument => new ArgumentException(what),
            RcStatus.Closed => new ObjectDisposedException(cache, what),
            _ => new RemoteCacheException(status, cache, address, length, what),
        };
    }

    /// <summary>What a failed completion means, for its exception (the native last-error text belongs to another thread).</summary>
    public static string Describe(RcStatus status) => status switch
    {
        RcStatus.Disconnected => "the cache server is gone",
        RcStatus.Timeout => "the server did not answer within the operation timeout",
        RcStatus.Protocol => "the server sent something that does not parse",
        RcStatus.OutOfRange => "the server refused a range outside its regions",
        RcStatus.Closed => "the cache is closing",
        RcStatus.Expired => "the cache's lease ended: its server dropped it and its data",
        RcStatus.Limit => "a server connection limit is reached",
        _ => status.ToString(),
    };

    public static void ThrowIfFailed(RcStatus status, string cache)
    {
        if (status != RcStatus.Ok)
            throw For(status, cache, -1, 0);
    }
}

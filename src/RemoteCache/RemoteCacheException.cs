using System;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// A cache operation failed for a reason other than bad arguments: the server is gone
/// (<see cref="RemoteCacheStatus.Disconnected"/>), did not answer in time (<see cref="RemoteCacheStatus.Timeout"/>), refused
/// admission (<see cref="RemoteCacheStatus.Auth"/>), the memory (<see cref="RemoteCacheStatus.NoMemory"/>) or a connection
/// (<see cref="RemoteCacheStatus.Limit"/>), dropped the cache when its lease ended or its manager dropped it
/// (<see cref="RemoteCacheStatus.Expired"/>),
/// has the cache open exclusively for another client (<see cref="RemoteCacheStatus.InUse"/>), or broke the protocol.
/// </summary>
public sealed class RemoteCacheException : Exception
{
    /// <summary>Creates the exception.</summary>
    public RemoteCacheException(RemoteCacheStatus status, string cacheName, long address, long length, string message)
        : base(message)
    {
        Status = status;
        CacheName = cacheName;
        Address = address;
        Length = length;
    }

    /// <summary>The native status.</summary>
    public RemoteCacheStatus Status { get; }

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
    public static Exception For(RemoteCacheStatus status, string cache, long address, long length, string? detail = null)
    {
        detail ??= NativeMethods.LastError();
        var what = address < 0
            ? $"{cache}: {status}"
            : $"{cache}: [{address}, +{length}): {status}";
        if (!string.IsNullOrEmpty(detail))
            what += $" ({detail})";
        return status switch
        {
            RemoteCacheStatus.OutOfRange => new ArgumentOutOfRangeException(nameof(address), address, what),
            RemoteCacheStatus.InvalidArgument => new ArgumentException(what),
            RemoteCacheStatus.Closed => new ObjectDisposedException(cache, what),
            _ => new RemoteCacheException(status, cache, address, length, what),
        };
    }

    /// <summary>What a failed completion means, for its exception (the native last-error text belongs to another thread).</summary>
    public static string Describe(RemoteCacheStatus status) => status switch
    {
        RemoteCacheStatus.Disconnected => "the cache server is gone",
        RemoteCacheStatus.Timeout => "the server did not answer within the operation timeout",
        RemoteCacheStatus.Protocol => "the server sent something that does not parse",
        RemoteCacheStatus.OutOfRange => "the server refused a range outside its regions",
        RemoteCacheStatus.Closed => "the cache is closing",
        RemoteCacheStatus.Expired => "the cache's lease ended, or its manager dropped it: its server freed it and its data",
        RemoteCacheStatus.Limit => "a server connection limit is reached",
        RemoteCacheStatus.Integrity => "a block of the encrypted cache did not authenticate (altered, moved or replayed by its memory host, never written, or sealed under another key)",
        _ => status.ToString(),
    };

    public static void ThrowIfFailed(RemoteCacheStatus status, string cache)
    {
        if (status != RemoteCacheStatus.Ok)
            throw For(status, cache, -1, 0);
    }
}

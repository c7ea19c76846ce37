using System;

namespace RemoteCache;

/// <summary>
/// Bytes of a cache that no longer hold what was written there (<see cref="RemoteCacheClient.ContentLost"/>): a server
/// holding them failed, or was reclaimed before they were copied, and a replacement serves them now.
/// </summary>
public sealed class RemoteCacheContentLostEventArgs : EventArgs
{
    /// <summary>Creates the event's data.</summary>
    public RemoteCacheContentLostEventArgs(long address, long length, string reason)
    {
        Address = address;
        Length = length;
        Reason = reason;
    }

    /// <summary>The first byte lost.</summary>
    public long Address { get; }

    /// <summary>Bytes lost from <see cref="Address"/> on.</summary>
    public long Length { get; }

    /// <summary>Why (the server's failure, or the reclaim deadline that came first).</summary>
    public string Reason { get; }
}

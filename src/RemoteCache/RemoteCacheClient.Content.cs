using System;
using RemoteCache.Interop;

namespace RemoteCache;

// What the cache tells its users about its content (the movers' primitives are RemoteCacheMover's).
public sealed partial class RemoteCacheClient
{
    /// <summary>
    /// Raised when bytes of the cache no longer hold what was written there, before they are served again: on the thread
    /// that called <see cref="RemoteCacheMover.ReportContentLost"/>, or on the client's recovery thread when a server that went away came
    /// back empty (<see cref="RemoteCacheOptions.Reconnect"/>). Users that trust what they wrote earlier (a FASTER device
    /// over the cache) forget those bytes.
    /// </summary>
    public event EventHandler<RemoteCacheContentLostEventArgs>? ContentLost;

    // address and length name the servers' address space (regions); an encrypted cache's users address the whole
    // blocks stored in it (each with its trailer), so they hear of the blocks the lost bytes touched.
    internal void RaiseContentLost(long address, long length, string reason)
    {
        if (_encrypted is { } layout)
        {
            (address, length) = layout.ClientRange(address, length, Capacity);
            if (length == 0)
                return;  // only the key check or the tail past the last whole block, which no user address names
        }
        Log.ContentLost(_logger, Name, address, length, reason);
        ContentLost?.Invoke(this, new RemoteCacheContentLostEventArgs(address, length, reason));
    }

    // The client bytes the servers' bytes [address, +length) hold (an encrypted cache's blocks; a plain cache's are the same).
    internal (long Address, long Length) ClientRange(long address, long length) =>
        _encrypted is { } layout ? layout.ClientRange(address, length, Capacity) : (address, Math.Min(length, Math.Max(Capacity - address, 0)));

    // Bytes of the servers' address space: the sum of the regions (more than Capacity for an encrypted cache).
    internal long ServerBytes()
    {
        long total = 0;
        uint regions = (uint)NativeMethods.CacheRegionCount(_cache);
        for (uint r = 0; r < regions; r++)
            if (NativeMethods.CacheRegionInfo(_cache, r, out var info) == RemoteCacheStatus.Ok)
                total += (long)info.Size;
        return total;
    }
}

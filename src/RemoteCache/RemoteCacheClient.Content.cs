using System;

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

    internal void RaiseContentLost(long address, long length, string reason)
    {
        Log.ContentLost(_logger, Name, address, length, reason);
        ContentLost?.Invoke(this, new RemoteCacheContentLostEventArgs(address, length, reason));
    }
}

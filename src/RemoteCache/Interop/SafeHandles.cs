using System;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>
/// Owns an <c>rc_cache*</c>; releasing it calls <c>rc_cache_close</c>. Sessions hold a reference to it
/// (<see cref="SessionHandle.HoldParent"/>), so the close happens after the last of them, whatever the order of
/// disposal.
/// </summary>
internal sealed class CacheHandle : SafeHandle
{
    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public CacheHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <inheritdoc/>
    protected override bool ReleaseHandle() => NativeMethods.CacheClose(handle) == RemoteCacheStatus.Ok;
}

/// <summary>
/// Owns an <c>rc_session*</c>; releasing it calls <c>rc_session_close</c> (which waits for its operations), then lets
/// go of the cache it belongs to.
/// </summary>
internal sealed class SessionHandle : SafeHandle
{
    private CacheHandle? _parent;

    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public SessionHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <summary>
    /// Keeps <paramref name="cache"/> open until this session is closed: the native cache must outlive its sessions,
    /// and a session's owner may dispose it after the client.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The cache was disposed meanwhile (the session is closed then).</exception>
    public void HoldParent(CacheHandle cache)
    {
        bool added = false;
        try
        {
            cache.DangerousAddRef(ref added);
        }
        finally
        {
            if (added)
                _parent = cache;
            else
                Dispose();
        }
    }

    /// <inheritdoc/>
    protected override bool ReleaseHandle()
    {
        bool closed = NativeMethods.SessionClose(handle) == RemoteCacheStatus.Ok;
        _parent?.DangerousRelease();
        return closed;
    }
}

/// <summary>Owns an <c>rc_server*</c> (embedded server); releasing it calls <c>rc_server_stop</c>.</summary>
internal sealed class ServerHandle : SafeHandle
{
    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public ServerHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <inheritdoc/>
    protected override bool ReleaseHandle() => NativeMethods.ServerStop(handle) == RemoteCacheStatus.Ok;
}

/// <summary>Owns an <c>rc_admin*</c> (an admin connection); releasing it calls <c>rc_admin_close</c>.</summary>
internal sealed class AdminHandle : SafeHandle
{
    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public AdminHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <inheritdoc/>
    protected override bool ReleaseHandle() => NativeMethods.AdminClose(handle) == RemoteCacheStatus.Ok;
}

using System;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>Owns an <c>rc_cache*</c>; releasing it calls <c>rc_cache_close</c> (every session must be closed first).</summary>
public sealed class CacheHandle : SafeHandle
{
    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public CacheHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <inheritdoc/>
    protected override bool ReleaseHandle() => NativeMethods.CacheClose(handle) == RcStatus.Ok;
}

/// <summary>Owns an <c>rc_session*</c>; releasing it calls <c>rc_session_close</c>, which waits for its operations.</summary>
public sealed class SessionHandle : SafeHandle
{
    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public SessionHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <inheritdoc/>
    protected override bool ReleaseHandle() => NativeMethods.SessionClose(handle) == RcStatus.Ok;
}

/// <summary>Owns an <c>rc_server*</c> (embedded server); releasing it calls <c>rc_server_stop</c>.</summary>
public sealed class ServerHandle : SafeHandle
{
    /// <summary>Creates an invalid handle (the marshaller fills it in).</summary>
    public ServerHandle() : base(IntPtr.Zero, ownsHandle: true) { }

    /// <inheritdoc/>
    public override bool IsInvalid => handle == IntPtr.Zero;

    /// <inheritdoc/>
    protected override bool ReleaseHandle() => NativeMethods.ServerStop(handle) == RcStatus.Ok;
}

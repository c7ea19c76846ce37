using System;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// One native session, for one thread at a time: the lowest-overhead path, one blittable call per
/// operation and nothing else (no lock, no pooling, no exceptions on the hot path). Operations are
/// identified by a caller-chosen tag and complete through <see cref="Poll"/> / <see cref="Wait"/>;
/// requests keep program order. Buffers must stay valid and pinned until their completion is returned.
/// </summary>
/// <remarks>
/// A session keeps its cache's native resources alive until it is disposed, so client and sessions may be disposed
/// in any order; operations on a session whose client was disposed still complete.
/// </remarks>
public sealed unsafe class RemoteCacheSession : IDisposable
{
    private readonly SessionHandle _handle;
    private readonly IntPtr _session;
    private readonly string _cacheName;
    private bool _disposed;

    internal RemoteCacheSession(SessionHandle handle, string cacheName)
    {
        _handle = handle;
        _cacheName = cacheName;
        // The raw pointer spares each call the handle's reference counting; the handle lives as long as this object
        // (GC.KeepAlive below), and a session never disposed is closed by the handle's finalizer.
        _session = _handle.DangerousGetHandle();
    }

    /// <summary>
    /// Starts a read of <paramref name="length"/> bytes at <paramref name="address"/> into pinned or unmanaged
    /// <paramref name="destination"/>; its completion carries <paramref name="tag"/>. Returns
    /// <see cref="RemoteCacheStatus.Busy"/> when the session holds as many operations as it can (poll, then retry),
    /// <see cref="RemoteCacheStatus.OutOfRange"/> for a range outside the cache.
    /// </summary>
    public RemoteCacheStatus StartRead(long address, void* destination, int length, ulong tag)
    {
        ThrowIfDisposed();
        var status = NativeMethods.Read(_session, (ulong)address, destination, (ulong)length, tag);
        GC.KeepAlive(this);
        return status;
    }

    /// <summary>Starts a write from pinned or unmanaged memory; see <see cref="StartRead"/>.</summary>
    public RemoteCacheStatus StartWrite(long address, void* source, int length, ulong tag)
    {
        ThrowIfDisposed();
        var status = NativeMethods.Write(_session, (ulong)address, source, (ulong)length, tag);
        GC.KeepAlive(this);
        return status;
    }

    /// <summary>Sends a partly filled batch now.</summary>
    public RemoteCacheStatus Flush()
    {
        ThrowIfDisposed();
        var status = NativeMethods.Flush(_session);
        GC.KeepAlive(this);
        return status;
    }

    /// <summary>Copies finished completions into <paramref name="completions"/> without blocking; returns how many.</summary>
    /// <exception cref="RemoteCacheException">The session failed as a whole (a protocol error).</exception>
    public int Poll(Span<RemoteCacheCompletion> completions)
    {
        ThrowIfDisposed();
        int n;
        fixed (RemoteCacheCompletion* p = completions)
            n = NativeMethods.Poll(_session, p, (uint)completions.Length);
        GC.KeepAlive(this);
        return Check(n);
    }

    /// <summary>
    /// Like <see cref="Poll"/>, waiting up to <paramref name="timeout"/> for one completion
    /// (<see cref="System.Threading.Timeout.InfiniteTimeSpan"/>: no limit); returns 0 when none came in time.
    /// </summary>
    /// <exception cref="ArgumentOutOfRangeException">The timeout is negative (other than infinite) or over int.MaxValue ms.</exception>
    public int Wait(Span<RemoteCacheCompletion> completions, TimeSpan timeout)
    {
        ThrowIfDisposed();
        long ms = (long)Math.Ceiling(timeout.TotalMilliseconds);
        if (ms < -1 || ms > int.MaxValue)
            throw new ArgumentOutOfRangeException(nameof(timeout), timeout, "a wait lasts 0..int.MaxValue ms, or is infinite");
        int n;
        fixed (RemoteCacheCompletion* p = completions)
            n = NativeMethods.Wait(_session, p, (uint)completions.Length, (int)ms);
        GC.KeepAlive(this);
        return Check(n);
    }

    /// <summary>Operations started whose completions have not been returned yet.</summary>
    public int Outstanding
    {
        get
        {
            ThrowIfDisposed();
            int n = (int)NativeMethods.SessionOutstanding(_session);
            GC.KeepAlive(this);
            return n;
        }
    }

    private int Check(int n) => n >= 0 ? n : throw Errors.For((RemoteCacheStatus)n, _cacheName, -1, 0);

    private void ThrowIfDisposed()
    {
        if (_disposed)
            throw new ObjectDisposedException($"a session of {_cacheName}");
    }

    /// <summary>Waits for outstanding operations (discarding their completions) and closes the session.</summary>
    public void Dispose()
    {
        if (_disposed)
            return;
        _disposed = true;
        _handle.Dispose();
    }
}

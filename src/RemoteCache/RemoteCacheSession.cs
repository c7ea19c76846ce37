using System;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// One native session, for one thread at a time: the lowest-overhead path, one blittable call per
/// operation and nothing else (no lock, no pooling, no exceptions on the hot path). Operations are
/// identified by a caller-chosen tag and complete through <see cref="Poll"/> / <see cref="Wait"/>;
/// requests keep program order. Buffers must stay valid and pinned until their completion is returned.
/// Dispose every session before its client.
/// </summary>
public sealed unsafe class RemoteCacheSession : IDisposable
{
    private readonly SessionHandle _handle;
    private readonly IntPtr _session;
    private bool _disposed;

    internal RemoteCacheSession(SessionHandle handle)
    {
        _handle = handle;
        bool added = false;
        _handle.DangerousAddRef(ref added);
        _session = _handle.DangerousGetHandle();
    }

    /// <summary>Starts a read. <see cref="RcStatus.Busy"/>: too many operations outstanding, poll then retry.</summary>
    public RcStatus Read(long address, void* destination, int length, ulong tag) =>
        NativeMethods.Read(_session, (ulong)address, destination, (ulong)length, tag);

    /// <summary>Starts a write. <see cref="RcStatus.Busy"/>: too many operations outstanding, poll then retry.</summary>
    public RcStatus Write(long address, void* source, int length, ulong tag) =>
        NativeMethods.Write(_session, (ulong)address, source, (ulong)length, tag);

    /// <summary>Sends a partly filled batch now.</summary>
    public RcStatus Flush() => NativeMethods.Flush(_session);

    /// <summary>Copies finished completions into <paramref name="completions"/> without blocking; returns how many.</summary>
    public int Poll(Span<RcCompletion> completions)
    {
        fixed (RcCompletion* p = completions)
            return Check(NativeMethods.Poll(_session, p, (uint)completions.Length));
    }

    /// <summary>Like <see cref="Poll"/>, waiting up to <paramref name="timeoutMs"/> (-1: no limit) for one completion.</summary>
    public int Wait(Span<RcCompletion> completions, int timeoutMs)
    {
        fixed (RcCompletion* p = completions)
            return Check(NativeMethods.Wait(_session, p, (uint)completions.Length, timeoutMs));
    }

    /// <summary>Operations submitted whose completions have not been returned yet.</summary>
    public int Outstanding => (int)NativeMethods.SessionOutstanding(_session);

    private static int Check(int n) => n >= 0 ? n : throw Errors.For((RcStatus)n, "session", -1, 0);

    /// <summary>Waits for outstanding operations (discarding their completions) and closes the session.</summary>
    public void Dispose()
    {
        if (_disposed)
            return;
        _disposed = true;
        _handle.DangerousRelease();
        _handle.Dispose();
    }
}

using System;
using System.Buffers;
using System.Threading.Tasks.Sources;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>Called when a low-level <see cref="RemoteCacheClient.Read"/> or <see cref="RemoteCacheClient.Write"/> finishes.</summary>
/// <param name="status"><see cref="RcStatus.Ok"/>, or why the operation failed.</param>
/// <param name="context">The context given with the operation.</param>
public delegate void IoCallback(RcStatus status, object? context);

/// <summary>
/// One in-flight operation, pooled per lane and reused: it is the <see cref="IValueTaskSource"/>
/// behind <see cref="RemoteCacheClient.ReadAsync"/> / <see cref="RemoteCacheClient.WriteAsync"/>, or
/// carries the callback of the low-level path. Its index in the lane is the native tag.
/// </summary>
internal sealed class Operation : IValueTaskSource
{
    private ManualResetValueTaskSourceCore<bool> _core;

    public Operation(Lane lane, int index)
    {
        Lane = lane;
        Index = index;
        // Continuations run on the completing thread: no extra hop for awaiters on this hot path.
        _core.RunContinuationsAsynchronously = false;
    }

    public Lane Lane { get; }
    public int Index { get; }
    public short Version => _core.Version;

    public MemoryHandle Pin;
    public IoCallback? Callback;
    public object? Context;
    public long Address;
    public long Length;

    /// <summary>Fills in an operation the native session accepted (under the lane's gate).</summary>
    public void Start(long address, long length, IoCallback? callback, object? context, MemoryHandle pin)
    {
        Address = address;
        Length = length;
        Callback = callback;
        Context = context;
        Pin = pin;
    }

    /// <summary>Completes a ValueTask operation, once, on whichever thread harvested it.</summary>
    public void Complete(RcStatus status)
    {
        Pin.Dispose();
        Pin = default;
        if (status == RcStatus.Ok)
            _core.SetResult(true);
        else
            _core.SetException(Errors.For(status, Lane.Owner.Name, Address, Length, Errors.Describe(status)));
    }

    public ValueTaskSourceStatus GetStatus(short token)
    {
        var status = _core.GetStatus(token);
        if (status != ValueTaskSourceStatus.Pending)
            return status;
        // The awaiting thread moves the data itself for a short while (with c = 0 nothing else may be
        // polling this lane right now); the client's poller takes over if it has to suspend. Not from
        // inside a dispatch, though: the continuation would nest one level deeper per await.
        if (!Lane.InDispatch)
            Lane.DriveWhilePending(this, token);
        return _core.GetStatus(token);
    }

    internal bool IsPending(short token) => _core.GetStatus(token) == ValueTaskSourceStatus.Pending;

    public void OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags) =>
        _core.OnCompleted(continuation, state, token, flags);

    public void GetResult(short token)
    {
        try
        {
            _core.GetResult(token);
        }
        finally
        {
            _core.Reset();
            Lane.Return(this);
        }
    }
}

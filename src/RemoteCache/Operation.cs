using System;
using System.Buffers;
using System.Threading;
using System.Threading.Tasks.Sources;

namespace RemoteCache;

/// <summary>
/// Called when an operation started with <see cref="RemoteCacheClient.StartRead"/> or
/// <see cref="RemoteCacheClient.StartWrite"/> finishes.
/// </summary>
/// <param name="status"><see cref="RemoteCacheStatus.Ok"/>, or why the operation failed.</param>
/// <param name="context">The context given with the operation.</param>
public delegate void IoCallback(RemoteCacheStatus status, object? context);

/// <summary>
/// One in-flight operation, pooled per lane and reused: it is the <see cref="IValueTaskSource"/>
/// behind <see cref="RemoteCacheClient.ReadAsync"/> / <see cref="RemoteCacheClient.WriteAsync"/>, or
/// carries the callback of the low-level path. Its index in the lane is the native tag.
/// </summary>
internal sealed class Operation : IValueTaskSource
{
    private const int Pending = 0, Completed = 1, Cancelled = 2;

    private ManualResetValueTaskSourceCore<bool> _core;
    // A cancellable operation has two holders, its awaiter and its native completion: cancelling finishes the awaiter
    // while the operation may still be in flight (its buffer pinned, its tag in use), so the last of the two to let go
    // returns it to the pool. Operations without a cancellable token skip all of this.
    private bool _cancellable;
    private int _state;
    private int _holders;
    private CancellationTokenRegistration _registration;

    public Operation(Lane lane, int index)
    {
        Lane = lane;
        Index = index;
    }

    public Lane Lane { get; }
    public int Index { get; }
    public short Version => _core.Version;

    public MemoryHandle Pin;
    public IoCallback? Callback;
    public object? Context;
    public long Address;
    public long Length;
    public bool IsWrite;
    public long Started;  // Stopwatch timestamp, 0 when no one measures durations

    /// <summary>Fills in an operation the native session accepted (under the lane's gate).</summary>
    public void Start(bool write, long address, long length, IoCallback? callback, object? context, MemoryHandle pin,
                      long started, bool cancellable)
    {
        IsWrite = write;
        Address = address;
        Length = length;
        Callback = callback;
        Context = context;
        Pin = pin;
        Started = started;
        _cancellable = cancellable;
        if (cancellable)
        {
            _state = Pending;
            _holders = 2;
        }
    }

    /// <summary>Makes <paramref name="token"/> cancel the awaiter (after <see cref="Start"/>, by the submitting thread).</summary>
    public void CancelOn(CancellationToken token) =>
        _registration = token.UnsafeRegister(static (state, t) => ((Operation)state!).Cancel(t), this);

    private void Cancel(CancellationToken token)
    {
        if (Interlocked.CompareExchange(ref _state, Cancelled, Pending) == Pending)
            _core.SetException(new OperationCanceledException(
                $"{Lane.Owner.Name}: [{Address}, +{Length}): the {(IsWrite ? "write" : "read")} was cancelled; it may still " +
                "complete on the server, and its buffer stays pinned until it does", token));
    }

    /// <summary>Completes a ValueTask operation, once, on whichever thread harvested it.</summary>
    public void Complete(RemoteCacheStatus status)
    {
        Pin.Dispose();
        Pin = default;
        if (_cancellable && Interlocked.CompareExchange(ref _state, Completed, Pending) != Pending)
        {
            Release();  // cancelled: the awaiter has its answer already
            return;
        }
        // An awaiter's continuation runs inline on a caller that harvested its own completion (no hop on the hot path),
        // but never on the poller: the rest of the caller's method would run there, stalling every lane's completions
        // while it runs and deadlocking if it blocks on the client (or disposes it).
        _core.RunContinuationsAsynchronously = RemoteCacheClient.IsPollerOf(Lane.Owner);
        if (status == RemoteCacheStatus.Ok)
            _core.SetResult(true);
        else
            _core.SetException(Errors.For(status, Lane.Owner.Name, Address, Length, Errors.Describe(status)));
        if (_cancellable)
            Release();
    }

    private void Release()
    {
        if (Interlocked.Decrement(ref _holders) == 0)
            Recycle();
    }

    private void Recycle()
    {
        _core.Reset();
        Lane.Return(this);
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
            if (_cancellable)
            {
                // Waits for a cancellation callback running on another thread, so none touches the operation once reused.
                _registration.Dispose();
                _registration = default;
                Release();
            }
            else
            {
                Recycle();
            }
        }
    }
}

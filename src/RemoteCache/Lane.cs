using System;
using System.Diagnostics;
using System.Threading;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// One native session shared by many callers. The native session belongs to one thread at a time, so
/// every call into it happens under <see cref="_gate"/>; completions are dispatched after the gate is
/// released, so that callbacks and continuations can submit again without re-entering the session.
/// A client's background poller may block in rc_wait while holding the gate: a submitter that finds
/// the gate taken wakes it with rc_wake (the one thread-safe session call).
/// </summary>
internal sealed unsafe class Lane : IDisposable
{
    private const int PollBatch = 64;
    private static readonly long SpinTicks = Stopwatch.Frequency / 20_000;  // 50 µs

    // Dispatch runs callers' code (callbacks, inline continuations), which may drive a lane again on
    // the same thread. Each nesting level gets its own buffer, and nesting stops at MaxDepth: deeper
    // code leaves the work to an outer level or the poller instead of growing the stack.
    private const int MaxDepth = 4;
    [ThreadStatic] private static int t_depth;
    [ThreadStatic] private static (Operation Op, RcStatus Status)[][]? t_buffers;

    /// <summary>Whether the calling thread is running completions right now.</summary>
    public static bool InDispatch => t_depth > 0;

    private readonly object _gate = new();
    private readonly SessionHandle _handle;
    private readonly IntPtr _session;
    private readonly Operation[] _ops;
    private readonly int[] _next;   // free-list links, by operation index
    private long _freeHead;         // low 32 bits: index + 1 of the first free operation; high: ABA counter
    private volatile bool _pollerWaiting;
    private bool _closed;

    public Lane(RemoteCacheClient owner, SessionHandle handle, int capacity)
    {
        Owner = owner;
        _handle = handle;
        bool added = false;
        _handle.DangerousAddRef(ref added);  // released in Dispose: the raw pointer stays valid until then
        _session = _handle.DangerousGetHandle();
        _ops = new Operation[capacity];
        _next = new int[capacity];
        for (int i = capacity - 1; i >= 0; i--)
        {
            _ops[i] = new Operation(this, i);
            Return(_ops[i]);
        }
    }

    public RemoteCacheClient Owner { get; }

    /// <summary>Operations submitted to the native session and not yet harvested (read racily by the poller).</summary>
    public int Outstanding => Volatile.Read(ref _outstanding);
    private int _outstanding;

    /// <summary>Bumped by every submission, so the poller can tell a busy lane from an abandoned one.</summary>
    public int Activity;

    // ---- operation pool (lock-free: operations come back from any thread) --------------------------

    public Operation? Rent()
    {
        for (;;)
        {
            long head = Volatile.Read(ref _freeHead);
            int index = (int)(head & 0xffffffff) - 1;
            if (index < 0)
                return null;
            long next = ((head >> 32) + 1) << 32 | (uint)(_next[index] + 1);
            if (Interlocked.CompareExchange(ref _freeHead, next, head) == head)
                return _ops[index];
        }
    }

    public void Return(Operation op)
    {
        for (;;)
        {
            long head = Volatile.Read(ref _freeHead);
            _next[op.Index] = (int)(head & 0xffffffff) - 1;
            long next = ((head >> 32) + 1) << 32 | (uint)(op.Index + 1);
            if (Interlocked.CompareExchange(ref _freeHead, next, head) == head)
                return;
        }
    }

    // ---- submission -------------------------------------------------------------------------------

    /// <summary>Hands one operation to the native session; retries while the session is full.</summary>
    public RcStatus Submit(Operation op, bool write, void* buffer)
    {
        for (;;)
        {
            Enter();
            if (_closed)
            {
                Monitor.Exit(_gate);
                return RcStatus.Closed;
            }
            var status = write
                ? NativeMethods.Write(_session, (ulong)op.Address, buffer, (ulong)op.Length, (ulong)op.Index)
                : NativeMethods.Read(_session, (ulong)op.Address, buffer, (ulong)op.Length, (ulong)op.Index);
            if (status != RcStatus.Busy)
            {
                if (status == RcStatus.Ok && _outstanding++ == 0)
                    Owner.NotifyOutstanding();
                Activity++;
                Monitor.Exit(_gate);
                return status;
            }
            // Full: harvest what has finished (outside the gate), then try again.
            int n = t_depth < MaxDepth ? PollLocked(0, out var finished) : NoPoll(out finished);
            Monitor.Exit(_gate);
            Dispatch(finished, n);
            if (n == 0)
                Thread.Yield();
        }
    }

    private void Enter()
    {
        if (Monitor.TryEnter(_gate))
            return;
        var spin = new SpinWait();
        while (!Monitor.TryEnter(_gate))
        {
            if (_pollerWaiting)
                NativeMethods.Wake(_session);
            spin.SpinOnce(sleep1Threshold: -1);
        }
    }

    // ---- progress ---------------------------------------------------------------------------------

    /// <summary>Polls once if nobody else is in the session; returns the operations it completed.</summary>
    public int Drive()
    {
        if (t_depth >= MaxDepth || !Monitor.TryEnter(_gate))
            return 0;
        int n = PollLocked(0, out var finished);
        Monitor.Exit(_gate);
        Dispatch(finished, n);
        return n;
    }

    /// <summary>The poller's blocking form: waits in rc_wait up to <paramref name="timeoutMs"/>.</summary>
    public int DriveBlocking(int timeoutMs)
    {
        Enter();
        _pollerWaiting = true;
        int n = PollLocked(timeoutMs, out var finished);
        _pollerWaiting = false;
        Monitor.Exit(_gate);
        Dispatch(finished, n);
        return n;
    }

    /// <summary>Drives the lane for up to about 50 µs or until <paramref name="op"/> has finished.</summary>
    public void DriveWhilePending(Operation op, short token)
    {
        long start = Stopwatch.GetTimestamp();
        var spin = new SpinWait();
        while (op.IsPending(token))
        {
            if (Drive() == 0)
            {
                if (Stopwatch.GetTimestamp() - start > SpinTicks)
                    return;
                spin.SpinOnce(sleep1Threshold: -1);
            }
        }
    }

    private static int NoPoll(out (Operation Op, RcStatus Status)[] finished)
    {
        finished = Array.Empty<(Operation, RcStatus)>();
        return 0;
    }

    private int PollLocked(int waitMs, out (Operation Op, RcStatus Status)[] finished)
    {
        var buffers = t_buffers ??= new (Operation, RcStatus)[MaxDepth][];
        finished = buffers[t_depth] ??= new (Operation, RcStatus)[PollBatch];
        if (_closed)
            return 0;
        RcCompletion* completions = stackalloc RcCompletion[PollBatch];
        int n = waitMs > 0
            ? NativeMethods.Wait(_session, completions, PollBatch, waitMs)
            : NativeMethods.Poll(_session, completions, PollBatch);
        if (n <= 0)
            return 0;
        _outstanding -= n;
        for (int i = 0; i < n; i++)
            finished[i] = (_ops[(int)completions[i].Tag], (RcStatus)completions[i].Status);
        return n;
    }

    private static void Dispatch((Operation Op, RcStatus Status)[] finished, int n)
    {
        if (n == 0)
            return;
        t_depth++;
        try
        {
            for (int i = 0; i < n; i++)
            {
                var (op, status) = finished[i];
                finished[i] = default;
                op.Complete(status);
            }
        }
        finally
        {
            t_depth--;
        }
    }

    // ---- shutdown ---------------------------------------------------------------------------------

    /// <summary>Waits (driving the session) until every submitted operation has completed.</summary>
    public void Drain()
    {
        while (Outstanding > 0)
            DriveBlocking(10);
    }

    public void Dispose()
    {
        lock (_gate)
        {
            if (_closed)
                return;
            _closed = true;
        }
        _handle.DangerousRelease();
        _handle.Dispose();  // rc_session_close: waits for anything still in flight
    }
}

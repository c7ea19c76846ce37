using System;
using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Threading;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// One native session shared by many callers. The native session belongs to one thread at a time, so
/// every call into it happens while holding <see cref="_busy"/> (a flag, not a Monitor: the gate is taken
/// twice per operation and uncontended almost always, where a CAS costs a fraction of Monitor enter/exit);
/// completions are dispatched after the gate is
/// released, so that callbacks and continuations can submit again without re-entering the session.
/// A client's background poller may block in rc_wait while holding the gate: a submitter that finds
/// the gate taken wakes it with rc_wake (the one thread-safe session call).
/// </summary>
internal sealed unsafe class Lane : IDisposable
{
    private const int PollBatch = 64;
    private static readonly long SpinTicks = Stopwatch.Frequency / 20_000;  // 50 µs
    private static readonly int SpinnersMax = Environment.ProcessorCount;
    private static int s_spinning;  // awaiters of every lane spinning in DriveWhilePending

    // Dispatch runs callers' code (callbacks, inline continuations), which may drive a lane again on
    // the same thread. Each nesting level gets its own buffer, and nesting stops at MaxDepth: deeper
    // code leaves the work to an outer level or the poller instead of growing the stack. A submission at
    // MaxDepth that finds the session full still harvests (or every thread there could wait on a session that
    // nobody polls), but parks what it harvested for an outer level or the poller (see Park).
    private const int MaxDepth = 4;
    [ThreadStatic] private static int t_depth;
    [ThreadStatic] private static Finished[][]? t_buffers;
    [ThreadStatic] private static int t_chained;  // submissions this thread made from completions

    /// <summary>Whether the calling thread is running completions right now.</summary>
    public static bool InDispatch => t_depth > 0;

    private int _busy;  // 1 while a thread is inside the native session
    private readonly SessionHandle _handle;
    private readonly IntPtr _session;
    private readonly Operation[] _ops;
    private readonly int[] _next;   // free-list and return-stack links, by operation index (-1 ends)
    private int _free = -1;         // first free operation, under the gate
    private int _returned = -1;     // first operation handed back from outside the gate (lock-free stack)
    private volatile bool _pollerWaiting;
    private bool _closed;
    private readonly ConcurrentQueue<Finished> _parked = new();
    private int _parkedCount;

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
            ReturnLocked(_ops[i]);
        }
    }

    public RemoteCacheClient Owner { get; }

    /// <summary>
    /// Operations submitted and not yet finished: in the native session, or harvested and parked for dispatch
    /// (read racily by the poller).
    /// </summary>
    public int Outstanding => Volatile.Read(ref _outstanding) + Volatile.Read(ref _parkedCount);
    private int _outstanding;

    /// <summary>
    /// Bumped by callers' own submissions and polls, so the poller can tell a lane its callers drive from one they
    /// left. Submissions made by completions (a callback or continuation issuing the next read) are not callers'
    /// activity: whoever runs the completion may be gone right after (FASTER blocks for its queue), so they hand the
    /// lane to the poller instead (<see cref="TakeHandoff"/>).
    /// </summary>
    public int Activity;

    /// <summary>
    /// Bumped by callers' own polls (racily: only its changes count): callers that poll harvest their own completions,
    /// so the poller may leave them their lane; callers that only submit may block for their callbacks (Tsavorite).
    /// </summary>
    public int Polls;

    private volatile bool _handoff;

    /// <summary>Whether work was left to the poller (and not taken yet).</summary>
    public bool HasHandoff => _handoff;

    /// <summary>Whether work was left to the poller since the last call (and clears it).</summary>
    public bool TakeHandoff()
    {
        if (!_handoff)
            return false;
        _handoff = false;
        return true;
    }

    private void MarkHandoff()
    {
        if (!_handoff && !RemoteCacheClient.IsPollerOf(Owner))  // the poller polls again anyway
            _handoff = true;
    }

    // Marks and wakes the poller if it sleeps: for a thread about to leave work behind (it may block right after).
    private void HandOff()
    {
        if (RemoteCacheClient.IsPollerOf(Owner))
            return;
        if (!_handoff)
            _handoff = true;
        Owner.NotifyHandoff();
    }

    // ---- operation pool ------------------------------------------------------------------------------
    // Operations are rented and (on the callback path) returned under the gate with plain stores. Only a
    // ValueTask's consumer hands its operation back from an arbitrary thread: it pushes onto a lock-free
    // return stack that the gate holder takes whole when its own list runs dry (push + take-all has no ABA).

    private Operation? RentLocked()
    {
        if (_free < 0)
            _free = Interlocked.Exchange(ref _returned, -1);
        int index = _free;
        if (index < 0)
            return null;
        _free = _next[index];
        return _ops[index];
    }

    private void ReturnLocked(Operation op)
    {
        _next[op.Index] = _free;
        _free = op.Index;
    }

    /// <summary>Gives an operation back from any thread (a consumed ValueTask).</summary>
    public void Return(Operation op)
    {
        for (;;)
        {
            int head = Volatile.Read(ref _returned);
            _next[op.Index] = head;
            if (Interlocked.CompareExchange(ref _returned, op.Index, head) == head)
                return;
        }
    }

    // ---- submission -------------------------------------------------------------------------------

    /// <summary>
    /// Rents an operation, fills it in and hands it to the native session; while the session or the pool
    /// is full it harvests completions and retries. On success <paramref name="op"/> is in flight.
    /// </summary>
    public RemoteCacheStatus Submit(bool write, long address, long length, void* buffer, IoCallback? callback, object? context,
                                    MemoryHandle pin, bool cancellable, out Operation? op)
    {
        for (;;)
        {
            Enter();
            if (_closed)
            {
                Exit();
                op = null;
                return RemoteCacheStatus.Closed;
            }
            op = RentLocked();
            if (op is not null)
            {
                long started = (++_sampleTick & (ClientMetrics.DurationSampling - 1)) == 0 && Owner.Metrics.MeasuresDuration
                    ? Stopwatch.GetTimestamp() : 0;
                var status = write
                    ? NativeMethods.Write(_session, (ulong)address, buffer, (ulong)length, (ulong)op.Index)
                    : NativeMethods.Read(_session, (ulong)address, buffer, (ulong)length, (ulong)op.Index);
                if (status != RemoteCacheStatus.Busy)
                {
                    bool fromCompletion = t_depth > 0;
                    if (!fromCompletion)
                        Activity++;
                    if (status == RemoteCacheStatus.Ok)
                    {
                        op.Start(write, address, length, callback, context, pin, started, cancellable);
                        if (_outstanding++ == 0)
                            Owner.NotifyOutstanding();
                    }
                    else
                    {
                        ReturnLocked(op);
                        op = null;
                    }
                    Exit();
                    if (fromCompletion && status == RemoteCacheStatus.Ok)
                    {
                        // Whoever runs the completion signals when it leaves (Drive), or finishes the chain itself.
                        t_chained++;
                        MarkHandoff();
                    }
                    return status;
                }
                ReturnLocked(op);
            }
            // Full (session or pool): harvest what has finished (dispatched outside the gate), then retry.
            int chained = t_chained;
            bool park = t_depth >= MaxDepth;
            int n = PollLocked(0, out var finished, park);
            Exit();
            if (park)
                Park(finished, n);
            else
                Dispatch(finished, n);
            if (t_chained != chained)
                HandOff();
            if (n == 0)
                Thread.Yield();
        }
    }

    private bool TryEnter() => Interlocked.CompareExchange(ref _busy, 1, 0) == 0;

    private void Exit() => Volatile.Write(ref _busy, 0);

    // The poller holds the gate while it blocks in rc_wait; rc_wake makes it return (and let go).
    private void WakeBlockedPoller()
    {
        if (_pollerWaiting)
            NativeMethods.Wake(_session);
    }

    private void Enter()
    {
        if (TryEnter())
            return;
        var spin = new SpinWait();
        while (!TryEnter())
        {
            WakeBlockedPoller();
            spin.SpinOnce(sleep1Threshold: -1);
        }
    }

    // ---- progress ---------------------------------------------------------------------------------

    /// <summary>
    /// Polls if nobody else is in the session, again as long as the completions it ran submitted more; returns the
    /// operations it completed. A caller's poll counts as activity (the poller leaves the lane to it); the poller's
    /// own does not.
    /// </summary>
    public int Drive(bool byPoller = false)
    {
        if (t_depth >= MaxDepth)
            return 0;
        int chainedAtEntry = t_chained;
        if (!byPoller)
            Polls++;
        int total = DispatchParked();
        if (TryEnter())
        {
            if (!byPoller)
                Activity++;
            for (;;)
            {
                int chained = t_chained;
                int n = PollLocked(0, out var finished);
                Exit();
                Dispatch(finished, n);
                total += n;
                // Completions that submitted again (a chain of dependent reads) are polled for at once: a one-sided
                // read is done by the next poll. What is still in flight then goes to the poller, since this thread
                // may not come back (FASTER blocks for its queue).
                if (n == 0 || t_chained == chained || !TryEnter())
                    break;
            }
        }
        else if (!byPoller)
        {
            // The poller may be blocked in rc_wait with the gate: a caller that wants its lane takes it back.
            WakeBlockedPoller();
        }
        if (!byPoller && t_chained != chainedAtEntry && Outstanding > 0)
            HandOff();
        return total;
    }

    /// <summary>The poller's blocking form: waits in rc_wait up to <paramref name="timeoutMs"/>.</summary>
    public int DriveBlocking(int timeoutMs)
    {
        if (DispatchParked() is > 0 and var parked)
            return parked;
        Enter();
        _pollerWaiting = true;
        int n = PollLocked(timeoutMs, out var finished);
        _pollerWaiting = false;
        Exit();
        Dispatch(finished, n);
        return n;
    }

    /// <summary>
    /// Drives the lane for up to about 50 µs or until <paramref name="op"/> has finished; if it has not, the lane is
    /// handed to the poller at once (the caller is about to suspend).
    /// </summary>
    public void DriveWhilePending(Operation op, short token)
    {
        // More waiters spinning than cores would keep the completions' harvester (and a local server) off the cores:
        // the extra ones suspend at once and their continuations come from whoever polls.
        if (Interlocked.Increment(ref s_spinning) > SpinnersMax)
        {
            Interlocked.Decrement(ref s_spinning);
            HandOff();
            return;
        }
        try
        {
            // Each Drive counts as activity, which keeps the poller off the lane meanwhile.
            long start = Stopwatch.GetTimestamp();
            var spin = new SpinWait();
            while (op.IsPending(token))
            {
                if (Drive() == 0)
                {
                    if (Stopwatch.GetTimestamp() - start > SpinTicks)
                    {
                        HandOff();
                        return;
                    }
                    spin.SpinOnce(sleep1Threshold: -1);
                }
            }
        }
        finally
        {
            Interlocked.Decrement(ref s_spinning);
        }
    }

    private int PollLocked(int waitMs, out Finished[] finished, bool park = false)
    {
        var buffers = t_buffers ??= new Finished[MaxDepth + 1][];
        finished = buffers[t_depth] ??= new Finished[PollBatch];
        if (_closed)
            return 0;
        RemoteCacheCompletion* completions = stackalloc RemoteCacheCompletion[PollBatch];
        int n = waitMs > 0
            ? NativeMethods.Wait(_session, completions, PollBatch, waitMs)
            : NativeMethods.Poll(_session, completions, PollBatch);
        if (n <= 0)
            return 0;
        if (park)
            Interlocked.Add(ref _parkedCount, n);  // first, so Outstanding never dips to zero with work still to run
        _outstanding -= n;
        for (int i = 0; i < n; i++)
        {
            var op = _ops[(int)completions[i].Tag];
            var status = completions[i].Status;
            Count(op.IsWrite, op.Length, status);
            if (op.Callback is { } callback)
            {
                // Back to the pool now, so the callback can submit again without finding it empty.
                finished[i] = new Finished(null, status, callback, op.Context, op.IsWrite, op.Length, op.Started);
                op.Callback = null;
                op.Context = null;
                ReturnLocked(op);
            }
            else
            {
                finished[i] = new Finished(op, status, null, null, op.IsWrite, op.Length, op.Started);
            }
        }
        return n;
    }

    private void Dispatch(Finished[] finished, int n)
    {
        if (n == 0)
            return;
        t_depth++;
        try
        {
            for (int i = 0; i < n; i++)
            {
                var f = finished[i];
                finished[i] = default;
                Complete(f);
            }
        }
        finally
        {
            t_depth--;
        }
    }

    private void Complete(in Finished f)
    {
        var metrics = Owner.Metrics;
        if (f.Started != 0)
            metrics.Timed(f.IsWrite, f.Started);
        if (f.Status != RemoteCacheStatus.Ok)
        {
            metrics.Failed(f.IsWrite, f.Status);
            Owner.OperationFailed(f.Status);
        }
        if (f.Callback is not null)
            f.Callback(f.Status, f.Context);
        else
            f.Op!.Complete(f.Status);
    }

    // Completions harvested at MaxDepth (counted in _parkedCount by PollLocked) wait here for a shallower Drive: the
    // thread's own once it unwinds, or the poller's, which the hand-off wakes.
    private void Park(Finished[] finished, int n)
    {
        if (n == 0)
            return;
        for (int i = 0; i < n; i++)
        {
            _parked.Enqueue(finished[i]);
            finished[i] = default;
        }
        HandOff();
    }

    // Runs parked completions, from a depth that may run callers' code; returns how many.
    private int DispatchParked()
    {
        if (Volatile.Read(ref _parkedCount) == 0 || t_depth >= MaxDepth)
            return 0;
        int n = 0;
        t_depth++;
        try
        {
            while (_parked.TryDequeue(out var f))
            {
                Interlocked.Decrement(ref _parkedCount);
                n++;
                Complete(f);
            }
        }
        finally
        {
            t_depth--;
        }
        return n;
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
        Enter();
        bool wasClosed = _closed;
        _closed = true;
        Exit();
        if (wasClosed)
            return;
        _handle.DangerousRelease();
        _handle.Dispose();  // rc_session_close: waits for anything still in flight
    }

    // ---- totals (the metrics' operation and byte counters) ---------------------------------------------
    // Written under the gate with plain stores; a metrics reader sums them racily (64-bit reads do not tear here).

    private long _readOps, _writeOps, _readBytes, _writeBytes;
    private int _sampleTick;  // submissions, for timing one in ClientMetrics.DurationSampling

    private void Count(bool write, long length, RemoteCacheStatus status)
    {
        long bytes = status == RemoteCacheStatus.Ok ? length : 0;
        if (write)
        {
            _writeOps++;
            _writeBytes += bytes;
        }
        else
        {
            _readOps++;
            _readBytes += bytes;
        }
    }

    /// <summary>This lane's totals so far.</summary>
    public OperationTotals Totals => new(Volatile.Read(ref _readOps), Volatile.Read(ref _writeOps),
                                         Volatile.Read(ref _readBytes), Volatile.Read(ref _writeBytes));

    /// <summary>A harvested completion: a callback to run, or a ValueTask operation to complete, and what metrics record of it.</summary>
    private readonly record struct Finished(Operation? Op, RemoteCacheStatus Status, IoCallback? Callback, object? Context,
                                            bool IsWrite, long Length, long Started);
}

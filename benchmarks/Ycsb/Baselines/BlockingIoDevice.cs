using System;
using System.Collections.Generic;
using System.Threading;
using FASTER.core;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// A FASTER device whose I/O are blocking calls (pread on an O_DIRECT file, an SMB client's read) run by a fixed
/// set of worker threads, so a device keeps up to <see cref="Workers"/> requests in flight, the way FASTER's own
/// Linux device does through the thread pool. Each worker may keep its own handles (an SMB connection each).
/// </summary>
public abstract class BlockingIoDevice : StorageDeviceBase
{
    private readonly Queue<Request> _queue = new();
    private readonly SemaphoreSlim _ready = new(0);
    private readonly Thread[] _threads;
    private int _inFlight;
    private volatile bool _stopping;

    protected BlockingIoDevice(string name, int workers, uint sectorSize = 512)
        : base(name, sectorSize, Devices.CAPACITY_UNSPECIFIED)
    {
        Workers = workers;
        ThrottleLimit = workers == 0 ? int.MaxValue : 4 * workers;  // inline requests are never waiting
        _threads = new Thread[workers];
        for (int i = 0; i < workers; i++)
        {
            int worker = i;
            _threads[i] = new Thread(() => Work(worker)) { IsBackground = true, Name = $"{name} I/O {i}" };
        }
    }

    /// <summary>Worker threads (requests in flight at most); 0: each request runs and completes inside the call.</summary>
    public int Workers { get; }

    /// <summary>Starts the workers; derived constructors call it once their state is ready.</summary>
    protected void StartWorkers()
    {
        foreach (var t in _threads)
            t.Start();
    }

    /// <summary>Reads on worker <paramref name="worker"/>; returns bytes read, or throws.</summary>
    protected abstract uint Read(int worker, int segment, ulong offset, IntPtr destination, uint length);

    /// <summary>Writes on worker <paramref name="worker"/>; returns bytes written, or throws.</summary>
    protected abstract uint Write(int worker, int segment, ulong offset, IntPtr source, uint length);

    /// <summary>Releases a worker's handles (on its own thread, at shutdown).</summary>
    protected virtual void CloseWorker(int worker)
    {
    }

    /// <inheritdoc/>
    public override bool Throttle() => Volatile.Read(ref _inFlight) > ThrottleLimit;

    /// <inheritdoc/>
    public override void ReadAsync(int segmentId, ulong sourceAddress, IntPtr destinationAddress, uint readLength,
                                   DeviceIOCompletionCallback callback, object context) =>
        Enqueue(new Request(false, segmentId, sourceAddress, destinationAddress, readLength, callback, context));

    /// <inheritdoc/>
    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite,
                                    DeviceIOCompletionCallback callback, object context) =>
        Enqueue(new Request(true, segmentId, destinationAddress, sourceAddress, numBytesToWrite, callback, context));

    /// <inheritdoc/>
    public override void RemoveSegmentAsync(int segment, AsyncCallback callback, IAsyncResult result) => callback(result);

    // With no workers a request runs inside the call, on the caller's thread, and completes there.
    private void Enqueue(Request request)
    {
        Interlocked.Increment(ref _inFlight);
        if (_threads.Length == 0)
        {
            Execute(0, request);
            return;
        }
        lock (_queue)
            _queue.Enqueue(request);
        _ready.Release();
    }

    private void Work(int worker)
    {
        try
        {
            while (true)
            {
                _ready.Wait();
                Request r;
                lock (_queue)
                {
                    if (_stopping && _queue.Count == 0)
                        return;
                    r = _queue.Dequeue();
                }
                Execute(worker, r);
            }
        }
        finally
        {
            CloseWorker(worker);
        }
    }

    private void Execute(int worker, in Request r)
    {
        uint error = 0, bytes = 0;
        try
        {
            bytes = r.Write ? Write(worker, r.Segment, r.Offset, r.Buffer, r.Length)
                            : Read(worker, r.Segment, r.Offset, r.Buffer, r.Length);
        }
        catch (Exception e)
        {
            error = e is System.IO.IOException io && io.HResult != 0 ? (uint)io.HResult : 1;
            Console.Error.WriteLine($"{FileName}: {(r.Write ? "write" : "read")} of segment {r.Segment} at {r.Offset} failed: {e.Message}");
        }
        Interlocked.Decrement(ref _inFlight);
        r.Callback(error, bytes, r.Context);
    }

    /// <inheritdoc/>
    public override void Dispose()
    {
        if (_stopping)
            return;
        _stopping = true;
        if (_threads.Length > 0)
            _ready.Release(_threads.Length);
        foreach (var t in _threads)
            if (t.IsAlive)
                t.Join();
        DisposeStorage();
    }

    /// <summary>Closes what the device keeps open besides the workers' handles.</summary>
    protected virtual void DisposeStorage()
    {
    }

    private readonly record struct Request(bool Write, int Segment, ulong Offset, IntPtr Buffer, uint Length,
                                           DeviceIOCompletionCallback Callback, object Context);
}

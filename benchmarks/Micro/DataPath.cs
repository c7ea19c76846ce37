using System;
using System.Diagnostics;
using System.IO;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using BenchmarkDotNet.Attributes;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// The managed data path against an embedded <see cref="RemoteCacheServer"/>, in the configuration of
/// the native <c>remotecache-bench --batch 64 --qdepth 4 --client-threads 0 --server-threads 1 --window 256</c>:
/// every invocation issues <see cref="Window"/> operations at random <see cref="Size"/>-aligned addresses of a
/// 256 MiB cache, then waits for all of them. One benchmark thread, one lane.
/// </summary>
/// <remarks>
/// ValueTask path: <see cref="RemoteCacheClient.ReadAsync"/>/<see cref="RemoteCacheClient.WriteAsync"/> into
/// slices of a pre-pinned array (so <c>Memory.Pin</c> takes no GC handle), all submitted, then awaited in order.
/// Low-level path: <see cref="RemoteCacheClient.StartRead"/>/<see cref="RemoteCacheClient.StartWrite"/> into native memory
/// with one static cached <see cref="IoCallback"/> counting completions, polled with <see cref="RemoteCacheClient.Poll"/>;
/// it and the session path keep the window full for <see cref="Stream"/> operations per invocation (a continuous
/// window, as remotecache-bench keeps), where the ValueTask benchmarks submit a window and await it.
/// </remarks>
public class DataPath
{
    /// <summary>Operations outstanding at most (remotecache-bench's --window).</summary>
    public const int Window = 256;

    /// <summary>Operations per invocation of the callback and session benchmarks, which keep the window full.</summary>
    public const int Stream = 16 * Window;

    /// <summary>c=0 s=1 b=64 q=4: the application thread does the client work; one server thread.</summary>
    public const int ClientThreads = 0, ServerThreads = 1, BatchSize = 64, QueueDepth = 4;

    /// <summary>The data-path configuration of the cache: (c, s, b, q) = (0, 1, 64, 4).</summary>
    public static readonly CacheConfig Config = new(ClientThreads, ServerThreads, BatchSize, QueueDepth);

    /// <summary>Bytes per region lent by the server (as remotecache-bench's server: --region-size 64M).</summary>
    public const long RegionSize = 64L << 20;

    /// <summary>Regions of the cache: 4 x 64 MiB = 256 MiB (remotecache-bench's default --cache-bytes).</summary>
    public const int RegionsPerServer = 4;

    /// <summary>The benchmark waits this long for an invocation's completions before it declares a hang.</summary>
    private static readonly long HangTicks = Stopwatch.Frequency * 30;

    [Params("shm", "tcp")]
    public string Transport { get; set; } = "shm";

    [Params(8, 4096)]
    public virtual int Size { get; set; } = 8;

    private RemoteCacheServer? _server;
    private RemoteCacheClient? _client;
    private RemoteCacheSession? _session;
    private string? _socketPath;
    private byte[] _pinned = Array.Empty<byte>();
    private Memory<byte>[] _slices = Array.Empty<Memory<byte>>();
    private ValueTask[] _pending = Array.Empty<ValueTask>();
    private IntPtr _native;
    private long _slots;
    private ulong _rng = 0x9E3779B97F4A7C15ul;

    // The low-level path's completion counter: one static delegate, no per-operation state.
    private static readonly IoCallback s_onDone = OnDone;
    private static long s_completed;
    private static int s_failed;
    private static int s_firstFailure;

    private static void OnDone(RemoteCacheStatus status, object? context)
    {
        if (status != RemoteCacheStatus.Ok && Interlocked.Increment(ref s_failed) == 1)
            Volatile.Write(ref s_firstFailure, (int)status);
        Interlocked.Increment(ref s_completed);
    }

    /// <summary>Changes the options the cache is opened with (a subclass's variant of the data path).</summary>
    protected virtual void Configure(RemoteCacheOptions options)
    {
    }

    /// <summary>Prepares the opened cache for the reads (a subclass's cache may need its content written first).</summary>
    protected virtual void Prepare(RemoteCacheClient client)
    {
    }

    [GlobalSetup]
    public void Setup()
    {
        string listen;
        if (Transport == "shm")
        {
            _socketPath = $"/tmp/rc-micro-{Environment.ProcessId}.sock";
            File.Delete(_socketPath);  // left by an earlier case of this process, or a crashed run with our pid
            listen = "shm:" + _socketPath;
        }
        else if (Transport == "tcp")
        {
            listen = "tcp:127.0.0.1:0";
        }
        else
        {
            throw new ArgumentException($"unknown transport '{Transport}'");
        }
        _server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { listen }, RegionSize = RegionSize, MemoryLimit = 2L << 30, MaxThreads = (int)Math.Max(1, ServerThreads) });
        var options = new RemoteCacheOptions
        {
            Token = "micro",
            RegionsPerServer = RegionsPerServer,
            Config = Config,
            Lanes = 1,
            Name = $"micro {Transport} {Size}",
        };
        Configure(options);
        _client = RemoteCacheClient.Open(_server.Endpoints, options);
        long servers = RegionSize * RegionsPerServer;
        if (options.ServerBytesFor(_client.Capacity) > servers || options.ServerBytesFor(_client.Capacity + Size) <= servers)
            throw new InvalidOperationException($"cache capacity {_client.Capacity}: not what {servers} bytes of regions hold");
        Prepare(_client);
        _slots = _client.Capacity / Size;
        _session = _client.OpenSession();

        _pinned = GC.AllocateArray<byte>(Window * Size, pinned: true);
        _pinned.AsSpan().Fill(0x5a);
        _slices = new Memory<byte>[Window];
        for (int i = 0; i < Window; i++)
            _slices[i] = MemoryMarshal.CreateFromPinnedArray(_pinned, i * Size, Size);
        _pending = new ValueTask[Window];
        unsafe
        {
            _native = (IntPtr)NativeMemory.AlignedAlloc((nuint)(Window * Size), 64);
            new Span<byte>((void*)_native, Window * Size).Fill(0x5a);
        }
        _rng = 0x9E3779B97F4A7C15ul ^ (ulong)Size ^ ((ulong)Transport.Length << 32);
        s_completed = 0;
        s_failed = 0;
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _session?.Dispose();
        _session = null;
        _client?.Dispose();
        _client = null;
        _server?.Dispose();
        _server = null;
        unsafe
        {
            if (_native != IntPtr.Zero)
                NativeMemory.AlignedFree((void*)_native);
        }
        _native = IntPtr.Zero;
        if (_socketPath is not null)
            File.Delete(_socketPath);
    }

    // xorshift64*, as remotecache-bench: a few cycles per address.
    private long NextAddress()
    {
        ulong s = _rng;
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        _rng = s;
        return (long)((s * 0x2545F4914F6CDD1Dul) % (ulong)_slots) * Size;
    }

    // ---- ValueTask API ------------------------------------------------------------------------------

    [Benchmark(OperationsPerInvoke = Window)]
    [BenchmarkCategory("ValueTask")]
    public ValueTask ReadAsync() => AwaitAll(SubmitWindow(write: false));

    [Benchmark(OperationsPerInvoke = Window)]
    [BenchmarkCategory("ValueTask")]
    public ValueTask WriteAsync() => AwaitAll(SubmitWindow(write: true));

    // The same ValueTask operations, consumed without a continuation: spin on IsCompleted (which moves the data
    // on this thread, as an await's first check does), then GetResult. Measures the ValueTask machinery when no
    // continuation runs on the client's poller (an await that suspends is resumed there).
    [Benchmark(OperationsPerInvoke = Window)]
    [BenchmarkCategory("ValueTaskSpin")]
    public void ReadAsyncSpinWait() => SpinWaitAll(SubmitWindow(write: false));

    [Benchmark(OperationsPerInvoke = Window)]
    [BenchmarkCategory("ValueTaskSpin")]
    public void WriteAsyncSpinWait() => SpinWaitAll(SubmitWindow(write: true));

    // Submits a window of ValueTask operations into _pending (one slice of the pinned array each).
    private ValueTask[] SubmitWindow(bool write)
    {
        var client = _client!;
        var pending = _pending;
        var slices = _slices;
        for (int i = 0; i < pending.Length; i++)
            pending[i] = write ? client.WriteAsync(NextAddress(), slices[i]) : client.ReadAsync(NextAddress(), slices[i]);
        return pending;
    }

    private static async ValueTask AwaitAll(ValueTask[] pending)
    {
        for (int i = 0; i < pending.Length; i++)
            await pending[i];
    }

    private static void SpinWaitAll(ValueTask[] pending)
    {
        for (int i = 0; i < pending.Length; i++)
            SpinWaitFor(pending[i]);
    }

    private static void SpinWaitFor(ValueTask task)
    {
        while (!task.IsCompleted)
        {
        }
        task.GetAwaiter().GetResult();
    }

    // ---- low-level callback API ---------------------------------------------------------------------

    [Benchmark(OperationsPerInvoke = Stream)]
    [BenchmarkCategory("Callback")]
    public void ReadCallback() => RunCallbacks(write: false);

    [Benchmark(OperationsPerInvoke = Stream)]
    [BenchmarkCategory("Callback")]
    public void WriteCallback() => RunCallbacks(write: true);

    // A continuous window, as remotecache-bench keeps one: submit whenever fewer than Window are outstanding.
    private void RunCallbacks(bool write)
    {
        var client = _client!;
        Volatile.Write(ref s_completed, 0);
        long start = 0;
        uint idle = 0;
        int issued = 0;
        while (Volatile.Read(ref s_completed) < Stream)
        {
            int completed = (int)Volatile.Read(ref s_completed);
            while (issued < Stream && issued - completed < Window)
            {
                var buffer = _native + (issued % Window) * Size;
                if (write)
                    client.StartWrite(NextAddress(), buffer, Size, s_onDone, null);
                else
                    client.StartRead(NextAddress(), buffer, Size, s_onDone, null);
                issued++;
            }
            if (client.Poll() != 0)
            {
                idle = 0;
                continue;
            }
            // As remotecache-bench (which falls back to rc_wait after 4096 empty polls), give the core away now
            // and then: on 2 cores the client's poller or the server thread may be waiting for it.
            if ((++idle & 0xfff) == 0)
                Thread.Yield();
            if ((idle & 0xffff) == 0)
            {
                long now = Stopwatch.GetTimestamp();
                if (start == 0)
                    start = now;
                else if (now - start > HangTicks)
                    throw new TimeoutException($"{Volatile.Read(ref s_completed)} of {Stream} callbacks after 30 s; {client.Outstanding} outstanding");
            }
        }
        if (Volatile.Read(ref s_failed) != 0)
            throw new InvalidOperationException($"{s_failed} operations failed; first status {(RemoteCacheStatus)s_firstFailure}");
    }

    // ---- RemoteCacheSession: one native session on this thread, one blittable call per operation ----------------

    [Benchmark(OperationsPerInvoke = Stream)]
    [BenchmarkCategory("Session")]
    public void ReadSession() => RunSession(write: false);

    [Benchmark(OperationsPerInvoke = Stream)]
    [BenchmarkCategory("Session")]
    public void WriteSession() => RunSession(write: true);

    private unsafe void RunSession(bool write)
    {
        var session = _session!;
        Span<RemoteCacheCompletion> done = stackalloc RemoteCacheCompletion[64];
        long start = 0;
        int issued = 0;
        for (int finished = 0; finished < Stream;)
        {
            while (issued < Stream && issued - finished < Window)
            {
                int slot = issued % Window;
                var buffer = (void*)(_native + slot * Size);
                var status = write ? session.StartWrite(NextAddress(), buffer, Size, (ulong)slot) : session.StartRead(NextAddress(), buffer, Size, (ulong)slot);
                if (status == RemoteCacheStatus.Busy)
                    break;
                if (status != RemoteCacheStatus.Ok)
                    throw new InvalidOperationException($"session submission failed: {status}");
                issued++;
            }
            int n = session.Poll(done);
            for (int k = 0; k < n; k++)
                if (done[k].Status != 0)
                    throw new InvalidOperationException($"session operation failed: {(RemoteCacheStatus)done[k].Status}");
            finished += n;
            if (n != 0)
            {
                start = 0;
                continue;
            }
            long now = Stopwatch.GetTimestamp();
            if (start == 0)
                start = now;
            else if (now - start > HangTicks)
                throw new TimeoutException("no session completion for 30 s");
        }
    }
}

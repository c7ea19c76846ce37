using System;
using System.Diagnostics;
using System.IO;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using BenchmarkDotNet.Attributes;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// Dependent reads, as FASTER follows a hash chain: each read is issued by the completion of the previous one, so
/// the time per hop is the latency of handing a completion to whoever submits the next read. Reported per hop
/// (<see cref="Hops"/> per chain and invocation), against <see cref="LoneRead"/>, one read at a time polled by its
/// own thread (the baseline of the Ratio column). Target: every hop ≤ 2× it while chains ≤ cores; with more chains
/// than cores a chain also waits for a core, and the target is the same rate in aggregate, hop ≤ 2× lone × chains / cores.
/// </summary>
/// <remarks>
/// <para><see cref="Threads"/> threads each run a chain of <see cref="Size"/>-byte reads at random addresses of a
/// 64 MiB cache on an embedded server (one server thread), through the client's callback API, in three ways:</para>
/// <list type="bullet">
/// <item><see cref="HopOnPoller"/>: the thread starts its chain and blocks (FASTER's CompletePending(wait: true)
/// waiting for its queue): every completion runs on the client's poller, which issues the next read;</item>
/// <item><see cref="HopOnPollingThread"/>: the thread polls (FASTER's TryComplete), yielding when nothing came, until its
/// chain is done;</item>
/// <item><see cref="HopAwaited"/>: an async loop awaiting <see cref="RemoteCacheClient.ReadAsync"/>, blocked on
/// from the thread (the continuation runs wherever the completion is harvested).</item>
/// </list>
/// </remarks>
public class DependentReads
{
    /// <summary>Reads per chain and invocation.</summary>
    public const int Hops = 2048;  // the start and end of a chain (two thread wake-ups) amortized to < 0.1 µs a hop

    private const long RegionSize = 64L << 20;
    private static readonly long HangTicks = Stopwatch.Frequency * 30;

    [Params("shm", "tcp")]
    public string Transport { get; set; } = "shm";

    /// <summary>The presets: <see cref="CacheConfig.OneSided"/> (the FASTER device's default) and <see cref="CacheConfig.HighThroughput"/>.</summary>
    [Params("OneSided", "HighThroughput")]
    public string Config { get; set; } = "OneSided";

    [Params(1, 8)]
    public int Threads { get; set; } = 1;

    public const int Size = 512;

    private RemoteCacheServer? _server;
    private RemoteCacheClient? _client;
    private string? _socketPath;
    private Chain[] _chains = Array.Empty<Chain>();
    private Thread[] _workers = Array.Empty<Thread>();
    private SemaphoreSlim[] _start = Array.Empty<SemaphoreSlim>();
    private CountdownEvent? _finished;
    private volatile int _mode;  // what the workers run next: 0 poller, 1 polling thread, 2 awaited, -1 stop
    private Chain? _lone;

    [GlobalSetup]
    public void Setup()
    {
        _socketPath = Path.Combine(Path.GetTempPath(), $"rc-dependent-{Environment.ProcessId}.sock");
        string listen = Transport == "shm" ? "shm:" + _socketPath : "tcp:127.0.0.1:0";
        _server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { listen }, RegionSize = RegionSize, MemoryLimit = 2 * RegionSize, MaxThreads = 1 });
        _client = RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions
        {
            Name = $"dependent reads {Transport} {Config}",
            Config = Config == "OneSided" ? CacheConfig.OneSided : CacheConfig.HighThroughput,
        });
        _lone = new Chain(_client, seed: 1);
        _chains = new Chain[Threads];
        _start = new SemaphoreSlim[Threads];
        _workers = new Thread[Threads];
        _finished = new CountdownEvent(Threads);
        for (int i = 0; i < Threads; i++)
        {
            _chains[i] = new Chain(_client, seed: (ulong)i + 2);
            _start[i] = new SemaphoreSlim(0);
            int index = i;
            _workers[i] = new Thread(() => Work(index)) { IsBackground = true, Name = $"chain {i}" };
            _workers[i].Start();
        }
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _mode = -1;
        foreach (var start in _start)
            start.Release();
        foreach (var worker in _workers)
            worker.Join();
        foreach (var chain in _chains)
            chain.Dispose();
        _lone?.Dispose();
        _client?.Dispose();
        _server?.Dispose();
        if (_socketPath is not null)
            File.Delete(_socketPath);
    }

    [Benchmark(Baseline = true, OperationsPerInvoke = Hops)]
    public void LoneRead()
    {
        var chain = _lone!;
        var client = _client!;
        for (int i = 0; i < Hops; i++)
        {
            chain.Begin(1);
            long start = Stopwatch.GetTimestamp();
            while (!chain.IsDone)
            {
                if (client.Poll() == 0 && Stopwatch.GetTimestamp() - start > HangTicks)
                    throw new TimeoutException("a lone read did not complete within 30 s");
            }
        }
        chain.ThrowIfFailed();
    }

    [Benchmark(OperationsPerInvoke = Hops)]
    public void HopOnPoller() => RunChains(0);

    [Benchmark(OperationsPerInvoke = Hops)]
    public void HopOnPollingThread() => RunChains(1);

    [Benchmark(OperationsPerInvoke = Hops)]
    public void HopAwaited() => RunChains(2);

    private void RunChains(int mode)
    {
        _mode = mode;
        _finished!.Reset();
        foreach (var start in _start)
            start.Release();
        if (!_finished.Wait(TimeSpan.FromSeconds(30)))
            throw new TimeoutException($"{_finished.CurrentCount} of {Threads} chains unfinished after 30 s");
        foreach (var chain in _chains)
            chain.ThrowIfFailed();
    }

    private void Work(int index)
    {
        var chain = _chains[index];
        var client = _client!;
        for (;;)
        {
            _start[index].Wait();
            int mode = _mode;
            if (mode < 0)
                return;
            switch (mode)
            {
                case 0:
                    chain.Begin(Hops);
                    chain.WaitDone();
                    break;
                case 1:
                    chain.Begin(Hops);
                    while (!chain.IsDone)
                    {
                        if (client.Poll() == 0)
                            Thread.Yield();  // as FASTER's CompletePending loop does between its polls
                    }
                    break;
                default:
                    chain.AwaitHops(Hops).GetAwaiter().GetResult();
                    break;
            }
            _finished!.Signal();
        }
    }

    /// <summary>One chain of dependent reads into its own buffer.</summary>
    private sealed class Chain : IDisposable
    {
        private static readonly IoCallback s_onRead = OnRead;
        private readonly RemoteCacheClient _client;
        private readonly IntPtr _buffer = AllocateAligned(Size);
        private readonly byte[] _managed = GC.AllocateArray<byte>(Size, pinned: true);  // no pin handle per ReadAsync
        private readonly ManualResetEventSlim _done = new();
        private readonly long _slots;
        private ulong _rng;
        private int _remaining;
        private int _failed;
        private volatile bool _isDone;

        public Chain(RemoteCacheClient client, ulong seed)
        {
            _client = client;
            _slots = client.Capacity / Size;
            _rng = 0x9E3779B97F4A7C15ul * seed;
        }

        public bool IsDone => _isDone;

        public void Begin(int hops)
        {
            _remaining = hops;
            _isDone = false;
            _done.Reset();
            Issue();
        }

        public void WaitDone()
        {
            if (!_done.Wait(TimeSpan.FromSeconds(30)))
                throw new TimeoutException($"a chain has {_remaining} hops left after 30 s");
        }

        public async Task AwaitHops(int hops)
        {
            for (int i = 0; i < hops; i++)
                await _client.ReadAsync(NextAddress(), _managed);
        }

        public void ThrowIfFailed()
        {
            if (_failed != 0)
                throw new InvalidOperationException($"{_failed} reads failed");
        }

        private void Issue() => _client.StartRead(NextAddress(), _buffer, Size, s_onRead, this);

        private long NextAddress()
        {
            ulong s = _rng;
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            _rng = s;
            return (long)((s * 0x2545F4914F6CDD1Dul) % (ulong)_slots) * Size;
        }

        private static void OnRead(RemoteCacheStatus status, object? context)
        {
            var chain = (Chain)context!;
            if (status != RemoteCacheStatus.Ok)
                chain._failed++;
            if (--chain._remaining > 0)
            {
                chain.Issue();  // from inside the completion, as FASTER issues the next read of a chain
                return;
            }
            chain._isDone = true;
            chain._done.Set();
        }

        private static unsafe IntPtr AllocateAligned(int bytes) => (IntPtr)NativeMemory.AlignedAlloc((nuint)bytes, 4096);

        public unsafe void Dispose()
        {
            NativeMemory.AlignedFree((void*)_buffer);
            _done.Dispose();
        }
    }
}

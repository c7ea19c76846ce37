using System;
using System.IO;
using System.Linq;
using System.Threading;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Columns;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Reports;
using BenchmarkDotNet.Running;
using FASTER.core;
using RemoteCache.Device;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// The FasterKV workload of the device tests' LongHashChainsWithTheReadCache, timed: sessions on
/// <see cref="Threads"/> threads doing reads, upserts and RMWs over long hash chains (64 buckets, hashes folded
/// onto 100 codes) with FASTER's read cache on, on <see cref="TieredDevice"/>(RemoteCacheDevice over an embedded
/// shm server, FASTER's local-storage device) against FASTER's local-storage device alone, in one run. The
/// "vs local" column is the tiered device's throughput over the local device's at the same thread count.
/// </summary>
/// <remarks>
/// Every iteration starts from the same state (a new store and devices, loaded in [IterationSetup]) and runs
/// <see cref="Operations"/> operations split over the threads, once: hash chains grow with every update, so
/// iterations of different lengths would not be comparable. Results are checked for the right key; a wrong or
/// missing one fails the benchmark.
/// </remarks>
[RunOncePerIteration]
[EvaluateOverhead(false)]
[Config(typeof(RatioConfig))]
public class FasterChains
{
    public const int Operations = 6_000;
    private const int Keys = 4_000;
    private const int Batch = 32;
    private const long Versions = 1_000_000;  // value = key * Versions + version, as in the tests' ValueKind

    [Params("remotecache-shm", "local-storage")]
    public string Device { get; set; } = "remotecache-shm";

    [Params(1, 4, 8)]
    public int Threads { get; set; } = 1;

    private RemoteCacheServer? _server;
    private string? _root;
    private int _iteration;
    private Store? _store;
    private Thread[] _workers = Array.Empty<Thread>();
    private Barrier? _go;
    private Barrier? _done;
    private volatile bool _stopping;
    private long _wrong;
    private string? _firstWrong;

    [GlobalSetup]
    public void Setup()
    {
        _root = Path.Combine(AppContext.BaseDirectory, "chains-bench", $"{Environment.ProcessId}-{Device}-{Threads}");
        Directory.CreateDirectory(_root);
        if (Device == "remotecache-shm")
            _server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = new[] { "shm:" + Path.Combine(_root, "server.sock") }, RegionSize = 1L << 20, MemoryLimit = 256L << 20, MaxThreads = 1 });
        else if (Device != "local-storage")
            throw new ArgumentException($"unknown device '{Device}'");
        _go = new Barrier(Threads + 1);
        _done = new Barrier(Threads + 1);
        _workers = Enumerable.Range(0, Threads).Select(t => new Thread(() => Work(t)) { IsBackground = true, Name = $"chains {t}" }).ToArray();
        foreach (var worker in _workers)
            worker.Start();
    }

    [IterationSetup]
    public void BuildStore() => _store = new Store(this, Path.Combine(_root!, $"iteration-{_iteration++}"));

    [Benchmark(OperationsPerInvoke = Operations)]
    public void MixedOverLongChains()
    {
        _go!.SignalAndWait();
        _done!.SignalAndWait();
        if (Interlocked.Read(ref _wrong) != 0)
            throw new InvalidOperationException($"{_wrong} wrong results on {Device}; first: {_firstWrong}");
    }

    [IterationCleanup]
    public void DropStore()
    {
        _store?.Dispose();
        _store = null;
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _stopping = true;
        _go?.SignalAndWait();
        foreach (var worker in _workers)
            worker.Join();
        _server?.Dispose();
        _server = null;
        if (_root is not null && Directory.Exists(_root))
            Directory.Delete(_root, recursive: true);
    }

    private void Work(int thread)
    {
        var rng = new Random(1000 + thread);
        long increment = 1;
        for (;;)
        {
            _go!.SignalAndWait();
            if (_stopping)
                return;
            var session = _store!.Sessions[thread];
            for (int done = 0; done < Operations / Threads;)
            {
                for (int i = 0; i < Batch && done < Operations / Threads; i++, done++)
                {
                    long key = rng.Next(Keys), output = 0;
                    int dice = rng.Next(100);
                    Status status;
                    if (dice < 60)
                    {
                        status = session.Read(ref key, ref output);
                    }
                    else if (dice < 75)
                    {
                        long value = key * Versions;
                        status = session.Upsert(ref key, ref value);
                        continue;
                    }
                    else
                    {
                        status = session.RMW(ref key, ref increment, ref output);
                    }
                    if (!status.IsPending)
                        Check(key, status, output);
                }
                session.CompletePendingWithOutputs(out var outputs, wait: true);
                using (outputs)
                {
                    while (outputs.Next())
                        Check(outputs.Current.Key, outputs.Current.Status, outputs.Current.Output);
                }
            }
            _done!.SignalAndWait();
        }
    }

    private void Check(long key, Status status, long output)
    {
        if (status.Found && output / Versions == key)
            return;
        if (Interlocked.Increment(ref _wrong) == 1)
            _firstWrong = $"key {key}: status {status}, value {output}";
    }

    /// <summary>One iteration's store: devices, FasterKV loaded with every key, a session per thread.</summary>
    private sealed class Store : IDisposable
    {
        private readonly string _dir;
        private readonly IDevice _device;
        private readonly FasterKV<long, long> _kv;

        public Store(FasterChains bench, string dir)
        {
            _dir = dir;
            Directory.CreateDirectory(dir);
            var ssd = Devices.CreateLogDevice(Path.Combine(dir, "hlog.log"), preallocateFile: false, deleteOnClose: true);
            IDevice device = ssd;
            if (bench._server is { } server)
            {
                var cache = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions
                {
                    RegionsPerServer = 4,  // the whole log, which stays under 1 MiB
                    Name = $"chains bench {bench.Threads}",
                    Exclusive = true,
                    SessionCapacity = 4096,
                });
                device = new TieredDevice(new RemoteCacheDevice(cache, ownsCache: true), ssd);
            }
            _device = device;
            // As the test: FASTER keeps 32 KiB of log and 16 KiB of read cache, so most hops go to the device.
            _kv = new FasterKV<long, long>(64, new LogSettings
            {
                LogDevice = device,
                PageSizeBits = 12,
                MemorySizeBits = 15,
                SegmentSizeBits = 20,
                ReadCacheSettings = new ReadCacheSettings { PageSizeBits = 10, MemorySizeBits = 14 },
            }, comparer: new FoldedComparer(100));
            Sessions = Enumerable.Range(0, bench.Threads)
                .Select(_ => _kv.For(new SimpleFunctions<long, long>((a, b) => a + b)).NewSession<SimpleFunctions<long, long>>())
                .ToArray();
            var loader = Sessions[0];
            for (long key = 0; key < Keys; key++)
                loader.Upsert(key, key * Versions);
            loader.CompletePending(wait: true);
        }

        public ClientSession<long, long, long, long, Empty, SimpleFunctions<long, long>>[] Sessions { get; }

        public void Dispose()
        {
            foreach (var session in Sessions)
                session.Dispose();
            _kv.Dispose();
            _device.Dispose();  // FASTER does not dispose the device it was given
            Directory.Delete(_dir, recursive: true);
        }
    }

    private sealed class FoldedComparer : IFasterEqualityComparer<long>
    {
        private readonly long _modulo;

        public FoldedComparer(long modulo) => _modulo = modulo;

        public bool Equals(ref long k1, ref long k2) => k1 == k2;

        public long GetHashCode64(ref long k) => Utility.GetHashCode(k) % _modulo;
    }

    /// <summary>Adds the "vs local" column.</summary>
    public sealed class RatioConfig : ManualConfig
    {
        public RatioConfig() => AddColumn(new VsLocalColumn());
    }

    // The tiered device's throughput over the local device's, from the same summary: the cases must run together.
    private sealed class VsLocalColumn : IColumn
    {
        public string Id => nameof(VsLocalColumn);
        public string ColumnName => "vs local";
        public bool AlwaysShow => true;
        public ColumnCategory Category => ColumnCategory.Custom;
        public int PriorityInCategory => 0;
        public bool IsNumeric => true;
        public UnitType UnitType => UnitType.Dimensionless;
        public string Legend => "throughput over that of local-storage at the same thread count (same run)";

        public bool IsDefault(Summary summary, BenchmarkCase benchmarkCase) => false;

        public bool IsAvailable(Summary summary) => true;

        public string GetValue(Summary summary, BenchmarkCase benchmarkCase) => GetValue(summary, benchmarkCase, SummaryStyle.Default);

        public string GetValue(Summary summary, BenchmarkCase benchmarkCase, SummaryStyle style)
        {
            if (benchmarkCase.Descriptor.Type != typeof(FasterChains))
                return "-";
            object threads = benchmarkCase.Parameters[nameof(Threads)];
            var local = summary.BenchmarksCases.FirstOrDefault(c =>
                Equals(c.Parameters[nameof(Device)], "local-storage") && Equals(c.Parameters[nameof(Threads)], threads));
            double? mine = summary[benchmarkCase]?.ResultStatistics?.Mean;
            double? theirs = local is null ? null : summary[local]?.ResultStatistics?.Mean;
            return mine is > 0 && theirs is > 0 ? $"{theirs.Value / mine.Value:F2}" : "?";
        }
    }
}

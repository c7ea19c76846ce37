using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Garnet;
using Garnet.server;
using RemoteCache.Garnet;
using StackExchange.Redis;
using Tsavorite.core;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// YCSB's read-only workload over RESP on Garnet, one embedded Garnet per device with the same records and memory
/// budget: everything in memory (the ceiling), its log tier a RemoteCache over its files (<see cref="RemoteCacheDeviceFactoryCreator"/>),
/// and its log tier on its files alone (Garnet's own storage tier). Each client thread has its own connection and
/// keeps <see cref="YcsbOptions.Depth"/> GETs in one pipelined batch, as <c>redis-benchmark -P</c> does; every value
/// read is checked against the one loaded.
/// </summary>
public sealed class GarnetRunner : IStoreRunner<GarnetRunner.Store>
{
    /// <summary>The devices a Garnet run compares.</summary>
    public static readonly IReadOnlyList<string> DeviceNames = new[] { "memory", "remotecache", "ssd" };

    /// <summary>Keys are "u" and nine digits, as YCSB's "user" keys are fixed-length strings.</summary>
    private const int KeyBytes = 10;

    private readonly YcsbOptions _o;
    private readonly RunEnvironment _env;
    private readonly IProgressSink _progress;

    public GarnetRunner(YcsbOptions options, RunEnvironment env, IProgressSink progress)
    {
        _o = options;
        _env = env;
        _progress = progress;
    }

    /// <summary>
    /// A string record in Garnet's log: its header (8 B), then key and value each with a 4-byte length, each rounded
    /// up to 8 B (Tsavorite's SpanByte records).
    /// </summary>
    public static long RecordBytes(YcsbOptions o) => 8 + Align8(4 + KeyBytes) + Align8(4 + o.ValueBytes);

    /// <summary>
    /// FASTER's shape, but with memory the log / <see cref="YcsbOptions.MemoryFraction"/> in whole pages rather than a
    /// power of two at least that much smaller: Garnet takes any memory size.
    /// </summary>
    public static LogShape Shape(YcsbOptions o, bool everythingInMemory)
    {
        var shape = LogShape.For(o.Records * RecordBytes(o), everythingInMemory ? null : o.MemoryFraction);
        if (everythingInMemory)
            return shape;
        long page = 1L << shape.PageBits;
        return shape with { MemoryBytes = Math.Max(2 * page, (long)(shape.LogBytes / o.MemoryFraction) / page * page) };
    }

    private static long Align8(long bytes) => (bytes + 7) & ~7L;

    /// <summary>One device's embedded Garnet, loaded, with a connection per client thread.</summary>
    public sealed class Store : IBenchStore
    {
        internal Store(string device, GarnetServer server, RemoteCacheDeviceFactoryCreator? creator, ConnectionMultiplexer[] clients, string dir)
        {
            Device = device;
            Server = server;
            Creator = creator;
            Clients = clients;
            Dir = dir;
        }

        public string Device { get; }
        internal GarnetServer Server { get; }
        internal RemoteCacheDeviceFactoryCreator? Creator { get; }
        internal ConnectionMultiplexer[] Clients { get; }
        internal string Dir { get; }
        internal string Note { get; set; } = "";
        internal int FailedTiersReported { get; set; }

        /// <summary>The main log's tiered device (the remotecache store's).</summary>
        internal TieredDevice? MainLog => Creator?.Devices.LastOrDefault(d => d.FileName.EndsWith("/Store/hlog", StringComparison.Ordinal));

        public void Dispose()
        {
            foreach (var client in Clients)
                client.Dispose();
            Server.Dispose();
            if (Directory.Exists(Dir))
                Directory.Delete(Dir, recursive: true);
        }
    }

    /// <summary>Starts the device's Garnet and loads every record into it.</summary>
    public Store Open(string device)
    {
        if (!DeviceNames.Contains(device))
            throw new ArgumentException($"unknown Garnet device '{device}' (Garnet runs compare {string.Join(", ", DeviceNames)})");
        bool inMemory = device == "memory";
        var shape = Shape(_o, inMemory);
        string dir = Path.Combine(_env.DataDir, "garnet-" + device);
        if (Directory.Exists(dir))
            Directory.Delete(dir, recursive: true);
        Directory.CreateDirectory(dir);
        var files = new LocalStorageNamedDeviceFactoryCreator(deviceType: DeviceType.RandomAccess);
        RemoteCacheDeviceFactoryCreator? creator = device == "remotecache"
            ? new RemoteCacheDeviceFactoryCreator(files, file => file.fileName == "hlog" ? _env.OpenCache(shape.CacheBytes, false) : null)
            : null;
        int port = FreePort();
        var options = new GarnetServerOptions
        {
            EndPoints = new EndPoint[] { new IPEndPoint(IPAddress.Loopback, port) },
            EnableStorageTier = !inMemory,
            LogDir = inMemory ? null : Path.Combine(dir, "log"),  // Garnet refuses a log folder without a storage tier
            CheckpointDir = Path.Combine(dir, "checkpoints"),
            LogMemorySize = Bytes(shape.MemoryBytes),
            PageSize = Bytes(1L << shape.PageBits),
            SegmentSize = Bytes(1L << shape.SegmentBits),
            IndexMemorySize = Bytes(64L * (long)System.Numerics.BitOperations.RoundUpToPowerOf2((ulong)Math.Max(1024, _o.Records / 4))),
            DisableObjects = true,  // strings only: no object store, no object log
            MaxDatabases = 1,
            QuietMode = true,
            DeviceFactoryCreator = (INamedDeviceFactoryCreator?)creator ?? files,
        };
        GarnetServer? server = null;
        var clients = new List<ConnectionMultiplexer>();
        try
        {
            server = new GarnetServer(options);
            server.Start();
            for (int c = 0; c < _o.Threads.Max(); c++)
                clients.Add(ConnectionMultiplexer.Connect($"127.0.0.1:{port},asyncTimeout=30000,syncTimeout=30000"));
            var store = new Store(device, server, creator, clients.ToArray(), dir);
            Load(store);
            store.Note = inMemory ? "all in memory" : Invariant($"{(double)shape.LogBytes / shape.MemoryBytes:0.#}x memory");
            return store;
        }
        catch
        {
            foreach (var client in clients)
                client.Dispose();
            server?.Dispose();
            throw;
        }
    }

    private void Load(Store store)
    {
        _progress.Phase($"garnet {store.Device}: load {_o.Records:N0} records", _o.Records);
        var db = store.Clients[0].GetDatabase();
        const int batchSize = 1000;
        for (long first = 0; first < _o.Records; first += batchSize)
        {
            long count = Math.Min(batchSize, _o.Records - first);
            var batch = db.CreateBatch();
            var sets = new Task<bool>[count];
            for (int i = 0; i < count; i++)
                sets[i] = batch.StringSetAsync(Key(first + i), Value(first + i));
            batch.Execute();
            Task.WaitAll(sets);
            if (sets.Any(t => !t.Result))
                throw new InvalidOperationException($"garnet {store.Device}: a SET of the load was refused");
            _progress.Advance(first + count);
        }
    }

    public RunResult RunPhase(Store store, Distribution distribution, int threads, int round)
    {
        if (_o.Workload.Read != 1)
            throw new ArgumentException("Garnet runs the read-only workload only (GETs of the loaded records)");
        var inserted = new InsertCounter(_o.Records);
        var workers = Enumerable.Range(0, threads)
                                .Select(t => new Worker(this, store.Clients[t].GetDatabase(), KeyChoosers.For(distribution, _o, inserted), inserted, seed: 1000 * t + (int)distribution))
                                .ToArray();
        string label = $"garnet {store.Device}: {_o.Workload.Name} {distribution.ToString().ToLowerInvariant()}, {threads} thread{(threads > 1 ? "s" : "")}" +
                       (_o.Rounds > 1 ? $", round {round}/{_o.Rounds}" : "");
        var window = TimedPhase.Run(_o, _progress, label, "ycsb garnet", workers.Select(w => (PhaseWorker)w.Run).ToArray(),
                                    () => workers.Sum(w => Volatile.Read(ref w.Operations)));
        var latency = new Histogram();
        long errors = 0;
        foreach (var w in workers)
        {
            latency.Add(w.Latency);
            errors += w.Errors;
            if (w.FirstWrong is { } wrong)
                Console.Error.WriteLine($"garnet {store.Device}: a wrong value: {wrong}");
            if (w.Failure is { } failure)
                throw new InvalidOperationException($"garnet {store.Device}: a client thread failed: {failure.Message}", failure);
        }
        if (store.MainLog is { } log && log.FailedTiers.Count > store.FailedTiersReported)
        {
            store.FailedTiersReported = log.FailedTiers.Count;
            Console.Error.WriteLine($"garnet {store.Device}: tier(s) {string.Join(",", log.FailedTiers)} failed during the run");
        }
        return new RunResult(store.Device, _o.Workload.Name, distribution.ToString().ToLowerInvariant(), threads, _o.ValueBytes, _o.Records,
                             window.Operations, window.Seconds, latency.MeanNs / 1000, latency.Quantile(0.5) / 1000.0, latency.Quantile(0.99) / 1000.0,
                             errors, store.Note)
        {
            Round = round, Latency = latency, CpuUsPerOp = window.CpuUsPerOp,
        };
    }

    private static string Key(long id) => "u" + id.ToString("D9", System.Globalization.CultureInfo.InvariantCulture);

    private byte[] Value(long id)
    {
        var value = new byte[_o.ValueBytes];
        FillValue(id, value);
        return value;
    }

    // The loaded value of a key: its number's digits, then a letter of its own (so a value read for the wrong key shows).
    private static void FillValue(long id, Span<byte> value)
    {
        Span<byte> digits = stackalloc byte[20];
        id.TryFormat(digits, out int length, default, System.Globalization.CultureInfo.InvariantCulture);
        value.Fill((byte)('a' + id % 26));
        digits[..Math.Min(length, value.Length)].CopyTo(value);
    }

    private static string Shorten(string text) => text.Length <= 40 ? text : text[..40] + "…";

    private static string Bytes(long bytes) => Invariant($"{bytes}");

    private static string Invariant(FormattableString s) => s.ToString(System.Globalization.CultureInfo.InvariantCulture);

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    /// <summary>One client thread: a batch of <see cref="YcsbOptions.Depth"/> GETs at a time on its own connection.</summary>
    private sealed class Worker
    {
        private readonly GarnetRunner _runner;
        private readonly IDatabase _db;
        private readonly IKeyChooser _chooser;
        private readonly InsertCounter _inserted;  // the records loaded: the Zipfian key space reaches past them, and such keys are drawn again
        private readonly Random _rng;
        public long Operations;
        public long Errors;
        public Exception? Failure;
        public string? FirstWrong;
        public readonly Histogram Latency = new();

        public Worker(GarnetRunner runner, IDatabase db, IKeyChooser chooser, InsertCounter inserted, int seed)
        {
            _runner = runner;
            _db = db;
            _chooser = chooser;
            _inserted = inserted;
            _rng = new Random(seed);
        }

        public void Run(CountdownEvent started, ref int stop, ref int measuring)
        {
            int depth = _runner._o.Depth;
            var ids = new long[depth];
            var gets = new Task<RedisValue>[depth];
            var expected = new byte[_runner._o.ValueBytes];
            started.Signal();
            try
            {
                while (Volatile.Read(ref stop) == 0)
                {
                    long begin = Stopwatch.GetTimestamp();
                    var batch = _db.CreateBatch();
                    for (int i = 0; i < depth; i++)
                    {
                        ids[i] = _inserted.Draw(_chooser, _rng);
                        gets[i] = batch.StringGetAsync(Key(ids[i]));
                    }
                    batch.Execute();
                    Task.WaitAll(gets);
                    long ns = (long)Stopwatch.GetElapsedTime(begin).TotalNanoseconds;
                    for (int i = 0; i < depth; i++)
                    {
                        FillValue(ids[i], expected);
                        var read = gets[i].Result;
                        if (read.IsNull || !((ReadOnlyMemory<byte>)read).Span.SequenceEqual(expected))
                        {
                            if (Interlocked.Increment(ref Errors) == 1)
                                FirstWrong = $"{Key(ids[i])}: read {(read.IsNull ? "nothing" : Shorten(read.ToString()))}, loaded {Shorten(System.Text.Encoding.ASCII.GetString(expected))}";
                        }
                    }
                    // A pipelined batch's GETs complete together: each is counted with the batch's round trip.
                    if (Volatile.Read(ref measuring) == 1)
                        for (int i = 0; i < depth; i++)
                            Latency.Record(ns);
                    Interlocked.Add(ref Operations, depth);
                }
            }
            catch (Exception e) when (e is RedisException or AggregateException or TimeoutException)
            {
                Failure = e;
            }
        }
    }
}

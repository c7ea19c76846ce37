using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;

namespace RemoteCache.Benchmarks.Manager;

/// <summary>
/// Allocate latency (two servers, 1 GiB, servers already running) and Allocate throughput over a 100-type catalogue,
/// each beside GetCache on the same channel (the RPC floor, measured in the same run).
/// </summary>
public static class Program
{
    private const long GiB = 1L << 30;
    private const string Key = "bench-key-0123456789";

    public static Task<int> Main(string[] args)
    {
        var iterations = new Option<int>("--iterations") { Description = "Allocate/Deallocate pairs timed for latency", DefaultValueFactory = _ => 300 };
        var seconds = new Option<double>("--seconds") { Description = "Seconds of the throughput run", DefaultValueFactory = _ => 5 };
        var clients = new Option<int>("--clients") { Description = "Concurrent callers in the throughput run", DefaultValueFactory = _ => 4 };
        var creates = new Option<int>("--creates") { Description = "CreateAsync/DeleteAsync pairs timed", DefaultValueFactory = _ => 100 };
        var populateMiB = new Option<long>("--populate-mib") { Description = "MiB filled from a file per populate run", DefaultValueFactory = _ => 512 };
        var json = new Option<string?>("--json") { Description = "Also write the figures to this JSON file" };
        var root = new RootCommand("Allocate latency and throughput of remotecache-manager with warm local servers; the managed client's Create latency and populate throughput")
        {
            iterations, seconds, clients, creates, populateMiB, json,
        };
        // The control plane with real manager processes (ControlBench); the in-process suite stays the root's action.
        root.Subcommands.Add(ControlBench.ControlCommand());
        root.Subcommands.Add(ControlBench.FailoverCommand());
        root.Subcommands.Add(MembershipBench.Command());
        root.Subcommands.Add(HarvestBench.Command());
        root.SetAction(async (parse, ct) =>
        {
            string dir = Directory.CreateTempSubdirectory("manager-bench-").FullName;
            try
            {
                var latency = await LatencyAsync(Path.Combine(dir, "latency"), parse.GetValue(iterations));
                var throughput = await ThroughputAsync(Path.Combine(dir, "throughput"), TimeSpan.FromSeconds(parse.GetValue(seconds)), parse.GetValue(clients));
                var create = await CreateAsync(Path.Combine(dir, "create"), parse.GetValue(creates));
                var populate = new List<Populate>();
                foreach (string transport in new[] { "tcp", "shm" })
                    populate.Add(await PopulateAsync(Path.Combine(dir, "populate-" + transport), transport, parse.GetValue(populateMiB) << 20));
                var figures = new { date = DateTime.UtcNow.ToString("yyyy-MM-dd", CultureInfo.InvariantCulture), latency, throughput, create, populate };
                Console.WriteLine(Invariant($"Allocate, 1 GiB on two warm servers ({latency.Count} calls): p50 {latency.AllocateP50Ms:0.00} ms, p99 {latency.AllocateP99Ms:0.00} ms (target p99 ≤ 20 ms: {(latency.AllocateP99Ms <= 20 ? "met" : "MISSED")})"));
                Console.WriteLine(Invariant($"  GetCache on the same channel: p50 {latency.GetCacheP50Ms:0.00} ms, p99 {latency.GetCacheP99Ms:0.00} ms; Allocate p50 / GetCache p50 = {latency.AllocateP50Ms / latency.GetCacheP50Ms:0.0}"));
                Console.WriteLine(Invariant($"  Deallocate: p50 {latency.DeallocateP50Ms:0.00} ms, p99 {latency.DeallocateP99Ms:0.00} ms"));
                Console.WriteLine(Invariant($"Allocate+Deallocate over a 100-type catalogue, {throughput.Clients} callers, {throughput.Seconds:0.#} s: {throughput.AllocationsPerSecond:0} allocations/s (GetCache alone: {throughput.GetCachePerSecond:0}/s)"));
                Console.WriteLine(Invariant($"CreateAsync (Allocate + connect + ready), 1 GiB on two warm servers over tcp ({create.Count} calls): p50 {create.P50Ms:0.00} ms, p99 {create.P99Ms:0.00} ms; Allocate alone in this run p50 {create.AllocateP50Ms:0.00} ms"));
                foreach (var p in populate)
                    Console.WriteLine(Invariant($"populateFrom over {p.Transport}, {p.Bytes >> 20} MiB from the page cache onto committed memory (median of {p.Rounds}): {p.PopulateMBps:0} MB/s; in the same run {p.Reference}: {p.BulkMBps:0} MB/s → {p.Ratio:0.00} (target ≥ 0.5: {(p.Ratio >= 0.5 ? "met" : "MISSED")}); reading the file alone: {p.SourceReadMBps:0} MB/s → {p.PopulateMBps / p.SourceReadMBps:0.00}; the bulk copy into fresh pages: {p.BulkFreshPagesMBps:0} MB/s → {p.PopulateMBps / p.BulkFreshPagesMBps:0.00}; memcpy into one buffer: {p.MemcpyMBps:0} MB/s → {p.PopulateMBps / p.MemcpyMBps:0.00}"));
                if (parse.GetValue(json) is { } path)
                    await File.WriteAllTextAsync(path, JsonSerializer.Serialize(figures, new JsonSerializerOptions { WriteIndented = true }), ct);
                return 0;
            }
            finally
            {
                Directory.Delete(dir, recursive: true);
            }
        });
        return root.Parse(args).InvokeAsync();
    }

    private sealed record Latency(int Count, double AllocateP50Ms, double AllocateP99Ms, double DeallocateP50Ms, double DeallocateP99Ms, double GetCacheP50Ms, double GetCacheP99Ms);

    private sealed record Throughput(int Clients, double Seconds, int VmTypes, double AllocationsPerSecond, double GetCachePerSecond);

    private static async Task<Latency> LatencyAsync(string dir, int iterations)
    {
        // Both servers are kept warm between calls.
        await using var manager = await Manager.StartAsync(dir, HalfGiBCatalogue, warm: 2);
        var request = Request();
        var allocate = new List<double>();
        var deallocate = new List<double>();
        var get = new List<double>();
        for (int i = -20; i < iterations; i++)  // the first 20 warm up (JIT, servers starting)
        {
            var t = Stopwatch.StartNew();
            var cache = (await manager.Client.AllocateAsync(request)).Cache;
            double a = t.Elapsed.TotalMilliseconds;
            if (cache.Servers.Count != 2)
                throw new InvalidOperationException($"expected two servers, got {cache.Servers.Count}");
            t.Restart();
            await manager.Client.GetCacheAsync(new GetCacheRequest { CacheId = cache.CacheId });
            double g = t.Elapsed.TotalMilliseconds;
            t.Restart();
            await manager.Client.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
            double d = t.Elapsed.TotalMilliseconds;
            if (i < 0)
                continue;
            allocate.Add(a);
            get.Add(g);
            deallocate.Add(d);
        }
        return new Latency(iterations, Quantile(allocate, 0.5), Quantile(allocate, 0.99), Quantile(deallocate, 0.5), Quantile(deallocate, 0.99),
                           Quantile(get, 0.5), Quantile(get, 0.99));
    }

    private static async Task<Throughput> ThroughputAsync(string dir, TimeSpan duration, int clients)
    {
        var random = new Random(17);
        var types = Enumerable.Range(0, 99).Select(i => new VmType($"t{i:00}", (1 + random.Next(32)) * GiB, 1 + random.Next(8),
                                                                   0.2 + random.NextDouble(), random.Next(2) == 0 ? 0.1 + random.NextDouble() / 2 : null, 2, 2))
                            .Append(new VmType("cheap-half", 512L << 20, 1, 0.01, null, 2 * clients, 0)).ToArray();
        var catalogue = new VmCatalogue { VmTypes = types };
        await using var manager = await Manager.StartAsync(dir, catalogue, warm: 2 * clients);
        var request = Request();
        var warmup = await Task.WhenAll(Enumerable.Range(0, clients).Select(_ => manager.Client.AllocateAsync(request).ResponseAsync));
        foreach (var w in warmup)
            await manager.Client.DeallocateAsync(new DeallocateRequest { CacheId = w.Cache.CacheId });
        long allocations = 0;
        var clock = Stopwatch.StartNew();
        await Task.WhenAll(Enumerable.Range(0, clients).Select(async _ =>
        {
            while (clock.Elapsed < duration)
            {
                var cache = (await manager.Client.AllocateAsync(request)).Cache;
                await manager.Client.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
                Interlocked.Increment(ref allocations);
            }
        }));
        double allocationRate = allocations / clock.Elapsed.TotalSeconds;
        var one = (await manager.Client.AllocateAsync(request)).Cache;
        long gets = 0;
        clock.Restart();
        await Task.WhenAll(Enumerable.Range(0, clients).Select(async _ =>
        {
            while (clock.Elapsed < duration)
            {
                await manager.Client.GetCacheAsync(new GetCacheRequest { CacheId = one.CacheId });
                Interlocked.Increment(ref gets);
            }
        }));
        // Deallocated, or its servers would outlive the manager (a local server holding a cache keeps serving).
        await manager.Client.DeallocateAsync(new DeallocateRequest { CacheId = one.CacheId });
        return new Throughput(clients, duration.TotalSeconds, types.Length, allocationRate, gets / clock.Elapsed.TotalSeconds);
    }

    private sealed record Create(int Count, double P50Ms, double P99Ms, double AllocateP50Ms);

    private sealed record Populate(string Transport, long Bytes, int Rounds, double PopulateMBps, string Reference, double BulkMBps, double Ratio,
                                   double SourceReadMBps, double BulkFreshPagesMBps, double MemcpyMBps);

    // Redy's Create as an application calls it: Allocate, connect to both servers with the capabilities, ready for I/O.
    private static async Task<Create> CreateAsync(string dir, int iterations)
    {
        await using var manager = await Manager.StartAsync(dir, HalfGiBCatalogue, warm: 2);
        await using var client = manager.ManagedClient();
        var create = new List<double>();
        var allocate = new List<double>();
        for (int i = -10; i < iterations; i++)
        {
            var t = Stopwatch.StartNew();
            var cache = await client.CreateAsync(GiB, new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(100) }, duration: null);
            double c = t.Elapsed.TotalMilliseconds;
            if (cache.Client.ServerCount != 2)
                throw new InvalidOperationException($"expected two servers, got {cache.Client.ServerCount}");
            await cache.DeleteAsync();
            t.Restart();
            var raw = (await manager.Client.AllocateAsync(Request())).Cache;
            double a = t.Elapsed.TotalMilliseconds;
            await manager.Client.DeallocateAsync(new DeallocateRequest { CacheId = raw.CacheId });
            if (i < 0)
                continue;
            create.Add(c);
            allocate.Add(a);
        }
        return new Create(iterations, Quantile(create, 0.5), Quantile(create, 0.99), Quantile(allocate, 0.5));
    }

    // populateFrom against the transport's bulk copy of the same bytes into memory that is there (the servers commit
    // theirs ahead, so a new cache's is), alternating, medians of three; beside it the same copy into fresh pages and
    // the file read alone (a fill cannot outrun its source).
    private static async Task<Populate> PopulateAsync(string dir, string transport, long bytes)
    {
        await using var manager = await Manager.StartAsync(dir, HalfGiBCatalogue, warm: 2, commitMemory: true);
        await using var client = manager.ManagedClient();
        string file = Path.Combine(dir, "source.bin");
        var source = GC.AllocateUninitializedArray<byte>((int)Math.Min(bytes, 1L << 30));
        new Random(5).NextBytes(source);
        await using (var f = File.Create(file))
            for (long written = 0; written < bytes; written += source.Length)
                await f.WriteAsync(source.AsMemory(0, (int)Math.Min(source.Length, bytes - written)));
        await File.ReadAllBytesAsync(file);  // in the page cache: the data path is measured, not the disk
        var populate = new List<double>();
        var bulk = new List<double>();
        var fresh = new List<double>();
        var read = new List<double>();
        var memcpy = new List<double>();
        string reference = transport == "tcp" ? "one loopback TCP stream, 1 MiB writes into one buffer" : "the file read into a new mapping of shared memory whose pages exist";
        for (int round = 0; round < 3; round++)
        {
            await WaitForCommittedServersAsync();
            var cache = await client.CreateAsync(new ManagedCacheRequest
            {
                Capacity = GiB, Transport = transport, PopulateFrom = file, PopulateInBackground = true,
                Slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(100) },
            });
            var t = Stopwatch.StartNew();  // populating started as CreateAsync returned
            await cache.Populated;
            populate.Add(bytes / t.Elapsed.TotalSeconds / 1e6);
            await cache.DeleteAsync();
            bulk.Add(transport == "tcp" ? await TcpCopyAsync(source, bytes, freshPages: false) : FileIntoNewMapping(file, bytes));
            memcpy.Add(MemoryCopy(source, bytes, freshPages: false));
            fresh.Add(transport == "tcp" ? await TcpCopyAsync(source, bytes, freshPages: true) : MemoryCopy(source, bytes, freshPages: true));
            read.Add(FileRead(file, bytes));
        }
        double p = Quantile(populate, 0.5), b = Quantile(bulk, 0.5);
        return new Populate(transport, bytes, 3, p, reference, b, p / b, Quantile(read, 0.5), Quantile(fresh, 0.5), Quantile(memcpy, 0.5));
    }

    // The servers commit a deleted cache's memory again in the background: a fill measured while they still do would
    // measure that work too. There is no count of it to read, so the wait is long enough for 512 MiB here (~0.2 s).
    private static Task WaitForCommittedServersAsync() => Task.Delay(TimeSpan.FromSeconds(1));

    // The fastest fill over shm: the file read straight into a new mapping of shared memory whose pages exist, as an shm
    // client maps a committed region: one copy, plus the new mapping's first touch of each page (its page tables are
    // its own). A memcpy into memory already mapped is no reference for a fill from a file, which copies twice.
    private static unsafe double FileIntoNewMapping(string file, long bytes)
    {
        string shm = Path.Combine("/dev/shm", $"remotecache-bench-{Environment.ProcessId}");
        try
        {
            using (var target = new FileStream(shm, FileMode.Create, FileAccess.Write))
            {
                var zeros = new byte[1 << 20];
                for (long done = 0; done < bytes; done += zeros.Length)
                    target.Write(zeros, 0, (int)Math.Min(zeros.Length, bytes - done));
            }
            using var map = System.IO.MemoryMappedFiles.MemoryMappedFile.CreateFromFile(shm, FileMode.Open, null, bytes);
            using var view = map.CreateViewAccessor(0, bytes);
            byte* p = null;
            view.SafeMemoryMappedViewHandle.AcquirePointer(ref p);
            try
            {
                using var handle = File.OpenHandle(file, FileMode.Open, FileAccess.Read, FileShare.Read, FileOptions.SequentialScan);
                var t = Stopwatch.StartNew();
                for (long done = 0; done < bytes;)
                    done += RandomAccess.Read(handle, new Span<byte>(p + done, (int)Math.Min(1 << 20, bytes - done)), done);
                return bytes / t.Elapsed.TotalSeconds / 1e6;
            }
            finally
            {
                view.SafeMemoryMappedViewHandle.ReleasePointer();
            }
        }
        finally
        {
            File.Delete(shm);
        }
    }

    // The file read alone, 1 MiB reads from the page cache into one buffer: the most a fill from it can do.
    private static double FileRead(string file, long bytes)
    {
        using var handle = File.OpenHandle(file, FileMode.Open, FileAccess.Read, FileShare.Read, FileOptions.SequentialScan);
        var buffer = new byte[1 << 20];
        var t = Stopwatch.StartNew();
        for (long done = 0; done < bytes;)
            done += RandomAccess.Read(handle, buffer.AsSpan(0, (int)Math.Min(buffer.Length, bytes - done)), done);
        return bytes / t.Elapsed.TotalSeconds / 1e6;
    }

    // One loopback TCP stream of the bytes, 1 MiB writes; the receiver lands them in fresh pages (as a new cache's
    // server does: its first touch of each page faults it in and zeroes it) or, for the transport alone, in one reused buffer.
    private static async Task<double> TcpCopyAsync(byte[] source, long bytes, bool freshPages)
    {
        using var listener = new System.Net.Sockets.TcpListener(System.Net.IPAddress.Loopback, 0);
        listener.Start();
        using var sender = new System.Net.Sockets.TcpClient();
        await sender.ConnectAsync(System.Net.IPAddress.Loopback, ((System.Net.IPEndPoint)listener.LocalEndpoint).Port);
        using var receiver = await listener.AcceptTcpClientAsync();
        var target = new NativeBuffer(freshPages ? bytes : 1 << 20);
        try
        {
            var t = Stopwatch.StartNew();
            var receive = Task.Run(() =>
            {
                var socket = receiver.Client;
                for (long got = 0; got < bytes;)
                    got += socket.Receive(target.Span(freshPages ? got : got % (1 << 20), (int)Math.Min(1 << 20, Math.Min(bytes - got, freshPages ? bytes : (1 << 20) - got % (1 << 20)))));
            });
            var send = sender.GetStream();
            for (long sent = 0; sent < bytes; sent += 1 << 20)
                await send.WriteAsync(source.AsMemory((int)(sent % source.Length), (int)Math.Min(1 << 20, bytes - sent)));
            await receive;
            return bytes / t.Elapsed.TotalSeconds / 1e6;
        }
        finally
        {
            target.Dispose();
        }
    }

    private sealed unsafe class NativeBuffer : IDisposable
    {
        private readonly byte* _p;

        public NativeBuffer(long bytes) => _p = (byte*)System.Runtime.InteropServices.NativeMemory.Alloc((nuint)bytes);

        public byte* Pointer => _p;

        public Span<byte> Span(long offset, int length) => new(_p + offset, length);

        public void Dispose() => System.Runtime.InteropServices.NativeMemory.Free(_p);
    }

    private static unsafe double MemoryCopy(byte[] source, long bytes, bool freshPages)
    {
        const int Chunk = 1 << 20;
        using var target = new NativeBuffer(freshPages ? bytes : Chunk);
        var t = Stopwatch.StartNew();
        fixed (byte* from = source)
            for (long done = 0; done < bytes; done += Chunk)
                Buffer.MemoryCopy(from + done % source.Length, target.Pointer + (freshPages ? done : 0), Chunk, Math.Min(Chunk, bytes - done));
        return bytes / t.Elapsed.TotalSeconds / 1e6;
    }

    // 512 MiB VMs: a 1 GiB cache takes two (the cheapest placement).
    internal static VmCatalogue HalfGiBCatalogue => new() { VmTypes = new[] { new VmType("half", 512L << 20, 1, 0.02, null, 4, 0), new VmType("big", 2 * GiB, 2, 0.5, null, 2, 0) } };

    internal static AllocateRequest Request(long capacity = GiB) => new()
    {
        Capacity = (ulong)capacity,
        Transport = "tcp",
        Slo = new RemoteCache.Manager.V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(100)) },
        Name = "bench",
        Lease = Duration.FromTimeSpan(TimeSpan.FromMinutes(10)),
    };

    internal static double Quantile(List<double> values, double q)
    {
        var sorted = values.OrderBy(v => v).ToList();
        return sorted[Math.Clamp((int)Math.Ceiling(q * sorted.Count) - 1, 0, sorted.Count - 1)];
    }

    /// <summary>An API keys file (the manager's --keys) of one key per tenant, each with one role.</summary>
    internal static void WriteKeys(string path, params (string Tenant, string Key, string Role)[] keys) =>
        File.WriteAllText(path, JsonSerializer.Serialize(new
        {
            keys = keys.Select(k => new { tenant = k.Tenant, sha256 = Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(k.Key))), roles = new[] { k.Role } }),
        }));

    internal static string Invariant(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);

    /// <summary>A manager over a temporary state directory, with the shipped models and one API key.</summary>
    internal sealed class Manager : IAsyncDisposable
    {
        private Microsoft.AspNetCore.Builder.WebApplication _app = null!;
        private GrpcChannel _channel = null!;

        private Uri _address = null!;

        public CacheManager.CacheManagerClient Client { get; private set; } = null!;

        /// <summary>The pool's calls with <see cref="OperatorKey"/> (join tokens, servers).</summary>
        public ServerPool.ServerPoolClient Operator { get; private set; } = null!;

        public RemoteCacheManagerClient ManagedClient() => new(new RemoteCacheManagerOptions { Address = _address, ApiKey = Key });

        /// <summary>The operator's key of <see cref="StartAsync"/>'s manager.</summary>
        public const string OperatorKey = "bench-ops-key-0123456789";

        public Uri Address => _address;

        public static async Task<Manager> StartAsync(string dir, VmCatalogue catalogue, int warm, bool commitMemory = false, Action<ManagerOptions>? configure = null)
        {
            Directory.CreateDirectory(dir);
            string catalogueFile = Path.Combine(dir, "catalogue.json"), keys = Path.Combine(dir, "keys.json");
            await File.WriteAllTextAsync(catalogueFile, catalogue.ToJson());
            WriteKeys(keys, ("bench", Key, "tenant"), ("ops", OperatorKey, "operator"));
            var options = new ManagerOptions
            {
                StateDirectory = Path.Combine(dir, "state"), Catalogue = catalogueFile, Keys = keys, Warm = warm, CommitMemory = commitMemory, Transports = new() { "tcp", "shm" },
            };
            configure?.Invoke(options);
            var manager = new Manager();
            manager._app = await RemoteCache.Manager.Program.BuildAsync(options, new Uri("http://127.0.0.1:0"), TextWriter.Null, CancellationToken.None,
                b => b.Logging.SetMinimumLevel(LogLevel.Warning));
            await manager._app.StartAsync();
            manager._address = RemoteCache.Manager.Program.ListenAddress(manager._app);
            manager._channel = GrpcChannel.ForAddress(manager._address);
            CallInvoker Keyed(string key) => manager._channel.CreateCallInvoker().Intercept(m =>
            {
                m.Add("authorization", "Bearer " + key);
                return m;
            });
            manager.Client = new CacheManager.CacheManagerClient(Keyed(Key));
            manager.Operator = new ServerPool.ServerPoolClient(Keyed(OperatorKey));
            return manager;
        }

        public async ValueTask DisposeAsync()
        {
            await _channel.ShutdownAsync();
            await _app.StopAsync();
            await _app.DisposeAsync();
        }
    }
}

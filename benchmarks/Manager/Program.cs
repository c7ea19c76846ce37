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
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.V1;

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
        var json = new Option<string?>("--json") { Description = "Also write the figures to this JSON file" };
        var root = new RootCommand("Allocate latency and throughput of remotecache-manager with warm local servers") { iterations, seconds, clients, json };
        root.SetAction(async (parse, ct) =>
        {
            string dir = Directory.CreateTempSubdirectory("manager-bench-").FullName;
            try
            {
                var latency = await LatencyAsync(Path.Combine(dir, "latency"), parse.GetValue(iterations));
                var throughput = await ThroughputAsync(Path.Combine(dir, "throughput"), TimeSpan.FromSeconds(parse.GetValue(seconds)), parse.GetValue(clients));
                var figures = new { date = DateTime.UtcNow.ToString("yyyy-MM-dd", CultureInfo.InvariantCulture), latency, throughput };
                Console.WriteLine(Invariant($"Allocate, 1 GiB on two warm servers ({latency.Count} calls): p50 {latency.AllocateP50Ms:0.00} ms, p99 {latency.AllocateP99Ms:0.00} ms (target p99 ≤ 20 ms: {(latency.AllocateP99Ms <= 20 ? "met" : "MISSED")})"));
                Console.WriteLine(Invariant($"  GetCache on the same channel: p50 {latency.GetCacheP50Ms:0.00} ms, p99 {latency.GetCacheP99Ms:0.00} ms; Allocate p50 / GetCache p50 = {latency.AllocateP50Ms / latency.GetCacheP50Ms:0.0}"));
                Console.WriteLine(Invariant($"  Deallocate: p50 {latency.DeallocateP50Ms:0.00} ms, p99 {latency.DeallocateP99Ms:0.00} ms"));
                Console.WriteLine(Invariant($"Allocate+Deallocate over a 100-type catalogue, {throughput.Clients} callers, {throughput.Seconds:0.#} s: {throughput.AllocationsPerSecond:0} allocations/s (GetCache alone: {throughput.GetCachePerSecond:0}/s)"));
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
        // 512 MiB VMs: a 1 GiB cache takes two (the cheapest placement), both kept warm between calls.
        var catalogue = new VmCatalogue { VmTypes = new[] { new VmType("half", 512L << 20, 1, 0.02, null, 4, 0), new VmType("big", 2 * GiB, 2, 0.5, null, 2, 0) } };
        await using var manager = await Manager.StartAsync(dir, catalogue, warm: 2);
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
        return new Throughput(clients, duration.TotalSeconds, types.Length, allocationRate, gets / clock.Elapsed.TotalSeconds);
    }

    private static AllocateRequest Request() => new()
    {
        Capacity = (ulong)GiB,
        Transport = "tcp",
        Slo = new RemoteCache.Manager.V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(100)) },
        Name = "bench",
        Lease = Duration.FromTimeSpan(TimeSpan.FromMinutes(10)),
    };

    private static double Quantile(List<double> values, double q)
    {
        var sorted = values.OrderBy(v => v).ToList();
        return sorted[Math.Clamp((int)Math.Ceiling(q * sorted.Count) - 1, 0, sorted.Count - 1)];
    }

    private static string Invariant(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);

    /// <summary>A manager over a temporary state directory, with the shipped models and one API key.</summary>
    private sealed class Manager : IAsyncDisposable
    {
        private Microsoft.AspNetCore.Builder.WebApplication _app = null!;
        private GrpcChannel _channel = null!;

        public CacheManager.CacheManagerClient Client { get; private set; } = null!;

        public static async Task<Manager> StartAsync(string dir, VmCatalogue catalogue, int warm)
        {
            Directory.CreateDirectory(dir);
            string catalogueFile = Path.Combine(dir, "catalogue.json"), keys = Path.Combine(dir, "keys.json");
            await File.WriteAllTextAsync(catalogueFile, catalogue.ToJson());
            string hash = Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(Key)));
            await File.WriteAllTextAsync(keys, $$"""{ "keys": [ { "tenant": "bench", "sha256": "{{hash}}", "roles": ["tenant"] } ] }""");
            var options = new ManagerOptions
            {
                StateDirectory = Path.Combine(dir, "state"), Catalogue = catalogueFile, Keys = keys, Warm = warm, Transports = new() { "tcp" },
            };
            var manager = new Manager();
            manager._app = await RemoteCache.Manager.Program.BuildAsync(options, new Uri("http://127.0.0.1:0"), TextWriter.Null, CancellationToken.None,
                b => b.Logging.SetMinimumLevel(LogLevel.Warning));
            await manager._app.StartAsync();
            var address = manager._app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First();
            manager._channel = GrpcChannel.ForAddress(address);
            manager.Client = new CacheManager.CacheManagerClient(manager._channel.CreateCallInvoker().Intercept(m =>
            {
                m.Add("authorization", "Bearer " + Key);
                return m;
            }));
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

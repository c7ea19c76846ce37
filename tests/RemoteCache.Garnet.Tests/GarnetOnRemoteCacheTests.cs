using System;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Garnet;
using Garnet.server;
using RemoteCache.Manager.Tests;
using RemoteCache.Tests;
using StackExchange.Redis;
using Tsavorite.core;
using Xunit;
using Xunit.Abstractions;

namespace RemoteCache.Garnet.Tests;

/// <summary>An embedded Garnet whose log tier is a RemoteCache in front of its files, read back through a RESP client.</summary>
public sealed class GarnetOnRemoteCacheTests : IDisposable
{
    private readonly string _directory = Directory.CreateTempSubdirectory("rc-garnet-").FullName;
    private readonly ITestOutputHelper _output;

    public GarnetOnRemoteCacheTests(ITestOutputHelper output) => _output = output;

    public void Dispose() => Directory.Delete(_directory, recursive: true);

    [Fact]
    public async Task StringsAndHashesPastGarnetsMemoryAreReadBackFromTheCacheTier()
    {
        using var server = ServerProcess.Start("shm", memoryLimit: "256M");
        var creator = Creator(server);
        int port = Workload.FreePort();
        using (var garnet = new GarnetServer(Options(port, creator)))
        {
            garnet.Start();
            await using var redis = await Workload.ConnectAsync(port);
            var db = redis.GetDatabase();
            await Workload.LoadAsync(db);
            await Workload.VerifyAsync(db);

            // The main log's device: most GETs went to it, and the cache tier served them.
            var log = MainLog(creator);
            _output.WriteLine($"{log.FileName}: reads served by the cache {log.ReadsServedBy(0)}, by the files {log.ReadsServedBy(1)}");
            Assert.True(log.ReadsServedBy(0) >= Workload.Keys / 2, $"{log.ReadsServedBy(0)} reads served by the cache tier, {log.ReadsServedBy(1)} by the files");
            Assert.Empty(log.FailedTiers);
        }
    }

    [Fact]
    public async Task ACacheServerKilledTakesTheTierOutAndReadsComeFromTheFiles()
    {
        var server = ServerProcess.Start("shm", memoryLimit: "256M");
        var creator = Creator(server);
        int port = Workload.FreePort();
        try
        {
            using var garnet = new GarnetServer(Options(port, creator));
            garnet.Start();
            await using var redis = await Workload.ConnectAsync(port);
            var db = redis.GetDatabase();
            await Workload.LoadAsync(db);
            server.KillHard();
            await Workload.VerifyAsync(db);
            var log = MainLog(creator);
            _output.WriteLine($"{log.FileName}: reads served by the cache {log.ReadsServedBy(0)}, by the files {log.ReadsServedBy(1)}, tier failures {log.TierFailures}");
            Assert.Equal(new[] { 0 }, log.FailedTiers);
            Assert.True(log.ReadsServedBy(1) >= Workload.Keys / 2, $"{log.ReadsServedBy(1)} reads served by the files after the cache's server died");
        }
        finally
        {
            server.Dispose();
        }
    }

    [Fact]
    public async Task ACacheServerKilledUnderLoadIsReplacedAndTheTierTakenBackWithNoWrongValue()
    {
        await using var manager = new TestManager();
        await manager.StartAsync();
        await using var alice = manager.ManagedClient();
        var creator = RemoteCacheDeviceFactoryCreator.ThroughManager(
            new LocalStorageNamedDeviceFactoryCreator(deviceType: DeviceType.RandomAccess), alice,
            file => new ManagedCacheRequest { Capacity = 64 * TestManager.MiB, Transport = "shm" });
        int port = Workload.FreePort();
        using (var garnet = new GarnetServer(Options(port, creator)))
        {
            garnet.Start();
            await using var redis = await Workload.ConnectAsync(port);
            var db = redis.GetDatabase();
            await Workload.LoadAsync(db);
            var log = MainLog(creator);

            // Clients that overwrite and read back keys of their own, checking every GET against their last acknowledged SET.
            using var stop = new CancellationTokenSource();
            var written = new System.Collections.Concurrent.ConcurrentDictionary<int, string>();
            var clients = Enumerable.Range(0, 2).Select(c => Task.Run(() => VerifiedClientAsync(db, c, 2, written, stop.Token))).ToArray();
            await Task.Delay(500);
            string victim = (await alice.ListAsync()).Single(c => c.Name == "garnet-hlog").Servers.Single().ServerId;
            Assert.True(TestManager.StopServer(victim), $"no process for {victim}");
            // The tier is taken out (reads fall through to the files), the manager replaces the server, the device takes
            // the tier back and warms it from the files.
            var deadline = DateTime.UtcNow.AddSeconds(60);
            while (!(log.TierFailures > 0 && log.FailedTiers.Count == 0 && log.BytesWarmed > 0) && DateTime.UtcNow < deadline)
                await Task.Delay(100);
            // Back in service: the tier serves reads again.
            long servedBack = log.ReadsServedBy(0);
            await Task.Delay(2000);
            stop.Cancel();
            long checkedGets = (await Task.WhenAll(clients)).Sum();
            _output.WriteLine($"{checkedGets} GETs checked; tier failures {log.TierFailures}, failed tiers [{string.Join(",", log.FailedTiers)}], " +
                              $"warmed {log.BytesWarmed} bytes, served by the cache {log.ReadsServedBy(0)} ({servedBack} when it came back), by the files {log.ReadsServedBy(1)}");
            Assert.True(log.TierFailures > 0, "the dead server's cache tier never failed an operation");
            Assert.Empty(log.FailedTiers);
            Assert.True(log.BytesWarmed > 0, "the tier taken back was not warmed from the files");
            Assert.NotEqual(victim, (await alice.ListAsync()).Single(c => c.Name == "garnet-hlog").Servers.Single().ServerId);
            Assert.True(log.ReadsServedBy(0) > servedBack, "the tier taken back served no read");
            Assert.True(checkedGets > 200, $"only {checkedGets} GETs checked");
            await Workload.VerifyAsync(db, written);
        }
        await creator.WhenReleasedAsync();
        Assert.Empty(await alice.ListAsync());
    }

    // SETs key c, c + n, c + 2n … to new versions (recorded in `written` once acknowledged) and GETs each back: a wrong value
    // fails the test. Returns the GETs checked.
    private static async Task<long> VerifiedClientAsync(IDatabase db, int c, int n, System.Collections.Concurrent.ConcurrentDictionary<int, string> written,
                                                        CancellationToken stop)
    {
        var random = new Random(c);
        long checkedGets = 0;
        for (int version = 1; !stop.IsCancellationRequested; version++)
        {
            int key = c + n * random.Next(Workload.Keys / n);
            string value = $"{Workload.Value(key)}:v{version}";
            Assert.True(await db.StringSetAsync(Workload.Key(key), value));
            written[key] = value;
            int other = c + n * random.Next(Workload.Keys / n);
            var read = await db.StringGetAsync(Workload.Key(key));
            Assert.True(read == value, $"{Workload.Key(key)}: read {read}, last wrote {value}");
            checkedGets++;
            // And a key this client has not touched lately, most likely on the log's device.
            var old = await db.StringGetAsync(Workload.Key(other));
            string expected = written.TryGetValue(other, out var last) ? last : Workload.Value(other);
            Assert.True(old == expected, $"{Workload.Key(other)}: read {old}, last wrote {expected}");
            checkedGets++;
        }
        return checkedGets;
    }

    [Fact]
    public async Task ARecoveredGarnetReadsWhatItSavedWithAFreshCacheTier()
    {
        using var server = ServerProcess.Start("shm", memoryLimit: "256M");
        int port = Workload.FreePort();
        using (var garnet = new GarnetServer(Options(port, Creator(server))))
        {
            garnet.Start();
            await using var redis = await Workload.ConnectAsync(port);
            await Workload.LoadAsync(redis.GetDatabase());
            Assert.Equal("OK", (string?)await redis.GetServer($"127.0.0.1:{port}").ExecuteAsync("SAVE"));  // a checkpoint, done when it answers
        }
        var creator = Creator(server);
        var options = Options(port, creator);
        options.Recover = true;
        using (var garnet = new GarnetServer(options))
        {
            garnet.Start();
            await using var redis = await Workload.ConnectAsync(port);
            await Workload.VerifyAsync(redis.GetDatabase());
            // The new caches start empty: what Garnet recovered is read from its files, never from a cache that does not hold it.
            var log = MainLog(creator);
            Assert.True(log.ReadsServedBy(1) > 0, "no read came from the files after recovery");
            Assert.Empty(log.FailedTiers);
        }
    }

    // Garnet's own files (the local device it uses on Linux) under a cache of 8 MiB per log: the whole test log, in segments of 1 MiB (4 MiB for the object log).
    private static RemoteCacheDeviceFactoryCreator Creator(ServerProcess server) => new(
        new LocalStorageNamedDeviceFactoryCreator(deviceType: DeviceType.RandomAccess),
        file => RemoteCacheClient.Open(new[] { server.Endpoint }, new RemoteCacheOptions
        {
            RegionsPerServer = 8,
            Name = "garnet-" + file.fileName,
            OperationTimeout = TimeSpan.FromSeconds(2),
            Exclusive = true,
        }));

    // The main log's device (the last one Garnet asked for: a recovering Garnet asks twice).
    private static TieredDevice MainLog(RemoteCacheDeviceFactoryCreator creator) =>
        creator.Devices.Last(d => d.FileName.EndsWith("/Store/hlog", StringComparison.Ordinal));

    private GarnetServerOptions Options(int port, INamedDeviceFactoryCreator creator) => new()
    {
        EndPoints = new EndPoint[] { new IPEndPoint(IPAddress.Loopback, port) },
        EnableStorageTier = true,
        LogDir = Path.Combine(_directory, "log"),
        CheckpointDir = Path.Combine(_directory, "checkpoints"),
        LogMemorySize = "256k",
        PageSize = "64k",
        SegmentSize = "1m",
        ObjectLogSegmentSize = "4m",
        IndexMemorySize = "1m",
        MaxDatabases = 1,
        QuietMode = true,
        DeviceFactoryCreator = creator,
    };
}

using System;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading.Tasks;
using Garnet;
using Garnet.server;
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
            var log = creator.Devices.Last(d => d.Tiers[0].FileName == "remotecache:garnet-hlog");
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

    private static TieredDevice MainLog(RemoteCacheDeviceFactoryCreator creator) =>
        creator.Devices.Single(d => d.Tiers[0].FileName == "remotecache:garnet-hlog");

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

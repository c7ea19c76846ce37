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
    private const int Keys = 20_000;
    private readonly string _directory = Directory.CreateTempSubdirectory("rc-garnet-").FullName;
    private readonly ITestOutputHelper _output;

    public GarnetOnRemoteCacheTests(ITestOutputHelper output) => _output = output;

    public void Dispose() => Directory.Delete(_directory, recursive: true);

    [Fact]
    public async Task StringsAndHashesPastGarnetsMemoryAreReadBackFromTheCacheTier()
    {
        using var server = ServerProcess.Start("shm", memoryLimit: "256M");
        var creator = new RemoteCacheDeviceFactoryCreator(
            new LocalStorageNamedDeviceFactoryCreator(deviceType: DeviceType.RandomAccess),
            file => RemoteCacheClient.Open(new[] { server.Endpoint }, new RemoteCacheOptions
            {
                RegionsPerServer = 8,  // 8 MiB: the whole log, in segments of 1 MiB (4 MiB for the object log)
                Name = "garnet-" + file.fileName,
                OperationTimeout = TimeSpan.FromSeconds(5),
                Exclusive = true,
            }));
        int port = FreePort();
        using (var garnet = new GarnetServer(Options(port, creator)))
        {
            garnet.Start();
            await using var redis = await ConnectionMultiplexer.ConnectAsync($"127.0.0.1:{port}");
            var db = redis.GetDatabase();
            // ~140 B a record, 20 000 of them: about 11 times the 256 KiB of log Garnet keeps in memory.
            foreach (var batch in Enumerable.Range(0, Keys).Chunk(1000))
                await Task.WhenAll(batch.Select(i => db.StringSetAsync(Key(i), Value(i))));
            for (int h = 0; h < 20; h++)
                await db.HashSetAsync($"hash:{h}", Enumerable.Range(0, 100).Select(f => new HashEntry($"f{f}", $"{h}/{f}")).ToArray());

            foreach (var batch in Enumerable.Range(0, Keys).Chunk(1000))
            {
                var values = await Task.WhenAll(batch.Select(i => db.StringGetAsync(Key(i))));
                for (int j = 0; j < batch.Length; j++)
                    Assert.True(values[j] == Value(batch[j]), $"{Key(batch[j])}: read {values[j]}, wrote {Value(batch[j])}");
            }
            for (int h = 0; h < 20; h++)
                Assert.Equal($"{h}/57", (string?)await db.HashGetAsync($"hash:{h}", "f57"));

            // The main log's device: most GETs went to it, and the cache tier served them.
            var log = creator.Devices.Single(d => d.Tiers[0].FileName == "remotecache:garnet-hlog");
            _output.WriteLine($"{log.FileName}: reads served by the cache {log.ReadsServedBy(0)}, by the files {log.ReadsServedBy(1)}");
            Assert.True(log.ReadsServedBy(0) >= Keys / 2, $"{log.ReadsServedBy(0)} reads served by the cache tier, {log.ReadsServedBy(1)} by the files");
            Assert.Empty(log.FailedTiers);
        }
    }

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

    private static string Key(int i) => $"key:{i:D6}";

    private static string Value(int i) => $"{i:D6}:" + new string((char)('a' + i % 26), 93);

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}

using System;
using System.Threading.Tasks;
using System.Collections.Generic;
using System.IO;
using RemoteCache.Device;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;
using RemoteCache.Slo;
using Xunit;
using static RemoteCache.Tests.LogRecords;

namespace RemoteCache.Device.Tests;

/// <summary>
/// The configuration a device runs with: its default latency SLO with a performance model, one-sided without one, and
/// the caller's own when it gave one; in every case with at least the device's window (batch size and queue depth), so
/// that FASTER's concurrent reads are not sent one at a time.
/// </summary>
public sealed class DeviceSloTests : IDisposable
{
    private readonly RemoteCacheServer _server = RemoteCacheServer.Start(new RemoteCacheServerOptions
    {
        Listen = { "tcp:127.0.0.1:0" }, RegionSize = 1 << 20, MemoryLimit = 16 << 20, MaxThreads = 1,
    });
    private readonly string _dir = Directory.CreateTempSubdirectory("device-slo-").FullName;

    public void Dispose()
    {
        _server.Dispose();
        Directory.Delete(_dir, recursive: true);
    }

    // Reads of 512 B over tcp: latency falls with c and rises with b and q (s = 1 or 2).
    private string Model(int recordSize, double latencyFloorUs)
    {
        var points = new List<ModelPoint>();
        foreach (int s in new[] { 1, 2 })
            foreach (int c in new[] { 0, 1, 2 })
                foreach (int b in new[] { 1, 2, 4 })
                    foreach (int q in new[] { 1, 2, 4 })
                        points.Add(new ModelPoint(c, s, b, q, latencyFloorUs + 6 - 2 * c + b + q + s, 1e5 * b * q * (1 + c)));
        var model = new PerformanceModel
        {
            Transport = "tcp",
            Distance = "same-host",
            RecordSize = recordSize,
            Machine = new MachineDescription("test", 2, 1L << 30, "Linux"),
            Measured = new MeasurementInfo("2026-11-23", "synthetic", "test", 1, 0),
            Space = new ConfigurationSpace(2, 1, 2, 4, 4),
            Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = points },
        };
        string path = Path.Combine(_dir, $"tcp-{recordSize}-{latencyFloorUs}.json");
        model.Save(path);
        return path;
    }

    // What the device keeps of a configuration: its threads, with at least its window.
    private static CacheConfig Widened(CacheConfig config) => config with
    {
        BatchSize = Math.Max(config.BatchSize, RemoteCacheDevice.DeviceWindow.BatchSize),
        QueueDepth = Math.Max(config.QueueDepth, RemoteCacheDevice.DeviceWindow.QueueDepth),
    };

    private RemoteCacheClient Open(string modelPath) => RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions
    {
        RegionsPerServer = 2, Exclusive = true, SloModelPath = modelPath, Name = "device slo",
    });

    [Fact]
    public void TakesTheCheapestConfigurationPredictedToMeetTheDefaultSlo()
    {
        string path = Model(512, latencyFloorUs: 0);
        var expected = new SloPlanner(PerformanceModel.Load(path)).Plan(RemoteCacheDevice.DefaultSlo);
        Assert.True(expected.Found);
        using var device = new RemoteCacheDevice(Open(path), ownsCache: true);
        Assert.Equal(Widened(expected.Config!.Value), device.Cache.Config);
        Assert.NotEqual(CacheConfig.OneSided, device.Cache.Config);
    }

    // Issue 13, item 4: the device's default suits FASTER's reads, and a configuration the caller chose is kept.
    [Fact]
    public void WithoutAModelOrAConfigurationTheDeviceGoesOneSided()
    {
        using var device = new RemoteCacheDevice(RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions
        {
            RegionsPerServer = 2, Exclusive = true, Name = "device default",
        }), ownsCache: true);
        Assert.Equal(CacheConfig.OneSided, device.Cache.Config);
    }

    [Fact]
    public async Task TheThreadsOfAConfigurationTheCallerGaveAreKeptItsWindowWidened()
    {
        var chosen = new CacheConfig(1, 1, 4, 2);
        Assert.NotEqual(CacheConfig.OneSided, chosen);
        using var device = new RemoteCacheDevice(RemoteCacheClient.Open(_server.Endpoints, new RemoteCacheOptions
        {
            RegionsPerServer = 2, Exclusive = true, Config = chosen, SloModelPath = Model(512, latencyFloorUs: 0), Name = "device chosen",
        }), ownsCache: true);
        Assert.Equal(new CacheConfig(1, 1, RemoteCacheDevice.DeviceWindow.BatchSize, RemoteCacheDevice.DeviceWindow.QueueDepth), device.Cache.Config);
        // Later configurations keep the window too (the manager's, a retune's): the threads change, the window stays.
        await device.Cache.ReconfigureAsync(new CacheConfig(0, 2, 1, 1));
        Assert.Equal(Widened(new CacheConfig(0, 2, 1, 1)), device.Cache.Config);
        var wider = new CacheConfig(0, 1, 64, 16);
        await device.Cache.ReconfigureAsync(wider);
        Assert.Equal(wider, device.Cache.Config);
    }

    [Fact]
    public void TakesTheFastestWhenNothingMeetsIt()
    {
        string path = Model(512, latencyFloorUs: 50);  // every read predicted slower than 10 µs
        var sink = new FakeLogCollector();
        using var loggers = LoggerFactory.Create(b => b.AddProvider(new FakeLoggerProvider(sink)));
        using var device = new RemoteCacheDevice(Open(path), ownsCache: true, logger: loggers.CreateLogger("device"));
        var fastest = new CacheConfig(2, 1, 1, 1);  // the lowest predicted latency
        Assert.Equal(Widened(fastest), device.Cache.Config);
        var notMet = Assert.Single(sink.GetSnapshot(), r => r.Id.Id == 104);
        Assert.Equal(LogLevel.Warning, notMet.Level);
        var fields = Fields(notMet);
        Assert.Equal(RemoteCacheDevice.DefaultSlo.ToString(), fields["Slo"]);
        Assert.Equal(fastest.ToString(), fields["Config"]);
        Assert.Equal("device slo", fields["CacheName"]);
        Assert.True(double.Parse((string)fields["MeanUs"]!, System.Globalization.CultureInfo.InvariantCulture) > 10,
                    $"predicted mean {fields["MeanUs"]} µs meets the 10 µs SLO");
        Assert.Single(sink.GetSnapshot(), r => r.Id.Id == 100);  // and the switch to it
    }

    [Fact]
    public void RefusesAModelOfAnotherRecordSize()
    {
        string path = Model(8, latencyFloorUs: 0);
        var e = Assert.Throws<ArgumentException>(() => new RemoteCacheDevice(Open(path), ownsCache: true));
        Assert.Contains("8 B records", e.Message);
        Assert.Contains("--record-size 512", e.Message);
    }
}

using System;
using System.Collections.Generic;
using System.IO;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Tests.Slo;

public sealed class PerformanceModelTests
{
    internal static PerformanceModel Small(List<ModelPoint>? reads = null) => new()
    {
        Transport = "shm",
        Distance = "same-host",
        RecordSize = 8,
        Machine = new MachineDescription("test cpu", 2, 24L << 30, "Linux") { Note = "synthetic" },
        Measured = new MeasurementInfo("2026-11-23", "synthetic", "test", 1, 0.2),
        Space = new ConfigurationSpace(2, 0, 2, 512, 64),
        Operations = new Dictionary<SloOperation, List<ModelPoint>>
        {
            [SloOperation.Read] = reads ?? new List<ModelPoint>
            {
                new(0, 0, 1, 1, 0.5, 2e6) { P50Us = 0.4, P99Us = 2 },
                new(0, 1, 1, 1, 3, 3e5),
                new(0, 1, 2, 1, 3.5, 5e5),
            },
        },
    };

    [Fact]
    public void RoundTripsThroughJson()
    {
        var model = Small();
        string json = model.ToJson();
        Assert.Contains("\"format\": \"remotecache-slo-model\"", json);
        Assert.Contains("\"read\": [", json);
        var back = PerformanceModel.Parse(json);
        Assert.Equal(model.Points(SloOperation.Read), back.Points(SloOperation.Read));
        Assert.Equal(model.Space, back.Space);
        Assert.Equal(model.Machine, back.Machine);
        Assert.Empty(back.Points(SloOperation.Write));
        string path = Path.Combine(Path.GetTempPath(), $"model-{Guid.NewGuid():N}.json");
        try
        {
            model.Save(path);
            Assert.Equal(json, PerformanceModel.Load(path).ToJson());
        }
        finally
        {
            File.Delete(path);
        }
    }

    [Theory]
    [InlineData("\"version\": 1", "\"version\": 2", "version 2 is not supported")]
    [InlineData("\"format\": \"remotecache-slo-model\"", "\"format\": \"other\"", "format is 'other'")]
    [InlineData("\"c\": 0,\n        \"s\": 1,\n        \"b\": 2,", "\"c\": 0,\n        \"s\": 1,\n        \"b\": 3,", "not on the grid")]
    [InlineData("\"s\": 0,\n        \"b\": 1,\n        \"q\": 1,\n        \"meanUs\": 0.5", "\"s\": 0,\n        \"b\": 1,\n        \"q\": 1,\n        \"meanUs\": -1", "must be positive")]
    [InlineData("\"maxBatch\": 512", "\"maxBatch\": 1", "outside the space")]
    [InlineData("\"read\": [", "\"reed\": [", "not a RemoteCache SLO model")]
    [InlineData("\"maxBatch\": 512", "\"maxBatch\": 1024", "maxBatch 1024 must be 1..512 for 8 B records")]
    [InlineData("\"maxQueueDepth\": 64", "\"maxQueueDepth\": 65", "maxQueueDepth 65 must be 1..64 (the transports' limit")]
    [InlineData("\"maxClientThreads\": 2", "\"maxClientThreads\": 65", "maxClientThreads 65 must be 0..64")]
    [InlineData("\"maxServerThreads\": 2", "\"maxServerThreads\": 257", "maxServerThreads 257 must be")]
    public void RefusesWhatIsWrongAndSaysWhat(string from, string to, string message)
    {
        string json = Small().ToJson();
        Assert.Contains(from, json);
        var e = Assert.Throws<FormatException>(() => PerformanceModel.Parse(json.Replace(from, to)));
        Assert.Contains(message, e.Message);
    }

    [Fact]
    public void OneSidedConfigurationsAreNotBatched()
    {
        var space = new ConfigurationSpace(2, 0, 2, 512, 64);
        Assert.True(space.Contains(new CacheConfig(0, 0, 1, 8)));
        Assert.False(space.Contains(new CacheConfig(0, 0, 2, 8)));
        Assert.True(space.Contains(new CacheConfig(2, 2, 512, 64)));
        Assert.False(new ConfigurationSpace(2, 1, 2, 512, 64).Contains(new CacheConfig(0, 0, 1, 1)));
        Assert.Equal(512, ConfigurationSpace.BatchLimit(8));
        Assert.Equal(64, ConfigurationSpace.BatchLimit(64));
        Assert.Equal(1, ConfigurationSpace.BatchLimit(4096));
        Assert.Equal(2, ConfigurationSpace.BatchLimit(3000));
    }
}

using System;
using System.IO;
using System.Linq;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Cli.Tests;

/// <summary>The models in models/ (measured by scripts/slo_models.sh) load, and each is what its name says.</summary>
public sealed class ShippedModelTests
{
    private static string ModelsDirectory()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
            if (File.Exists(Path.Combine(dir.FullName, "RemoteCache.sln")))
                return Path.Combine(dir.FullName, "models");
        throw new DirectoryNotFoundException($"no RemoteCache.sln above {AppContext.BaseDirectory}");
    }

    [Theory]
    [InlineData("shm", 8)]
    [InlineData("shm", 64)]
    [InlineData("shm", 512)]
    [InlineData("shm", 4096)]
    [InlineData("tcp", 8)]
    [InlineData("tcp", 64)]
    [InlineData("tcp", 512)]
    [InlineData("tcp", 4096)]
    public void ShippedModelLoads(string transport, int recordSize)
    {
        var model = PerformanceModel.Load(Path.Combine(ModelsDirectory(), $"{transport}-{recordSize}.json"));
        Assert.Equal(transport, model.Transport);
        Assert.Equal(recordSize, model.RecordSize);
        Assert.Equal("same-host", model.Distance);
        Assert.Equal("remotecache-bench", model.Measured.Tool);
        Assert.StartsWith($"remotecache slo model --transport {transport} --record-size {recordSize} --out models/{transport}-{recordSize}.json", model.Measured.Command);
        Assert.Equal(transport == "tcp" ? 1 : 0, model.Space.MinServerThreads);
        Assert.Equal(Math.Min(ConfigurationSpace.BatchLimit(recordSize), CacheConfig.MaxBatchSize), model.Space.MaxBatch);
        foreach (var op in new[] { SloOperation.Read, SloOperation.Write })
        {
            var points = model.Points(op);
            Assert.NotEmpty(points);
            // The cheapest configuration is always measured first.
            Assert.Equal(new CacheConfig(0, model.Space.MinServerThreads, 1, 1), points[0].Config);
            Assert.All(points, p => Assert.True(p.P50Us > 0 && p.P99Us >= p.P50Us));
        }
    }
}

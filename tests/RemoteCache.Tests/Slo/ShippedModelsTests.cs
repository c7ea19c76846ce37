using System;
using System.IO;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Tests.Slo;

/// <summary>The SLO models the package ships, beside the application.</summary>
public sealed class ShippedModelsTests
{
    [Fact]
    public void EachShippedModelLoadsAndAMissingOneNamesThoseThatAre()
    {
        Assert.Contains("shm-512.json", RemoteCacheSloModels.Files);
        Assert.Contains("tcp-8.json", RemoteCacheSloModels.Files);
        foreach (string file in RemoteCacheSloModels.Files)
        {
            string[] parts = Path.GetFileNameWithoutExtension(file).Split('-');
            var model = PerformanceModel.Load(RemoteCacheSloModels.PathFor(parts[0], int.Parse(parts[1], System.Globalization.CultureInfo.InvariantCulture)));
            Assert.Equal(parts[0], model.Transport);
        }
        var missing = Assert.Throws<FileNotFoundException>(() => RemoteCacheSloModels.PathFor("verbs", 512));
        Assert.Contains("shm-512.json", missing.Message, StringComparison.Ordinal);
        Assert.Contains("remotecache slo model --transport verbs --record-size 512", missing.Message, StringComparison.Ordinal);
        Assert.Throws<ArgumentException>(() => RemoteCacheSloModels.PathFor("../etc", 512));
        Assert.Throws<ArgumentOutOfRangeException>(() => RemoteCacheSloModels.PathFor("shm", 0));
    }
}

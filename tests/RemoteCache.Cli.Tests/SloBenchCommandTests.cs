using System.Text.Json;
using Xunit;

namespace RemoteCache.Cli.Tests;

public sealed class SloBenchCommandTests
{
    [Fact]
    public void TimesTheSearchAndPrintsJson()
    {
        // A small model (c, s ≤ 8) and few queries: the command's shape, not its figures.
        var (exit, output, error) = SloSearchCommandTests.Run("slo", "bench", "--threads", "8", "--queries", "300", "--figure10", "5", "--json");
        Assert.Equal(0, exit);
        Assert.Equal("", error);
        using var json = JsonDocument.Parse(output);
        var root = json.RootElement;
        Assert.True(root.GetProperty("precompute").GetProperty("seconds").GetDouble() > 0);
        Assert.Equal(300, root.GetProperty("queries").GetInt32());
        var times = root.GetProperty("times");
        Assert.Equal(6, times.GetArrayLength());
        foreach (var row in times.EnumerateArray())
            Assert.True(row.GetProperty("p99Us").GetDouble() >= row.GetProperty("p50Us").GetDouble());
        var model = root.GetProperty("model");
        Assert.Equal(512, model.GetProperty("maxBatch").GetInt32());
        Assert.Equal(model.GetProperty("spaceConfigurations").GetInt64(), model.GetProperty("predictedConfigurations").GetInt64());  // 8 is on the grid
        var figure10 = root.GetProperty("figure10");
        Assert.Equal(5, figure10.GetProperty("queries").GetInt32());
        Assert.Equal(figure10.GetProperty("met").GetInt32(),
            figure10.GetProperty("same").GetInt32() + figure10.GetProperty("missed").GetInt32() + figure10.GetProperty("dearer").GetInt32());
    }

    [Fact]
    public void PrintsText()
    {
        var (exit, output, _) = SloSearchCommandTests.Run("slo", "bench", "--threads", "4", "--queries", "100");
        Assert.Equal(0, exit);
        Assert.Contains("precompute:", output);
        Assert.Contains("p99", output);
    }

    [Fact]
    public void RefusesBadArguments()
    {
        var (exit, _, error) = SloSearchCommandTests.Run("slo", "bench", "--queries", "0");
        Assert.Equal(2, exit);
        Assert.Contains("--queries 0", error);
    }
}

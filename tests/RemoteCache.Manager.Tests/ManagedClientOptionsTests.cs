using System;
using System.Collections.Generic;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>RemoteCacheManagerOptions: one set of rules, applied to code and to bound configuration alike.</summary>
public sealed class ManagedClientOptionsTests
{
    private static IConfiguration Configuration(Dictionary<string, string?> values) => new ConfigurationBuilder().AddInMemoryCollection(values).Build();

    [Fact]
    public void AddRemoteCacheManagerBindsConfigurationAndRegistersOneClient()
    {
        var services = new ServiceCollection();
        services.AddLogging();
        services.AddRemoteCacheManager(Configuration(new()
        {
            ["Address"] = "https://manager.example:7400",
            ["ApiKey"] = "key-0123456789",
            ["CallTimeout"] = "00:00:07",
            ["Cache:OperationTimeout"] = "00:00:03",
            ["Cache:Lanes"] = "2",
            ["ReplaceServers"] = "false",
            ["MoveMaxMibPerSecond"] = "512",
            ["MoveBatchBytes"] = "0",
            ["MapMovedRegionsAhead"] = "true",
        }));
        using var provider = services.BuildServiceProvider();
        var options = provider.GetRequiredService<IOptions<RemoteCacheManagerOptions>>().Value;
        Assert.Equal(new Uri("https://manager.example:7400"), options.Address);
        Assert.Equal("key-0123456789", options.ApiKey);
        Assert.Equal(TimeSpan.FromSeconds(7), options.CallTimeout);
        Assert.Equal(TimeSpan.FromSeconds(3), options.Cache.OperationTimeout);
        Assert.Equal(2, options.Cache.Lanes);
        Assert.False(options.ReplaceServers);
        Assert.Equal(512, options.MoveMaxMibPerSecond);
        Assert.Equal(0, options.MoveBatchBytes);
        Assert.True(options.MapMovedRegionsAhead);
        var client = provider.GetRequiredService<RemoteCacheManagerClient>();
        Assert.Same(client, provider.GetRequiredService<RemoteCacheManagerClient>());
        Assert.Equal(options.Address, client.Address);
        Assert.NotNull(options.Cache.LoggerFactory);  // the container's
    }

    [Theory]
    [InlineData("Address", "ftp://manager:7400", "Address")]
    [InlineData("ApiKey", "has space", "ApiKey")]
    [InlineData("CallTimeout", "00:00:00", "CallTimeout")]
    [InlineData("RetryLimit", "00:00:00.010", "RetryLimit")]
    [InlineData("MoveMaxMibPerSecond", "-1", "MoveMaxMibPerSecond")]
    [InlineData("MoveBatchBytes", "-1", "MoveBatchBytes")]
    public void BadOptionsAreRefusedNamingTheOption(string key, string value, string named)
    {
        var services = new ServiceCollection();
        services.AddRemoteCacheManager(Configuration(new() { [key] = value }));
        using var provider = services.BuildServiceProvider();
        var refused = Assert.Throws<OptionsValidationException>(() => provider.GetRequiredService<IOptions<RemoteCacheManagerOptions>>().Value);
        Assert.Contains(named, refused.Message);
        var options = new RemoteCacheManagerOptions();
        Configuration(new() { [key] = value }).Bind(options);
        var direct = Assert.Throws<ArgumentException>(() => new RemoteCacheManagerClient(options));
        Assert.Contains(named, direct.Message);
    }

    [Fact]
    public async System.Threading.Tasks.Task ACreateRequestIsCheckedBeforeAnythingIsSent()
    {
        await using var client = new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Address = new Uri("http://127.0.0.1:1"), ApiKey = "k" });
        var noCapacity = await Assert.ThrowsAsync<ArgumentException>(() => client.CreateAsync(new ManagedCacheRequest { Capacity = 0 }));
        Assert.Contains("Capacity 0", noCapacity.Message);
        var background = await Assert.ThrowsAsync<ArgumentException>(() => client.CreateAsync(new ManagedCacheRequest { Capacity = 1, PopulateInBackground = true }));
        Assert.Contains("PopulateFrom", background.Message);
    }

    [Theory]
    [InlineData(512, 4L << 30, 1.0, 512)]        // set: that pace, whatever the deadline
    [InlineData(0, 4L << 30, 1.0, 0)]            // 0: unpaced
    [InlineData(null, 4L << 30, null, 1024)]     // automatic without a deadline (a reshape): Redy's 1 GiB/s
    [InlineData(null, 4L << 30, 30.0, 1024)]     // 4 GiB by half of 30 s needs 273 MiB/s: the least pace
    [InlineData(null, 30L << 30, 30.0, 2048)]    // 30 GiB by 15 s: 2 GiB/s
    [InlineData(null, 1L << 30, 0.0, 0)]         // the deadline has come: unpaced
    public void TheAutomaticMovePaceEndsTheMoveByHalfTheTimeLeftAndIsAtLeastRedysRate(int? configured, long bytesLeft, double? secondsLeft, int expected)
    {
        var left = secondsLeft is { } s ? TimeSpan.FromSeconds(s) : (TimeSpan?)null;
        Assert.Equal(expected, ManagedCache.MovePaceMibPerSecond(configured, bytesLeft, left));
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
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

    [Fact]
    public void SeveralAddressesBindFromConfigurationAndAddressIsTheFirstOfThem()
    {
        var services = new ServiceCollection();
        services.AddRemoteCacheManager(Configuration(new()
        {
            ["Addresses:0"] = "http://m1:7400",
            ["Addresses:1"] = "https://m2:7400",
            ["ApiKey"] = "key-0123456789",
        }));
        using var provider = services.BuildServiceProvider();
        var options = provider.GetRequiredService<IOptions<RemoteCacheManagerOptions>>().Value;
        Assert.Equal(new[] { new Uri("http://m1:7400"), new Uri("https://m2:7400") }, options.Addresses);
        Assert.Equal(new Uri("http://m1:7400"), options.Address);
        var client = provider.GetRequiredService<RemoteCacheManagerClient>();
        Assert.Equal(options.Addresses, client.Addresses);
        Assert.Equal(options.Address, client.Address);

        // "Address" alone, as configurations were written for one manager: the only address.
        var one = new RemoteCacheManagerOptions();
        Configuration(new() { ["Address"] = "http://m9:7400" }).Bind(one);
        Assert.Equal(new[] { new Uri("http://m9:7400") }, one.Addresses);
        // Both: "Address" first, then "Addresses".
        var both = new RemoteCacheManagerOptions();
        Configuration(new() { ["Address"] = "http://m0:7400", ["Addresses:0"] = "http://m1:7400" }).Bind(both);
        Assert.Equal(new[] { new Uri("http://m0:7400"), new Uri("http://m1:7400") }, both.Addresses);
        // Neither: the default, and setting Address in code replaces the list.
        var code = new RemoteCacheManagerOptions();
        Assert.Empty(code.Addresses);
        Assert.Equal(RemoteCacheManagerOptions.DefaultAddress, code.Address);
        code.Addresses.Add(new Uri("http://m1:7400"));
        code.Addresses.Add(new Uri("http://m2:7400"));
        code.Address = new Uri("http://m1:7400");  // what it is already (binding writes back what it read): unchanged
        Assert.Equal(2, code.Addresses.Count);
        code.Address = new Uri("http://m3:7400");
        Assert.Equal(new[] { new Uri("http://m3:7400") }, code.Addresses);
        // Configuration without an address keeps those set in code.
        Configuration(new() { ["ApiKey"] = "key-0123456789" }).Bind(code);
        Assert.Equal(new[] { new Uri("http://m3:7400") }, code.Addresses);
    }

    [Fact]
    public void BadAddressListsAreRefusedNamingTheEntry()
    {
        static string Refusal(params string[] addresses)
        {
            var options = new RemoteCacheManagerOptions();
            foreach (string a in addresses)
                options.Addresses.Add(new Uri(a, UriKind.RelativeOrAbsolute));
            return Assert.Throws<ArgumentException>(options.Validate).Message;
        }
        Assert.Contains("Addresses[1] is 'ftp://m2:7400/'", Refusal("http://m1:7400", "ftp://m2:7400"));
        Assert.Contains("Address is '/manager'", Refusal("/manager"));
        Assert.Contains("names http://m1:7400/ twice (at 0 and 2)", Refusal("http://m1:7400", "http://m2:7400", "HTTP://M1:7400/"));
        Assert.Contains("names https://m1/ twice", Refusal("https://m1:443", "https://m1"));
        var many = new string[RemoteCacheManagerOptions.MaxAddresses + 1];
        for (int i = 0; i < many.Length; i++)
            many[i] = $"http://m{i}:7400";
        Assert.Contains($"Addresses has {many.Length} addresses; at most {RemoteCacheManagerOptions.MaxAddresses}", Refusal(many));
        Assert.Contains("Addresses is null", Assert.Throws<ArgumentException>(new RemoteCacheManagerOptions { Addresses = null! }.Validate).Message);
        new RemoteCacheManagerOptions { Addresses = many[..RemoteCacheManagerOptions.MaxAddresses].Select(a => new Uri(a)).ToList() }.Validate();  // the bound itself is fine
    }

    [Fact]
    public void AnAddressListFromTheEnvironmentIsSeparatedByCommas()
    {
        Assert.Equal(new[] { new Uri("http://m1:7400"), new Uri("https://m2:7400") }, RemoteCacheManagerOptions.ParseAddresses(" http://m1:7400 ,https://m2:7400"));
        Assert.Equal(new[] { new Uri("http://m1:7400") }, RemoteCacheManagerOptions.ParseAddresses("http://m1:7400"));
        Assert.Contains("'m2' is not a manager address", Assert.Throws<FormatException>(() => RemoteCacheManagerOptions.ParseAddresses("http://m1:7400,m2")).Message);
        Assert.Contains("'' is not a manager address", Assert.Throws<FormatException>(() => RemoteCacheManagerOptions.ParseAddresses("http://m1:7400,")).Message);
    }

    [Theory]
    [InlineData("Address", "ftp://manager:7400", "Address")]
    [InlineData("Addresses:0", "ftp://manager:7400", "Address")]
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

    [Theory]
    [InlineData(60, 30, 30)]   // half of the lease left, at most CallTimeout
    [InlineData(20, 30, 10)]   // half of the lease left: a renewal stuck on a vanished replica leaves time for another
    [InlineData(1, 30, 2)]     // near the end: still a fair chance
    [InlineData(-5, 30, 2)]    // past the end as the client saw it: renewals go on until the manager says it is gone
    [InlineData(10, 1, 1)]     // never past CallTimeout
    public void ARenewalMayTakeHalfTheLeaseLeftWithinBounds(double leftSeconds, double callTimeoutSeconds, double expectedSeconds)
    {
        Assert.Equal(TimeSpan.FromSeconds(expectedSeconds), ManagedCache.RenewTimeout(TimeSpan.FromSeconds(leftSeconds), TimeSpan.FromSeconds(callTimeoutSeconds)));
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>Options: one set of rules with messages that name the option, and binding through dependency injection.</summary>
public sealed class OptionsTests
{
    private static readonly string[] s_oneEndpoint = { "tcp:127.0.0.1:9" };

    public static IEnumerable<object[]> BadOptions() => new[]
    {
        Bad(nameof(RemoteCacheOptions.RegionsPerServer), o => o.RegionsPerServer = 0),
        Bad(nameof(RemoteCacheOptions.RegionsPerServer), o => o.RegionsPerServer = RemoteCacheOptions.MaxRegionsPerServer + 1),
        Bad(nameof(RemoteCacheOptions.SessionCapacity), o => o.SessionCapacity = 0),
        Bad(nameof(RemoteCacheOptions.SessionCapacity), o => o.SessionCapacity = RemoteCacheOptions.MaxSessionCapacity + 1),
        Bad(nameof(RemoteCacheOptions.OperationTimeout), o => o.OperationTimeout = TimeSpan.Zero),
        Bad(nameof(RemoteCacheOptions.OperationTimeout), o => o.OperationTimeout = TimeSpan.FromDays(60)),
        Bad(nameof(RemoteCacheOptions.ConnectTimeout), o => o.ConnectTimeout = TimeSpan.FromSeconds(-1)),
        Bad(nameof(RemoteCacheOptions.Lanes), o => o.Lanes = 0),
        Bad(nameof(RemoteCacheOptions.Lanes), o => o.Lanes = RemoteCacheOptions.MaxLanes + 1),
        Bad(nameof(RemoteCacheOptions.Token), o => o.Token = new string('x', RemoteCacheOptions.MaxTokenBytes + 1)),
        Bad(nameof(RemoteCacheOptions.Capabilities), o => o.Capabilities = new[] { "a", "b" }),
        Bad(nameof(RemoteCacheOptions.Capabilities), o => o.Capabilities = new[] { "" }),
        Bad(nameof(RemoteCacheOptions.ReconnectDelay), o => o.ReconnectDelay = TimeSpan.Zero),
        Bad(nameof(RemoteCacheOptions.ReconnectDelay), o => o.ReconnectDelay = RemoteCacheOptions.DefaultReconnectMaxDelay + TimeSpan.FromSeconds(1)),
        Bad(nameof(RemoteCacheOptions.ReconnectMaxDelay), o => o.ReconnectMaxDelay = TimeSpan.FromMilliseconds(-1)),
        Bad(nameof(RemoteCacheOptions.ReconnectMaxDelay), o => o.ReconnectMaxDelay = RemoteCacheOptions.MaxReconnectDelay + TimeSpan.FromSeconds(1)),
        Bad(nameof(RemoteCacheOptions.ReconnectMaxDelay), o => o.ReconnectMaxDelay = TimeSpan.MaxValue),
        Bad(nameof(RemoteCacheOptions.ReconnectMaxDelay), o => o.ReconnectMaxDelay = TimeSpan.MinValue),
        Bad(nameof(RemoteCacheOptions.ReconnectDelay), o => o.ReconnectDelay = TimeSpan.MinValue),
        Bad(nameof(RemoteCacheOptions.ReconnectDelay), o => (o.ReconnectMaxDelay, o.ReconnectDelay) = (RemoteCacheOptions.MaxReconnectDelay, TimeSpan.MaxValue)),
        Bad(nameof(RemoteCacheOptions.Config), o => o.Config = new CacheConfig(0, 1, 0, 1)),
        Bad(nameof(RemoteCacheOptions.Config), o => o.Config = new CacheConfig(-1, 1, 1, 1)),
        Bad(nameof(RemoteCacheOptions.Config), o => o.Config = new CacheConfig(0, 1, 1, CacheConfig.MaxQueueDepth + 1)),
    };

    private static object[] Bad(string option, Action<RemoteCacheOptions> spoil) => new object[] { option, spoil };

    [Theory]
    [MemberData(nameof(BadOptions))]
    public void OpenRefusesABadOptionNamingIt(string option, Action<RemoteCacheOptions> spoil)
    {
        var options = new RemoteCacheOptions { Name = "bad options" };
        spoil(options);
        var e = Assert.ThrowsAny<ArgumentException>(() => RemoteCacheClient.Open(s_oneEndpoint, options));
        Assert.Equal(option, e.ParamName);
        Assert.Contains($"RemoteCacheOptions.{option}", e.Message, StringComparison.Ordinal);
        Assert.StartsWith("bad options: ", e.Message, StringComparison.Ordinal);
    }

    [Theory]
    [MemberData(nameof(BadOptions))]
    public void DependencyInjectionRefusesTheSameOptionsWithTheSameMessage(string option, Action<RemoteCacheOptions> spoil)
    {
        var services = new ServiceCollection();
        services.AddRemoteCache(o =>
        {
            o.Endpoints.Add(s_oneEndpoint[0]);
            o.Cache.Name = "bad options";
            spoil(o.Cache);
        });
        using var provider = services.BuildServiceProvider();
        var e = Assert.Throws<OptionsValidationException>(() => provider.GetRequiredService<IOptions<RemoteCacheClientOptions>>().Value);
        Assert.Contains($"RemoteCacheOptions.{option}", e.Message, StringComparison.Ordinal);
        // Hosts validate at start (ValidateOnStart): the same failure, before anything is resolved.
        Assert.Throws<OptionsValidationException>(() => provider.GetRequiredService<IStartupValidator>().Validate());
    }

    [Fact]
    public void EndpointsAreRequired()
    {
        var e = Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(Array.Empty<string>(), new RemoteCacheOptions()));
        Assert.Equal("endpoints", e.ParamName);
        e = Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(new[] { " " }, new RemoteCacheOptions()));
        Assert.Contains("endpoint 0 is empty", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ServerOptionsAreCheckedInOnePlace()
    {
        void Refused(string option, Action<RemoteCacheServerOptions> spoil)
        {
            var options = new RemoteCacheServerOptions { Listen = { "tcp:127.0.0.1:0" } };
            spoil(options);
            var e = Assert.ThrowsAny<ArgumentException>(() => RemoteCacheServer.Start(options));
            Assert.Equal(option, e.ParamName);
            Assert.Contains($"RemoteCacheServerOptions.{option}", e.Message, StringComparison.Ordinal);
        }
        Refused(nameof(RemoteCacheServerOptions.Listen), o => o.Listen.Clear());
        Refused(nameof(RemoteCacheServerOptions.RegionSize), o => o.RegionSize = 1000);
        Refused(nameof(RemoteCacheServerOptions.RegionSize), o => o.RegionSize = 0);
        Refused(nameof(RemoteCacheServerOptions.MemoryLimit), o => { o.RegionSize = MiB; o.MemoryLimit = MiB / 2; });
        Refused(nameof(RemoteCacheServerOptions.MaxThreads), o => o.MaxThreads = -1);
        Refused(nameof(RemoteCacheServerOptions.AdmissionKey), o => o.AdmissionKey = new byte[RemoteCacheCapability.MinAdmissionKeyBytes - 1]);
        Refused(nameof(RemoteCacheServerOptions.ServerId), o => o.ServerId = "");
    }

    [Fact]
    public async Task AddRemoteCacheBindsEveryOptionFromConfiguration()
    {
        using var server = StartTcpServer();
        var configuration = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["RemoteCache:Endpoints:0"] = server.Endpoints[0],
            ["RemoteCache:Cache:Name"] = "from configuration",
            ["RemoteCache:Cache:CacheId"] = "4242",
            ["RemoteCache:Cache:Token"] = "shared secret",
            ["RemoteCache:Cache:RegionsPerServer"] = "3",
            ["RemoteCache:Cache:SessionCapacity"] = "512",
            ["RemoteCache:Cache:OperationTimeout"] = "00:00:07",
            ["RemoteCache:Cache:ConnectTimeout"] = "00:00:02",
            ["RemoteCache:Cache:Lanes"] = "2",
            ["RemoteCache:Cache:Reconnect"] = "true",
            ["RemoteCache:Cache:ReconnectDelay"] = "00:00:00.250",
            ["RemoteCache:Cache:ReconnectMaxDelay"] = "00:00:03",
            ["RemoteCache:Cache:Config:ClientThreads"] = "0",
            ["RemoteCache:Cache:Config:ServerThreads"] = "1",
            ["RemoteCache:Cache:Config:BatchSize"] = "8",
            ["RemoteCache:Cache:Config:QueueDepth"] = "2",
        }).Build();
        var services = new ServiceCollection();
        services.AddRemoteCache(configuration.GetSection("RemoteCache"));
        await using var provider = services.BuildServiceProvider();
        provider.GetRequiredService<IStartupValidator>().Validate();

        var options = provider.GetRequiredService<IOptions<RemoteCacheClientOptions>>().Value;
        Assert.Equal(TimeSpan.FromSeconds(7), options.Cache.OperationTimeout);
        Assert.Equal(TimeSpan.FromSeconds(2), options.Cache.ConnectTimeout);
        Assert.Equal(512, options.Cache.SessionCapacity);
        Assert.Equal(2, options.Cache.Lanes);
        Assert.Equal("shared secret", options.Cache.Token);
        Assert.Equal(TimeSpan.FromMilliseconds(250), options.Cache.ReconnectDelay);
        Assert.Equal(TimeSpan.FromSeconds(3), options.Cache.ReconnectMaxDelay);

        var client = provider.GetRequiredService<RemoteCacheClient>();
        Assert.Same(client, provider.GetRequiredService<RemoteCacheClient>());
        Assert.Equal("from configuration", client.Name);
        Assert.Equal(4242ul, client.CacheId);
        Assert.Equal(3 * MiB, client.Capacity);
        Assert.Equal(new CacheConfig(0, 1, 8, 2), client.Config);
        await client.WriteAsync(0, new byte[] { 9 });

        // Another client with the same id and token shares the cache.
        var shared = new RemoteCacheOptions { CacheId = 4242, Token = "shared secret", RegionsPerServer = 3 };
        await using (var other = await RemoteCacheClient.OpenAsync(server.Endpoints, shared))
        {
            var back = new byte[1];
            await other.ReadAsync(0, back);
            Assert.Equal(9, back[0]);
        }
    }

    [Fact]
    public async Task NamedCachesAreKeyedServices()
    {
        using var server = StartTcpServer();
        var configuration = new ConfigurationBuilder().AddInMemoryCollection(new Dictionary<string, string?>
        {
            ["Caches:hot:Endpoints:0"] = server.Endpoints[0],
            ["Caches:hot:Cache:RegionsPerServer"] = "1",
            ["Caches:cold:Endpoints:0"] = server.Endpoints[0],
            ["Caches:cold:Cache:RegionsPerServer"] = "2",
        }).Build();
        var services = new ServiceCollection();
        services.AddRemoteCache("hot", configuration.GetSection("Caches:hot"));
        services.AddRemoteCache("cold", configuration.GetSection("Caches:cold"));
        await using var provider = services.BuildServiceProvider();
        var hot = provider.GetRequiredKeyedService<RemoteCacheClient>("hot");
        var cold = provider.GetRequiredKeyedService<RemoteCacheClient>("cold");
        Assert.Equal("hot", hot.Name);
        Assert.Equal("cold", cold.Name);
        Assert.Equal(MiB, hot.Capacity);
        Assert.Equal(2 * MiB, cold.Capacity);
        Assert.Equal(3 * MiB, server.MemoryInUse);
    }

    [Fact]
    public async Task TheContainerDisposesTheClient()
    {
        using var server = StartTcpServer();
        var services = new ServiceCollection();
        services.AddRemoteCache(o => o.Endpoints.Add(server.Endpoints[0]));
        RemoteCacheClient client;
        await using (var provider = services.BuildServiceProvider())
        {
            client = provider.GetRequiredService<RemoteCacheClient>();
            Assert.Equal(MiB, server.MemoryInUse);
        }
        Assert.Throws<ObjectDisposedException>(() => client.Config);
    }

    [Fact]
    public async Task TheWindowKeptIsBoundedAndOutlastsLaterConfigurations()
    {
        using var server = StartTcpServer();
        using var client = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions { Config = CacheConfig.LowLatency });
        Assert.Throws<ArgumentOutOfRangeException>(() => client.KeepWindowAtLeast(0, 1));
        Assert.Throws<ArgumentOutOfRangeException>(() => client.KeepWindowAtLeast(CacheConfig.MaxBatchSize + 1, 1));
        Assert.Throws<ArgumentOutOfRangeException>(() => client.KeepWindowAtLeast(1, CacheConfig.MaxQueueDepth + 1));
        Assert.Equal(CacheConfig.LowLatency, client.Config);
        client.KeepWindowAtLeast(16, 8);
        Assert.Equal(new CacheConfig(0, 1, 16, 8), client.Config);
        client.KeepWindowAtLeast(4, 12);  // the larger of each stays
        Assert.Equal(new CacheConfig(0, 1, 16, 12), client.Config);
        await client.ReconfigureAsync(new CacheConfig(0, 2, 1, 1));
        Assert.Equal(new CacheConfig(0, 2, 16, 12), client.Config);
    }

    [Fact]
    public void ReconfigureRefusesAnOutOfRangeConfiguration()
    {
        using var server = StartTcpServer();
        using var client = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions());
        var e = Assert.Throws<ArgumentException>(() => { _ = client.ReconfigureAsync(new CacheConfig(0, 1, CacheConfig.MaxBatchSize + 1, 1)); });
        Assert.Contains("BatchSize", e.Message, StringComparison.Ordinal);
        Assert.Equal(CacheConfig.HighThroughput, client.Config);
    }
}

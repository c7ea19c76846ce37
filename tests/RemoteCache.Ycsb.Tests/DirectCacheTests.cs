using System;
using System.Threading.Tasks;
using RemoteCache.Benchmarks.Ycsb;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>
/// --transport verbs: the remotecache device's cache on a server the tool starts and opens itself (the manager does
/// not place verbs caches). Verbs needs an RDMA device (tests/rdma-vm runs it); here the same path runs over tcp.
/// </summary>
public sealed class DirectCacheTests
{
    [Theory]
    [InlineData("--transport", "verbs")]
    [InlineData("--verbs-address", "10.0.2.15")]
    [InlineData("--transport", "tcp", "--verbs-address", "10.0.2.15")]
    [InlineData("--transport", "verbs", "--verbs-address", "10.0.2.15", "--dynamics")]
    [InlineData("--transport", "rdma")]
    public void VerbsFlagsAreRefusedWithoutTheirPartner(params string[] args)
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(args));
        Assert.Contains("verbs", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void VerbsWithAnAddressIsAccepted()
    {
        var o = YcsbOptions.Parse(new[] { "--transport", "verbs", "--verbs-address", "10.0.2.15" });
        Assert.Equal(("verbs", "10.0.2.15"), (o.Transport, o.VerbsAddress));
    }

    [Fact]
    public async Task ADirectCacheHoldsAtLeastTheBytesAskedAndServesThem()
    {
        const long bytes = 40L << 20;  // not a whole number of regions: rounded up
        using var direct = DirectCache.Open("tcp:127.0.0.1:0", bytes);
        await using var client = direct.Client;
        Assert.StartsWith("tcp:127.0.0.1:", direct.Endpoint, StringComparison.Ordinal);
        Assert.InRange(client.Capacity, bytes, 2 * bytes);
        var written = new byte[512];
        Random.Shared.NextBytes(written);
        await client.WriteAsync(client.Capacity - written.Length, written);
        var read = new byte[written.Length];
        await client.ReadAsync(client.Capacity - read.Length, read);
        Assert.Equal(written, read);

        // Capability only: a client without one is refused, naming why.
        var refused = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { direct.Endpoint }, new RemoteCacheOptions()));
        Assert.Equal(RemoteCacheStatus.Auth, refused.Status);
    }
}

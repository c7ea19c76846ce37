using System.Collections.Generic;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Store;
using Xunit;

namespace RemoteCache.Manager.Tests;

// Which of the source's endpoints a target pulls a region from (Replacements.PullEndpoint).
public sealed class PullEndpointTests
{
    private static ServerRecord Server(string id, params string[] transports)
    {
        var endpoints = new Dictionary<string, string>();
        foreach (var t in transports)
            endpoints[t] = t == "shm" ? $"shm:/run/{id}.sock" : $"{t}:{id}:7000";
        return new ServerRecord(id, endpoints, "vm", false, "static");
    }

    [Theory]
    // RDMA READ wherever both servers have verbs, whatever the cache's transport...
    [InlineData("tcp", "tcp verbs", "tcp verbs", "verbs:src:7000")]
    [InlineData("verbs", "tcp verbs", "tcp verbs", "verbs:src:7000")]
    // ...but a shm cache's servers share a host: a memory copy.
    [InlineData("shm", "tcp shm verbs", "tcp shm verbs", "shm:/run/src.sock")]
    [InlineData("shm", "tcp verbs", "tcp shm verbs", "verbs:src:7000")]
    // Verbs on one side only: the cache's transport if both have it, else tcp.
    [InlineData("tcp", "tcp verbs", "tcp", "tcp:src:7000")]
    [InlineData("shm", "tcp shm", "tcp", "tcp:src:7000")]
    public void VerbsWhenBothHaveItElseTheCachesTransportElseTcp(string cacheTransport, string source, string target, string expected)
    {
        var pulled = Replacements.PullEndpoint(Server("src", source.Split(' ')), Server("dst", target.Split(' ')), cacheTransport);
        Assert.Equal(expected, pulled);
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Admin;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.Cluster.ClusterInvariants;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>The checkers on made-up states: each finds what it is for (a checker that never fires would pass every scenario).</summary>
public sealed class ClusterInvariantsTests
{
    private static readonly DateTimeOffset Expires = new(2030, 1, 1, 0, 0, 0, 123, TimeSpan.Zero);

    private static Cache Cache(ulong id, params string[] servers)
    {
        var cache = new Cache { CacheId = id, Token = "t" + id, Lease = new Lease { Expires = Timestamp.FromDateTimeOffset(Expires) } };
        cache.Servers.AddRange(servers.Select(s => new CacheServer { ServerId = s }));
        return cache;
    }

    private static Server Server(string id, ulong cacheId, ServerState state = ServerState.Ready) => new() { ServerId = id, CacheId = cacheId, State = state };

    private static ServerCacheInfo Held(ulong id, DateTimeOffset? end = null) => new() { CacheId = id, LeaseEnd = end ?? Expires };

    private static ClusterSnapshot Snapshot(IEnumerable<Cache> caches, IEnumerable<Server> servers, Dictionary<string, IReadOnlyList<ServerCacheInfo>>? held = null) =>
        new(caches.ToList(), servers.ToList(), held ?? new Dictionary<string, IReadOnlyList<ServerCacheInfo>>(), new Dictionary<string, string>());

    [Fact]
    public void AConsistentStatePasses()
    {
        var s = Snapshot(new[] { Cache(1, "a"), Cache(2, "b", "c") }, new[] { Server("a", 1), Server("b", 2), Server("c", 2), Server("d", 0) },
                         new() { ["a"] = new[] { Held(1) }, ["b"] = new[] { Held(2) }, ["c"] = new[] { Held(2) }, ["d"] = Array.Empty<ServerCacheInfo>() });
        Assert.Empty(Consistent(s, new ulong[] { 1, 2 }));
        Assert.Empty(NothingLostOrDuplicated(s, s));
    }

    [Fact]
    public void EachBrokenInvariantIsNamed()
    {
        // A server in two caches; the pool renting a server to a cache that is gone; a server holding an unknown cache and
        // a failed server still holding its cache; an opened cache missing from its server and one with another lease end.
        var twice = Snapshot(new[] { Cache(1, "a"), Cache(2, "a") }, new[] { Server("a", 1) });
        Assert.Contains(NoServerRentedTwice(twice), v => v.Contains("server a is in caches 1, 2", StringComparison.Ordinal));
        var leaked = Snapshot(new[] { Cache(1, "a") }, new[] { Server("a", 1), Server("b", 9) });
        Assert.Contains(PoolMatchesCaches(leaked), v => v.Contains("rented by cache 9", StringComparison.Ordinal));
        var unknown = Snapshot(new[] { Cache(1, "a") }, new[] { Server("a", 1, ServerState.Failed), Server("b", 0) },
                               new() { ["a"] = new[] { Held(1) }, ["b"] = new[] { Held(7) } });
        var found = NoUnknownCachesOnServers(unknown).ToList();
        Assert.Contains(found, v => v.Contains("holds cache 7", StringComparison.Ordinal));
        Assert.Contains(found, v => v.Contains("though the manager failed it", StringComparison.Ordinal));
        var missing = Snapshot(new[] { Cache(1, "a"), Cache(2, "b") }, new[] { Server("a", 1), Server("b", 2) },
                               new() { ["a"] = Array.Empty<ServerCacheInfo>(), ["b"] = new[] { Held(2, Expires.AddSeconds(5)) } });
        var notHeld = OpenedCachesHeld(missing, new ulong[] { 1, 2 }).ToList();
        Assert.Contains(notHeld, v => v.Contains("cache 1 is not on its server a", StringComparison.Ordinal));
        Assert.Contains(notHeld, v => v.Contains("cache 2 on b ends at", StringComparison.Ordinal));
    }

    [Fact]
    public void LostMovedAndDuplicatedCachesAreNamed()
    {
        var before = Snapshot(new[] { Cache(1, "a"), Cache(2, "b") }, Array.Empty<Server>());
        var renewed = Cache(2, "c");
        renewed.Lease.Expires = Timestamp.FromDateTimeOffset(Expires.AddMinutes(1));
        var after = Snapshot(new[] { renewed, Cache(3, "d") }, Array.Empty<Server>());
        var found = NothingLostOrDuplicated(before, after).ToList();
        Assert.Contains("cache 1 was lost", found);
        Assert.Contains(found, v => v.StartsWith("cache 2 moved", StringComparison.Ordinal));
        Assert.Contains(found, v => v.StartsWith("cache 2's lease", StringComparison.Ordinal));
        Assert.Contains("cache 3 appeared", found);
        Assert.Empty(NothingLostOrDuplicated(before, Snapshot(new[] { Cache(2, "b"), Cache(3, "d") }, Array.Empty<Server>()), gone: new ulong[] { 1 }, added: new ulong[] { 3 }));
    }
}

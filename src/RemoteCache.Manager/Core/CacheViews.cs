using System;
using System.Collections.Generic;
using System.Linq;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Core;

/// <summary>Caches as clients see them: their servers and pending replacements, with capabilities for the current lease.</summary>
public sealed class CacheViews : StateUnit
{
    private readonly ServerKeys _keys;

    public CacheViews(ManagerState state, ServerKeys keys) : base(state) => _keys = keys;

    /// <summary>The servers of <paramref name="cache"/> as a client needs them: endpoint, regions and a capability valid until the lease ends.</summary>
    public IReadOnlyList<GrantedServer> ServersOf(CacheRecord cache)
    {
        var servers = View.Servers;
        return cache.Servers.Where(servers.ContainsKey).Select(id => Granted(cache, servers[id])).ToList();
    }

    /// <summary>The servers rented to replace some of <paramref name="cache"/>'s, with capabilities for the current lease.</summary>
    public IReadOnlyList<GrantedReplacement> ReplacementsOf(CacheRecord cache)
    {
        var servers = View.Servers;
        return cache.Replacements
            .Where(r => servers.ContainsKey(r.Value.ServerId))
            .Select(r => new GrantedReplacement(r.Key, Granted(cache, servers[r.Value.ServerId])))
            .ToList();
    }

    private GrantedServer Granted(CacheRecord cache, ServerRecord server) => new(
        server.ServerId,
        server.Endpoints.TryGetValue(cache.Transport, out var e) ? e : "",
        cache.RegionsPerServer,
        cache.RegionBytes,
        RemoteCacheCapability.Mint(_keys.For(server), cache.CacheId, server.ServerId, cache.RegionsPerServer, cache.LeaseExpires),
        server.VmType,
        server.Spot,
        cache.Lineage.TryGetValue(server.ServerId, out var lineage) ? lineage.Replaced : "",
        lineage?.LostRegions ?? []);
}

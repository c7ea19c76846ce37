using System;
using System.Collections.Generic;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>A cache as the manager holds it (<see cref="RemoteCacheManagerClient.ListAsync"/>, <see cref="ManagedCache.Info"/>).</summary>
/// <param name="CacheId">The manager's id of the cache.</param>
/// <param name="Name">The name given at creation (may be empty).</param>
/// <param name="Capacity">Bytes provided: servers × regions × region size (at least what was asked).</param>
/// <param name="Slo">The SLO it was allocated for.</param>
/// <param name="Config">The data-path configuration chosen for the SLO.</param>
/// <param name="Transport">tcp, shm or verbs.</param>
/// <param name="Servers">Its servers in address order.</param>
/// <param name="LeaseExpires">When the cache is freed unless its lease is renewed.</param>
/// <param name="Created">When it was allocated.</param>
/// <param name="PricePerHour">What its VMs cost.</param>
/// <param name="PredictedLatency">The configuration's predicted mean latency for the SLO's operation.</param>
/// <param name="PredictedThroughput">The configuration's predicted throughput (operations per second).</param>
public sealed record ManagedCacheInfo(ulong CacheId, string Name, long Capacity, RemoteCacheSlo Slo, CacheConfig Config, string Transport,
                                      IReadOnlyList<ManagedCacheServer> Servers, DateTimeOffset LeaseExpires, DateTimeOffset Created,
                                      double PricePerHour, TimeSpan PredictedLatency, double PredictedThroughput);

/// <summary>One server of a managed cache.</summary>
/// <param name="ServerId">The server's identity.</param>
/// <param name="Endpoint">Where clients connect.</param>
/// <param name="Regions">Regions the cache holds there.</param>
/// <param name="RegionSize">Bytes per region.</param>
/// <param name="VmType">The catalogue's VM type.</param>
/// <param name="Spot">Whether it is a spot VM (may be reclaimed with notice).</param>
public sealed record ManagedCacheServer(string ServerId, string Endpoint, int Regions, long RegionSize, string VmType, bool Spot);

/// <summary>A server of the manager's pool (<see cref="RemoteCacheManagerClient.ListServersAsync"/>).</summary>
/// <param name="ServerId">The server's identity.</param>
/// <param name="Endpoints">Transport → endpoint.</param>
/// <param name="VmType">The catalogue's VM type.</param>
/// <param name="Spot">Whether it is a spot VM.</param>
/// <param name="State">ready, draining, reclaiming, failed, or joining (a joined server whose endpoints are not yet checked).</param>
/// <param name="Allocator">local or static.</param>
/// <param name="CacheId">The cache renting it; 0: free.</param>
/// <param name="MemoryLent">Bytes lent, as the server last reported.</param>
/// <param name="LastProbe">When it last answered a probe.</param>
/// <param name="ReclaimDeadline">When it will be reclaimed, if announced.</param>
public sealed record ManagedServerInfo(string ServerId, IReadOnlyDictionary<string, string> Endpoints, string VmType, bool Spot, string State,
                                       string Allocator, ulong CacheId, long MemoryLent, DateTimeOffset? LastProbe, DateTimeOffset? ReclaimDeadline)
{
    /// <summary>Whether the server joined by itself (<see cref="JoinedServer"/>, <c>remotecache serve --join</c>).</summary>
    public bool Joined { get; init; }

    /// <summary>A joined server's labels (e.g. zone=a).</summary>
    public IReadOnlyDictionary<string, string> Labels { get; init; } = new Dictionary<string, string>();

    /// <summary>A joined server's last heartbeat the leader accepted.</summary>
    public DateTimeOffset? LastHeartbeat { get; init; }
}

/// <summary>A join token (<see cref="RemoteCacheManagerClient.IssueJoinTokenAsync"/>): its id, what it is for, when it ends, and how many servers joined with it.</summary>
public sealed record JoinTokenInfo(string TokenId, string Description, DateTimeOffset Created, DateTimeOffset Expires, DateTimeOffset? Revoked, long Joins);

/// <summary>A join token just issued: <see cref="Text"/> is what a server presents, shown this once (the manager keeps its hash).</summary>
public sealed record IssuedJoinToken(JoinTokenInfo Token, string Text);

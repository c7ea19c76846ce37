using System;
using System.Collections.Generic;
using System.Linq;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Services;

/// <summary>Records of the manager's state as the contract's messages, and the contract's messages as the core's inputs.</summary>
public static class Protos
{
    public static V1.CacheConfig ToProto(RemoteCache.CacheConfig c) => EventProtos.ToProto(c);

    public static V1.Slo ToProto(SloRecord slo)
    {
        var proto = new V1.Slo { Throughput = slo.Throughput };
        if (slo.ReadLatencyUs is { } r)
            proto.ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(r));
        if (slo.WriteLatencyUs is { } w)
            proto.WriteLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(w));
        return proto;
    }

    /// <summary>The cache with its servers (and their capabilities, minted for the current lease).</summary>
    public static Cache ToProto(CacheRecord cache, IEnumerable<CacheServer> servers)
    {
        var proto = new Cache
        {
            CacheId = cache.CacheId, Name = cache.Name, Capacity = (ulong)cache.CapacityBytes, Slo = ToProto(cache.Slo), Config = ToProto(cache.Config),
            Transport = cache.Transport, RecordSize = (uint)cache.RecordSize,
            Lease = new Lease { Expires = Timestamp.FromDateTimeOffset(cache.LeaseExpires), Length = Duration.FromTimeSpan(cache.LeaseLength) },
            Created = Timestamp.FromDateTimeOffset(cache.Created), PricePerHour = cache.PricePerHour,
            PredictedLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(cache.PredictedLatencyUs)), PredictedThroughput = cache.PredictedThroughput,
            Tenant = cache.Tenant, Token = cache.Token,
        };
        if (cache.Duration is { } d)
            proto.Duration = Duration.FromTimeSpan(d);
        proto.Servers.AddRange(servers);
        return proto;
    }

    public static Server ToProto(ServerRecord s)
    {
        var proto = new Server
        {
            ServerId = s.ServerId, VmType = s.VmType, Spot = s.Spot, State = (ServerState)(int)s.Status, Allocator = s.Allocator, CacheId = s.CacheId,
            MemoryLent = (ulong)s.MemoryLent,
        };
        foreach (var (transport, endpoint) in s.Endpoints)
            proto.Endpoints.Add(transport, endpoint);
        if (s.LastProbe is { } p)
            proto.LastProbe = Timestamp.FromDateTimeOffset(p);
        if (s.ReclaimDeadline is { } d)
            proto.ReclaimDeadline = Timestamp.FromDateTimeOffset(d);
        if (s.Join is { } join)
        {
            proto.Joined = true;
            proto.JoinTokenId = join.TokenId;
            foreach (var (key, value) in join.Labels)
                proto.Labels.Add(key, value);
        }
        if (s.LastHeartbeat is { } h)
            proto.LastHeartbeat = Timestamp.FromDateTimeOffset(h);
        return proto;
    }

    public static JoinToken ToProto(JoinTokenRecord t)
    {
        var proto = new JoinToken
        {
            TokenId = t.TokenId, Description = t.Description, Created = Timestamp.FromDateTimeOffset(t.Created), Expires = Timestamp.FromDateTimeOffset(t.Expires),
            Joins = (ulong)t.Joins,
        };
        if (t.Revoked is { } r)
            proto.Revoked = Timestamp.FromDateTimeOffset(r);
        return proto;
    }

    public static CacheServer ToProto(GrantedServer s) => new()
    {
        ServerId = s.ServerId, Endpoint = s.Endpoint, Regions = (uint)s.Regions, RegionSize = (ulong)s.RegionSize, Capability = s.Capability,
        VmType = s.VmType, Spot = s.Spot, Replaced = s.Replaced, LostRegions = { s.LostRegions.Select(r => (uint)r) },
    };

    public static Replacement ToProto(GrantedReplacement r) => new() { Replaces = r.Replaces, Server = ToProto(r.Server) };

    /// <summary>An SLO as asked: latencies must be positive; unset, nothing asked (<see cref="SloSpec.None"/>).</summary>
    public static SloSpec ToSpec(V1.Slo? slo) => slo is null
        ? SloSpec.None
        : new SloSpec(slo.ReadLatency is { } r ? WireInput.Positive(r, "slo.read_latency") : null,
                      slo.WriteLatency is { } w ? WireInput.Positive(w, "slo.write_latency") : null,
                      slo.Throughput);
}

using System;
using System.Collections.Generic;
using System.Linq;
using Google.Protobuf.WellKnownTypes;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>Between the contract's messages and the SDK's types.</summary>
internal static class Contract
{
    public static Manager.V1.Slo ToProto(RemoteCacheSlo? slo)
    {
        var proto = new Manager.V1.Slo();
        if (slo is null)
            return proto;
        proto.Throughput = slo.Throughput;
        if (slo.ReadLatency is { } r)
            proto.ReadLatency = Duration.FromTimeSpan(r);
        if (slo.WriteLatency is { } w)
            proto.WriteLatency = Duration.FromTimeSpan(w);
        return proto;
    }

    public static RemoteCacheSlo FromProto(Manager.V1.Slo? slo, uint recordSize) => new()
    {
        ReadLatency = slo?.ReadLatency?.ToTimeSpan(),
        WriteLatency = slo?.WriteLatency?.ToTimeSpan(),
        Throughput = slo?.Throughput ?? 0,
        RecordSize = recordSize == 0 ? 8 : (int)recordSize,
    };

    public static CacheConfig FromProto(Manager.V1.CacheConfig c) =>
        new((int)c.ClientThreads, (int)c.ServerThreads, (int)c.BatchSize, (int)c.QueueDepth);

    public static ManagedCacheInfo FromProto(Cache c) => new(
        c.CacheId, c.Name, (long)c.Capacity, FromProto(c.Slo, c.RecordSize), FromProto(c.Config ?? new Manager.V1.CacheConfig()), c.Transport,
        c.Servers.Select(s => new ManagedCacheServer(s.ServerId, s.Endpoint, (int)s.Regions, (long)s.RegionSize, s.VmType, s.Spot)).ToList(),
        c.Lease?.Expires?.ToDateTimeOffset() ?? DateTimeOffset.MinValue, c.Created?.ToDateTimeOffset() ?? DateTimeOffset.MinValue,
        c.PricePerHour, c.PredictedLatency?.ToTimeSpan() ?? TimeSpan.Zero, c.PredictedThroughput);

    public static ManagedServerInfo FromProto(Server s) => new(
        s.ServerId, new Dictionary<string, string>(s.Endpoints), s.VmType, s.Spot,
        s.State.ToString().ToLowerInvariant(), s.Allocator, s.CacheId, (long)s.MemoryLent,
        s.LastProbe?.ToDateTimeOffset(), s.ReclaimDeadline?.ToDateTimeOffset())
    {
        Joined = s.Joined, Labels = new Dictionary<string, string>(s.Labels), LastHeartbeat = s.LastHeartbeat?.ToDateTimeOffset(),
    };

    public static JoinTokenInfo FromProto(JoinToken t) => new(
        t.TokenId, t.Description, t.Created.ToDateTimeOffset(), t.Expires.ToDateTimeOffset(), t.Revoked?.ToDateTimeOffset(), (long)t.Joins);

    /// <summary>The event as the SDK's type; null for a kind this client does not know (a newer manager).</summary>
    public static ManagedCacheEvent? FromProto(CacheEvent e)
    {
        ulong id = e.CacheId;
        long seq = (long)e.Sequence;
        var time = e.Time?.ToDateTimeOffset() ?? DateTimeOffset.MinValue;
        return e.KindCase switch
        {
            CacheEvent.KindOneofCase.CacheAllocated => new CacheAllocatedEvent(id, seq, time, (long)e.CacheAllocated.Capacity),
            CacheEvent.KindOneofCase.CacheReshaped => new CacheReshapedEvent(id, seq, time, (long)e.CacheReshaped.Capacity, e.CacheReshaped.ServerIds.ToList()),
            CacheEvent.KindOneofCase.ConfigChanged => new ConfigChangedEvent(id, seq, time, FromProto(e.ConfigChanged.Config)),
            CacheEvent.KindOneofCase.LeaseRenewed => new LeaseRenewedEvent(id, seq, time, e.LeaseRenewed.Expires.ToDateTimeOffset()),
            CacheEvent.KindOneofCase.LeaseExpiring => new LeaseExpiringEvent(id, seq, time, e.LeaseExpiring.Expires.ToDateTimeOffset()),
            CacheEvent.KindOneofCase.ReclaimNotice => new ReclaimNoticeEvent(id, seq, time, e.ReclaimNotice.ServerId, (int)e.ReclaimNotice.FirstRegion,
                                                                             (int)e.ReclaimNotice.Regions, e.ReclaimNotice.Deadline.ToDateTimeOffset()),
            CacheEvent.KindOneofCase.ServerFailed => new ServerFailedEvent(id, seq, time, e.ServerFailed.ServerId, (int)e.ServerFailed.FirstRegion,
                                                                           (int)e.ServerFailed.Regions, e.ServerFailed.Reason),
            CacheEvent.KindOneofCase.CacheDeleted => new CacheDeletedEvent(id, seq, time, e.CacheDeleted.Reason),
            CacheEvent.KindOneofCase.ServerReplaced => new ServerReplacedEvent(id, seq, time, e.ServerReplaced.ServerId, e.ServerReplaced.Replacement,
                                                                               (int)e.ServerReplaced.FirstRegion, (int)e.ServerReplaced.Regions,
                                                                               (int)e.ServerReplaced.RegionsMoved, e.ServerReplaced.ServerIds.ToList(),
                                                                               e.ServerReplaced.LostRegions.Select(r => (int)r).ToList()),
            _ => null,
        };
    }
}

using System;
using System.Collections.Generic;
using RemoteCache.Slo;

namespace RemoteCache.Manager.Core;

/// <summary>
/// An SLO as a tenant asks for it, before it is tied to a record size: latencies positive or unset, a throughput in
/// operations per second (0: none asked).
/// </summary>
public sealed record SloSpec(TimeSpan? ReadLatency, TimeSpan? WriteLatency, double Throughput)
{
    /// <summary>No SLO at all.</summary>
    public static SloSpec None { get; } = new(null, null, 0);

    /// <summary>
    /// The SLO for records of <paramref name="recordSize"/> bytes. One that asks for nothing gets the cheapest
    /// configuration (one that does any work at all).
    /// </summary>
    /// <exception cref="ManagerRefusal">InvalidArgument: the SLO cannot be met by any configuration as stated.</exception>
    public RemoteCacheSlo For(int recordSize)
    {
        var result = new RemoteCacheSlo
        {
            ReadLatency = ReadLatency,
            WriteLatency = WriteLatency,
            Throughput = Throughput,
            RecordSize = recordSize,
        };
        if (result.ReadLatency is null && result.WriteLatency is null && result.Throughput == 0)
            result.Throughput = double.Epsilon;
        if (result.Problem() is { } problem)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the SLO {problem}");
        return result;
    }
}

/// <summary>
/// The request that placed a cache as the cache keeps it (<see cref="Text"/>, opaque to the core), to tell a retry of it
/// from another request with the same request id: <see cref="DifferingFrom"/> names the fields in which it differs from
/// a kept one (none: a retry).
/// </summary>
public sealed record SentRequest(string Text, Func<string?, IReadOnlyList<string>> DifferingFrom);

/// <summary>An Allocate: bytes (at least 1), the SLO, the likely lifetime, the lease (null: the default), the transport (null: any offered), a name, a request id for retries.</summary>
public sealed record AllocateSpec(long Capacity, RemoteCacheSlo Slo, TimeSpan? Duration, TimeSpan? Lease, string? Transport, string Name, string? RequestId, SentRequest Sent);

/// <summary>A Reallocate: a new capacity (null: unchanged) and/or SLO (null: unchanged).</summary>
public sealed record ReallocateSpec(ulong CacheId, long? Capacity, SloSpec? Slo);

/// <summary>A replacement call of <paramref name="Mover"/> on server <paramref name="ServerId"/> of a cache; the SLO (Begin) sizes the replacement for a reshape; the lost regions (Complete) are those the mover could not move.</summary>
public sealed record ReplacementSpec(ulong CacheId, string ServerId, string Mover, SloSpec? Slo = null, IReadOnlyCollection<uint>? LostRegions = null);

/// <summary>A MoveRegion: <paramref name="Regions"/> (0: 1) regions from <paramref name="SourceRegion"/> of the replaced server to <paramref name="TargetRegion"/> of its replacement, paced at <paramref name="MaxMibPerS"/> (0: unpaced).</summary>
public sealed record MoveRegionSpec(ulong CacheId, string ServerId, string Mover, uint SourceRegion, uint TargetRegion, uint Regions, uint MaxMibPerS);

/// <summary>A server of a cache as a client needs it: endpoint on the cache's transport, regions, a capability valid until the lease ends, and what it replaced.</summary>
public sealed record GrantedServer(string ServerId, string Endpoint, int Regions, long RegionSize, string Capability, string VmType, bool Spot, string Replaced,
                                   IReadOnlyList<int> LostRegions);

/// <summary>A server rented to replace <paramref name="Replaces"/>, pending.</summary>
public sealed record GrantedReplacement(string Replaces, GrantedServer Server);

using System;
using System.Collections.Generic;
using System.Linq;
using Grpc.Core;
using Grpc.Net.Client;
using RemoteCache.Manager.V1;

namespace RemoteCache;

/// <summary>One replica of the manager: its address and the stubs over its channel.</summary>
internal sealed class ManagerReplica
{
    public ManagerReplica(int index, Uri address, GrpcChannel channel, CallInvoker invoker)
    {
        Index = index;
        Address = address;
        Channel = channel;
        Grpc = new CacheManager.CacheManagerClient(invoker);
        Pool = new ServerPool.ServerPoolClient(invoker);
        Members = new ServerMembership.ServerMembershipClient(invoker);
        Health = new Grpc.Health.V1.Health.HealthClient(invoker);
    }

    /// <summary>Its place in <see cref="RemoteCacheManagerOptions.Addresses"/>.</summary>
    public int Index { get; }

    public Uri Address { get; }

    public GrpcChannel Channel { get; }

    public CacheManager.CacheManagerClient Grpc { get; }

    public ServerPool.ServerPoolClient Pool { get; }

    public ServerMembership.ServerMembershipClient Members { get; }

    /// <summary>Its grpc.health.v1 service.</summary>
    public Grpc.Health.V1.Health.HealthClient Health { get; }
}

/// <summary>
/// Where the attempts of one call (or of one event stream) go. After an UNAVAILABLE from a replica: to the leader it
/// names in its not-leader refusal if that is one of the configured addresses, at once; otherwise to the next address.
/// After a full round (as many attempts as addresses) with no answer it waits before the next attempt, the waits from
/// the <see cref="Backoff"/> it was given: growing while some replica does not answer at all, the first wait again
/// while every replica answers that it is not the leader (an election under way: a new leader is about to serve, and
/// refusing is cheap for a replica).
/// Remembers what each address said last, for the error that ends the call. Not thread-safe: one per call.
/// </summary>
internal sealed class Failover
{
    private readonly IReadOnlyList<ManagerReplica> _replicas;
    private readonly List<(Uri Address, string Said)> _tried = new();
    private Backoff _backoff;
    private int _unanswered;  // attempts since the last answer
    private bool _roundRefused = true;  // every attempt of this round was refused by a live replica that is not the leader

    public Failover(IReadOnlyList<ManagerReplica> replicas, ManagerReplica first, Backoff backoff)
    {
        _replicas = replicas;
        Replica = first;
        _backoff = backoff;
    }

    /// <summary>Where the next attempt goes.</summary>
    public ManagerReplica Replica { get; private set; }

    /// <summary>Every address tried, in the order first tried, with what it said last.</summary>
    public IReadOnlyList<(Uri Address, string Said)> Tried => _tried;

    /// <summary><see cref="Replica"/> answered (a stream delivered an event): the next failure starts a new round.</summary>
    public void Answered()
    {
        _unanswered = 0;
        _roundRefused = true;
        _backoff.Reset();
    }

    /// <summary>Notes what <see cref="Replica"/> said without moving on (a failure that ends the call).</summary>
    public void Note(string said)
    {
        int i = _tried.FindIndex(t => t.Address == Replica.Address);
        if (i < 0)
            _tried.Add((Replica.Address, said));
        else
            _tried[i] = (Replica.Address, said);
    }

    /// <summary>
    /// After <paramref name="failure"/> from <see cref="Replica"/> (null: a stream it served ended), moves
    /// <see cref="Replica"/> on; returns how long to wait before the next attempt (zero within a round).
    /// </summary>
    public TimeSpan MoveOn(RpcException? failure)
    {
        Note(failure is null ? "the stream ended" : Describe(failure));
        _unanswered++;
        _roundRefused &= failure is not null && IsNotLeader(failure);
        var from = Replica;
        Replica = failure is not null && LeaderNamed(failure) is { } leader && Find(leader) is { } named && named != from
            ? named
            : _replicas[(from.Index + 1) % _replicas.Count];
        if (_unanswered % _replicas.Count != 0)
            return TimeSpan.Zero;
        var wait = _roundRefused ? _backoff.First() : _backoff.Next();
        _roundRefused = true;
        return wait;
    }

    /// <summary>What a refusal said, for logs and errors: a not-leader refusal says which leader it named.</summary>
    public string Describe(RpcException e)
    {
        if (!IsNotLeader(e))
            return $"{e.StatusCode}: {e.Status.Detail}";
        if (LeaderNamed(e) is not { } leader)
            return "not the leader, and it knows no leader";
        return Find(leader) is null
            ? $"not the leader; it names {leader}, which is not among the addresses given"
            : $"not the leader; it names {leader}";
    }

    /// <summary>A replica that is not the leader refused (nothing was carried out: a retry elsewhere is safe).</summary>
    public static bool IsNotLeader(RpcException e) =>
        e.StatusCode == StatusCode.Unavailable && RemoteCacheManagerException.RefusalOf(e) == Refusals.NotLeader;

    // The leader's address in a not-leader refusal, or null (none known, or not an address: one longer than any string
    // of the contract is not one, and is neither followed nor quoted).
    private static Uri? LeaderNamed(RpcException e)
    {
        if (!IsNotLeader(e))
            return null;
        string? value = e.Trailers.FirstOrDefault(t => t.Key == Refusals.LeaderTrailer)?.Value;
        return value is { Length: <= ContractLimits.MaxStringLength } && Uri.TryCreate(value, UriKind.Absolute, out var leader) ? leader : null;
    }

    // A leader is followed only to a configured address: the client's channels, credentials and trust are for those.
    private ManagerReplica? Find(Uri address) => _replicas.FirstOrDefault(r => RemoteCacheManagerOptions.SameManager(r.Address, address));
}

using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Cluster;

/// <summary>What a manager is among the replicas that share its store.</summary>
public enum ManagerRole
{
    /// <summary>It serves every call and runs the background duties.</summary>
    Leader,

    /// <summary>Another manager leads: this one serves reads from the store and refuses the rest, naming the leader.</summary>
    Follower,

    /// <summary>No leader is known (an election is under way, or the store cannot be reached): reads are served if the store answers.</summary>
    NoLeader,
}

/// <summary>
/// Who leads the managers that share a store. A leader's term begins when it is elected; it then takes the state over
/// (<see cref="Serve"/> marks the end of that) and serves until the term's token is cancelled: it stepped down, was
/// deposed, or is stopping. Only the leader writes (its store fences every change by its term), runs probes, ends leases
/// and retires reclaimed servers.
/// </summary>
public interface ILeadership
{
    /// <summary>This manager's role now.</summary>
    ManagerRole Role { get; }

    /// <summary>The address the leader advertises (this manager's own while it leads), or null when none is known.</summary>
    string? LeaderAddress { get; }

    /// <summary>The token of the term this manager serves as leader now, cancelled when it ends; a cancelled one when it does not lead.</summary>
    CancellationToken Term { get; }

    /// <summary>Waits until this manager is elected; returns its term's token, cancelled when the term ends.</summary>
    Task<CancellationToken> ElectedAsync(CancellationToken cancellationToken);

    /// <summary>The state is taken over: from now until <paramref name="term"/> ends, this manager is <see cref="ManagerRole.Leader"/>.</summary>
    void Serve(CancellationToken term);

    /// <summary>
    /// Whether this manager still leads, as the store would answer now: asked before an action the store cannot fence
    /// (dropping a cache's memory on a server), so that a deposed leader does not take it. False also when it cannot be
    /// told (the store does not answer).
    /// </summary>
    Task<bool> ConfirmAsync(CancellationToken cancellationToken);

    /// <summary>Ends this manager's term now (the store refused it as leader, or taking over failed); it may be elected again later.</summary>
    void StepDown(string reason);
}

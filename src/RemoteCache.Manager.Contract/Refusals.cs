namespace RemoteCache.Manager.V1;

/// <summary>
/// Kinds of refusal a client acts on: the manager names one in the <see cref="Trailer"/> trailer of the refused call,
/// beside the gRPC status and its message (manager.proto).
/// </summary>
public static class Refusals
{
    /// <summary>The trailer's key.</summary>
    public const string Trailer = "remotecache-refusal";

    /// <summary>A new SLO the cache's servers cannot carry: only moving the cache onto new servers would meet it.</summary>
    public const string MigrationRequired = "migration-required";

    /// <summary>Another client of the cache is moving the server's regions (BeginReplacement): follow its ServerReplaced.</summary>
    public const string MovedElsewhere = "moved-elsewhere";

    /// <summary>
    /// This manager is a replica that is not the leader (status UNAVAILABLE; the call was not carried out): call the leader,
    /// whose address is in the <see cref="LeaderTrailer"/> trailer when one is known.
    /// </summary>
    public const string NotLeader = "not-leader";

    /// <summary>
    /// WatchEvents from a sequence the manager no longer keeps (status OUT_OF_RANGE): the cache's older events were
    /// compacted away (retention). The message names the sequence asked for and the oldest kept; read the cache's
    /// current state (GetCache) and watch from that one, or from 0 for new events only.
    /// </summary>
    public const string EventsCompacted = "events-compacted";

    /// <summary>
    /// A heartbeat from a joined server the manager has failed or no longer knows (status FAILED_PRECONDITION): the
    /// server must drop everything it holds and join again, as a new incarnation.
    /// </summary>
    public const string Rejoin = "rejoin";

    /// <summary>The trailer that names the leader's address (as it advertises it, http://HOST:PORT) beside <see cref="NotLeader"/>.</summary>
    public const string LeaderTrailer = "remotecache-leader";
}

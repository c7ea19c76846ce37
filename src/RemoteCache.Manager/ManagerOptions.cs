using System;
using System.Collections.Generic;

namespace RemoteCache.Manager;

/// <summary>
/// The manager's settings (configuration section "Manager"; the command line's flags map onto them, see
/// <see cref="CommandLine"/>).
/// </summary>
public sealed class ManagerOptions
{
    /// <summary>The configuration section.</summary>
    public const string Section = "Manager";

    /// <summary>Where the manager keeps its database, admission key, generated API keys and local servers' files.</summary>
    public string StateDirectory { get; set; } = DefaultStateDirectory();

    /// <summary><see cref="Store"/>: a SQLite file in the state directory (one manager).</summary>
    public const string SqliteStore = "sqlite";

    /// <summary><see cref="Store"/>: etcd v3 at <see cref="EtcdEndpoints"/> (managers that share their state).</summary>
    public const string EtcdStore = "etcd";

    /// <summary>Where the state is kept: <see cref="SqliteStore"/> or <see cref="EtcdStore"/>.</summary>
    public string Store { get; set; } = SqliteStore;

    /// <summary>The etcd members (comma-separated URLs) of the etcd store.</summary>
    public string? EtcdEndpoints { get; set; }

    /// <summary>The etcd store: the CA of the members' certificates (PEM; https endpoints).</summary>
    public string? EtcdCaFile { get; set; }

    /// <summary>The etcd store: this manager's client certificate and key (PEM), for members that check clients' certificates.</summary>
    public string? EtcdCertFile { get; set; }

    /// <inheritdoc cref="EtcdCertFile"/>
    public string? EtcdKeyFile { get; set; }

    /// <summary>The etcd store: the etcd user (members with auth enabled) and the file holding its password.</summary>
    public string? EtcdUser { get; set; }

    /// <inheritdoc cref="EtcdUser"/>
    public string? EtcdPasswordFile { get; set; }

    /// <summary>How the etcd store reaches etcd.</summary>
    public Store.EtcdConnection EtcdConnection => new(EtcdEndpoints ?? "")
    {
        CaFile = EtcdCaFile, CertFile = EtcdCertFile, KeyFile = EtcdKeyFile, User = EtcdUser, PasswordFile = EtcdPasswordFile,
    };

    /// <summary>The prefix of the etcd store's keys (several managers' states may share one etcd under different prefixes).</summary>
    public string EtcdPrefix { get; set; } = RemoteCache.Manager.Store.EtcdManagerStore.DefaultPrefix;

    /// <summary>
    /// The etcd store: the lease of a leader among the managers sharing the prefix. A leader that dies is replaced about
    /// this long after (etcd ends its lease); one cut off from etcd steps down after three quarters of it. etcd grants no
    /// lease below 2 s with its default timing.
    /// </summary>
    public TimeSpan LeaderLease { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>
    /// The etcd store: the address clients reach this manager at (http://HOST:PORT), which followers name when they refer
    /// clients to the leader; null: the address it listens on (which must then not be a wildcard like 0.0.0.0).
    /// </summary>
    public string? Advertise { get; set; }

    /// <summary>The VM catalogue (JSON); null: <see cref="Catalogue.VmCatalogue.LocalDefault"/>.</summary>
    public string? Catalogue { get; set; }

    /// <summary>The directory of performance models; null: the models shipped beside the manager (RemoteCacheSloModels.Directory).</summary>
    public string? Models { get; set; }

    /// <summary>API keys (JSON); null: a key file generated in the state directory on first start.</summary>
    public string? Keys { get; set; }

    /// <summary>The admission key shared with the servers; null: generated in the state directory on first start.</summary>
    public string? AdmissionKey { get; set; }

    /// <summary>"local" (start remotecache-server processes on this host) or "static" (an operator's pool).</summary>
    public string Allocator { get; set; } = "local";

    /// <summary>Transports offered, in order of preference when prices tie.</summary>
    public List<string> Transports { get; set; } = new() { "tcp", "shm" };

    /// <summary>How often every server is probed through its admin interface.</summary>
    public TimeSpan ProbePeriod { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>How long a probe may take before it counts as missed.</summary>
    public TimeSpan ProbeTimeout { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>
    /// A server that has missed every probe for this long (from its first missed one, and at least two probe rounds) is
    /// declared failed; one missed probe on a loaded host is no evidence. A local server whose process ends is failed at
    /// once. Detection takes from this long to this plus a probe period and two probe timeouts.
    /// </summary>
    public TimeSpan FailureTimeout { get; set; } = TimeSpan.FromSeconds(6);

    /// <summary>How often a server that joined by itself sends a heartbeat (told to it at Join).</summary>
    public TimeSpan HeartbeatInterval { get; set; } = TimeSpan.FromSeconds(1);

    /// <summary>
    /// A joined server with no accepted heartbeat for this long is failed (its caches' watchers get ServerFailed within
    /// this and a quarter second); a joining one that never sent its first heartbeat is forgotten. At least two
    /// <see cref="HeartbeatInterval"/>s: one late heartbeat on a loaded host is no evidence.
    /// </summary>
    public TimeSpan HeartbeatTtl { get; set; } = TimeSpan.FromSeconds(3);

    /// <summary>The lease of an Allocate that names none.</summary>
    public TimeSpan DefaultLease { get; set; } = TimeSpan.FromMinutes(10);

    /// <summary>The longest lease (and renewal) a tenant may ask for.</summary>
    public TimeSpan MaxLease { get; set; } = TimeSpan.FromDays(7);

    /// <summary>The shortest lease: below it a client could not renew in time.</summary>
    public TimeSpan MinLease { get; set; } = TimeSpan.FromSeconds(2);

    /// <summary>A LeaseExpiring event goes out when this share of the lease is left.</summary>
    public double LeaseWarningShare { get; set; } = 0.2;

    /// <summary>
    /// A pending replacement whose mover has called neither BeginReplacement nor MoveRegion for this long (and has no copy
    /// under way) is given back, and the replaced server's notice (ReclaimNotice or ServerFailed) goes out again, so that
    /// another client of the cache takes the move over: the mover is taken to be gone.
    /// </summary>
    public TimeSpan ReplacementIdleTimeout { get; set; } = TimeSpan.FromMinutes(2);

    /// <summary>The default of <see cref="EventRetention"/>: a day, so that a watcher that was away overnight resumes.</summary>
    public static readonly TimeSpan DefaultEventRetention = TimeSpan.FromHours(24);

    /// <summary>Bounds of <see cref="EventRetention"/>: a second (tests) to a year (beyond it the log is unbounded in practice).</summary>
    public static readonly TimeSpan MinEventRetention = TimeSpan.FromSeconds(1), MaxEventRetention = TimeSpan.FromDays(365);

    /// <summary>
    /// How long an event is kept after it was appended, by the appending manager's clock (compared by the compacting
    /// manager's: clocks of managers sharing a store should agree within a small share of this). Older events are
    /// compacted away (every minute); a watcher that asks for one is refused OUT_OF_RANGE (<c>events-compacted</c>).
    /// A deleted cache's events, its CacheDeleted last, stay this long too.
    /// </summary>
    public TimeSpan EventRetention { get; set; } = DefaultEventRetention;

    /// <summary>The default of <see cref="EventsPerCache"/>: far more than a day of renewals, reshapes and notices.</summary>
    public const int DefaultEventsPerCache = 10_000;

    /// <summary>Bounds of <see cref="EventsPerCache"/>.</summary>
    public const int MinEventsPerCache = 1, MaxEventsPerCache = 1_000_000;

    /// <summary>Events kept per cache at most, whatever their age: the oldest beyond it are compacted away first.</summary>
    public int EventsPerCache { get; set; } = DefaultEventsPerCache;

    /// <summary>Local allocator: the remotecache-server to start; null: the one shipped with the RemoteCache package.</summary>
    public string? ServerPath { get; set; }

    /// <summary>Local allocator: idle servers kept running per VM type, so that an Allocate need not start one.</summary>
    public int Warm { get; set; }

    /// <summary>
    /// Local allocator: the servers commit memory ahead for new caches (remotecache-server --commit-memory), so that
    /// filling a new cache runs at the transport's rate rather than at the rate its pages fault in; an idle server then
    /// holds the memory of its VM type (never below an eighth of the host's memory available).
    /// </summary>
    public bool CommitMemory { get; set; }

    /// <summary>
    /// Local allocator: the IPv4 address of an RDMA device's interface on this host. The servers it starts also listen
    /// for verbs there, so caches can be placed on verbs ("verbs" in <see cref="Transports"/>, with a verbs model) and
    /// regions move between servers with RDMA READ. Null: the servers listen on tcp and shm only.
    /// </summary>
    public string? VerbsAddress { get; set; }

    /// <summary>A PEM certificate: the manager serves TLS with it (with <see cref="CertificateKey"/>).</summary>
    public string? Certificate { get; set; }

    /// <summary>The certificate's private key (PEM).</summary>
    public string? CertificateKey { get; set; }

    private static string DefaultStateDirectory()
    {
        string? state = Environment.GetEnvironmentVariable("XDG_STATE_HOME");
        if (string.IsNullOrEmpty(state))
            state = System.IO.Path.Combine(Environment.GetFolderPath(Environment.SpecialFolder.UserProfile), ".local", "state");
        return System.IO.Path.Combine(state, "remotecache-manager");
    }
}

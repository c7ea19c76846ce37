using System;
using System.Collections.Generic;
using System.Linq;
using System.Net.Http;

namespace RemoteCache;

/// <summary>
/// How to reach the cache manager, and how the caches it rents are opened. In configuration:
/// <c>"RemoteCacheManager": { "Addresses": [ "https://m1:7400", "https://m2:7400" ], "ApiKey": "…", "Cache": { "OperationTimeout": "00:00:05" } }</c>
/// (or <c>"Address": "https://manager:7400"</c> for one manager).
/// </summary>
public sealed class RemoteCacheManagerOptions
{
    /// <summary>
    /// The environment variable the command line and samples take the manager's address from: one address, or the
    /// replicas' addresses separated by commas (<see cref="ParseAddresses"/>).
    /// </summary>
    public const string AddressVariable = "REMOTECACHE_MANAGER";

    /// <summary>The environment variable the command line and samples take the API key from.</summary>
    public const string ApiKeyVariable = "REMOTECACHE_API_KEY";

    /// <summary>The most addresses <see cref="Addresses"/> may hold: a manager's replicas are a handful, more is a mistake.</summary>
    public const int MaxAddresses = 16;

    /// <summary>Where remotecache-manager listens by default.</summary>
    public static Uri DefaultAddress { get; } = new("http://127.0.0.1:7400");

    /// <summary>
    /// The first of <see cref="Addresses"/> (<see cref="DefaultAddress"/> while it is empty). Setting it to another
    /// address makes that the only address (<see cref="Addresses"/> becomes a new list of it): the way to name a single
    /// manager, in code or as <c>"Address"</c> in configuration. Setting it to the address it already is changes nothing,
    /// since configuration binding writes back what it read. Configuration that has both puts the <c>"Addresses"</c>
    /// after it (it is declared first so that binding sets it first).
    /// </summary>
    public Uri Address
    {
        get => Addresses is { Count: > 0 } addresses ? addresses[0] : DefaultAddress;
        set
        {
            if (value != Address)
                Addresses = new List<Uri> { value };
        }
    }

    /// <summary>
    /// The gRPC addresses (http:// or https://) of the manager's replicas, the one source of the addresses: a call goes
    /// to the replica that answered last (at first the first one); one that is unavailable, or refuses because it is not
    /// the leader, sends the call on to the leader it names or to the next address, round after round, for up to
    /// <see cref="CallTimeout"/>. At most <see cref="MaxAddresses"/>, no address twice. Empty (the default):
    /// <see cref="DefaultAddress"/> alone. In configuration, <c>"Addresses": [ "http://m1:7400", "http://m2:7400" ]</c>;
    /// configuration binding adds to the list, so bind into options whose list is empty.
    /// </summary>
    public IList<Uri> Addresses { get; set; } = new List<Uri>();

    /// <summary>The API key sent with every call (<c>authorization: Bearer</c>). Use https:// beyond one host: it is a password.</summary>
    public string? ApiKey { get; set; }

    /// <summary>
    /// How long one call to the manager may take (Allocate may start servers), its attempts on other replicas and the
    /// waits between them included. Default: 30 s.
    /// </summary>
    public TimeSpan CallTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>
    /// The longest wait between two attempts to reach a manager that is down. A call tries the replicas in turn without
    /// waiting and, after each round that found no leader, waits 50 ms doubling up to 200 ms (or this, if less), for up
    /// to <see cref="CallTimeout"/> in all; the lease renewal and the event stream, which go on past that, wait from
    /// 100 ms doubling up to this between their attempts. Default: 5 s.
    /// </summary>
    public TimeSpan RetryLimit { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// How the caches are opened: timeouts, lanes, session capacity, logger and meter factories, and encryption
    /// (<see cref="RemoteCacheOptions.EncryptionKey"/> or, for a key per cache, <see cref="RemoteCacheOptions.EncryptionKeyProvider"/>;
    /// the manager is asked for the blocks' trailers too and never sees a key). The cache id, token,
    /// capabilities, regions and configuration come from the manager and are not taken from here; a managed cache does
    /// not reconnect to a server that went away (<see cref="RemoteCacheOptions.Reconnect"/>): the manager replaces it.
    /// </summary>
    public RemoteCacheOptions Cache { get; set; } = new();

    /// <summary>
    /// The HTTP handler of the gRPC channel (for example to trust a private certificate authority); disposed with the
    /// client. Null: a <see cref="SocketsHttpHandler"/> with HTTP/2 keep-alive pings, so a manager that vanished is noticed.
    /// </summary>
    public HttpMessageHandler? HttpHandler { get; set; }

    /// <summary>
    /// Whether an open cache replaces its servers by itself (Redy §6.2): on a reclaim notice it rents a replacement and
    /// moves the server's regions there one by one before the deadline; on a failure it rents one and the lost regions
    /// start empty there (refilled from populateFrom). False: the events are only handed on. Default: true.
    /// </summary>
    public bool ReplaceServers { get; set; } = true;

    /// <summary>
    /// Paces each region's copy during a move, leaving memory bandwidth and CPU to the data path on hosts the copy shares
    /// with it. Null (the default): automatic, the rate that ends the server's move by half the time left to the reclaim's
    /// deadline and never below <see cref="AutomaticMovePaceMibPerSecond"/>, which is also the pace of a move without a
    /// deadline (a reshape). 0: as fast as the transport goes. Otherwise at most this many MiB/s (a move then takes about
    /// region size / pace per region).
    /// </summary>
    public int? MoveMaxMibPerSecond { get; set; }

    /// <summary>
    /// The least automatic pace, MiB/s: Redy's rate (1.09 s per GiB), at which the other regions' reads keep ≥ 95 % of
    /// their throughput during a move where the copy shares the clients' memory (docs/migration.md); unpaced, the copy's
    /// burst takes a core's memory bandwidth.
    /// </summary>
    public const int AutomaticMovePaceMibPerSecond = 1024;

    /// <summary>
    /// Consecutive regions smaller than this move in batches adding up to at most this many bytes: one fence, one copy
    /// call and one connection to the old server per batch, where each costs milliseconds per region on its own. Writes
    /// to a batch's regions wait for the batch's copy. A region this size or larger moves alone (Redy's pause per
    /// region); 0 moves every region alone. Default: 64 MiB.
    /// </summary>
    public long MoveBatchBytes { get; set; } = 64L << 20;

    /// <summary>
    /// Whether the client maps a replacement's pages of each batch while they are copied
    /// (<see cref="RemoteCacheMover.MapRegionsAheadAsync"/>; shm only), so that its operations after the commit do not
    /// fault them in one by one. It takes a core while the copy runs and is never waited for (a batch whose predecessor's
    /// mapping is still running skips it). Measured on 2 cores, where client, copy and mapping share the host: writes in
    /// the 2 s after a 4-region step keep 89 % of before with it against 54 % without, but reads while one region moves
    /// 73 % against 92 % (docs/migration.md). Worth it where the host has a core to spare during moves. Default: false.
    /// </summary>
    public bool MapMovedRegionsAhead { get; set; }

    /// <summary>Checks the options; the one place where they are checked (the client and options validation call it).</summary>
    /// <exception cref="ArgumentException">What is wrong, naming the option.</exception>
    public void Validate()
    {
        if (Addresses is null)
            throw new ArgumentException("RemoteCacheManagerOptions.Addresses is null; leave it empty for the default address", nameof(Addresses));
        if (Addresses.Count > MaxAddresses)
            throw new ArgumentException($"RemoteCacheManagerOptions.Addresses has {Addresses.Count} addresses; at most {MaxAddresses} are taken", nameof(Addresses));
        for (int i = 0; i < Addresses.Count; i++)
        {
            // One address is usually set as Address: named so, the message points where it was set.
            string name = Addresses.Count == 1 ? "RemoteCacheManagerOptions.Address" : $"RemoteCacheManagerOptions.Addresses[{i}]";
            var address = Addresses[i];
            if (address is null || !address.IsAbsoluteUri || address.Scheme is not ("http" or "https"))
                throw new ArgumentException($"{name} is '{address}'; it must be an absolute http:// or https:// address", nameof(Addresses));
            for (int j = 0; j < i; j++)
                if (SameManager(Addresses[j], address))
                    throw new ArgumentException($"RemoteCacheManagerOptions.Addresses names {address} twice (at {j} and {i})", nameof(Addresses));
        }
        if (ApiKey is { } key && (key.Length == 0 || key.Any(char.IsWhiteSpace)))
            throw new ArgumentException("RemoteCacheManagerOptions.ApiKey is empty or has white space", nameof(ApiKey));
        if (CallTimeout <= TimeSpan.Zero)
            throw new ArgumentException($"RemoteCacheManagerOptions.CallTimeout is {CallTimeout}; it must be positive", nameof(CallTimeout));
        if (RetryLimit < TimeSpan.FromMilliseconds(100))
            throw new ArgumentException($"RemoteCacheManagerOptions.RetryLimit is {RetryLimit}; it must be at least 100 ms", nameof(RetryLimit));
        if (MoveMaxMibPerSecond is < 0)
            throw new ArgumentException($"RemoteCacheManagerOptions.MoveMaxMibPerSecond is {MoveMaxMibPerSecond}; it must be 0 (unpaced) or more (null: automatic)", nameof(MoveMaxMibPerSecond));
        if (MoveBatchBytes < 0)
            throw new ArgumentException($"RemoteCacheManagerOptions.MoveBatchBytes is {MoveBatchBytes}; it must be 0 or more", nameof(MoveBatchBytes));
        if (Cache is null)
            throw new ArgumentException("RemoteCacheManagerOptions.Cache is null", nameof(Cache));
    }

    /// <summary>
    /// The addresses in <paramref name="list"/>, separated by commas (white space around them ignored), as
    /// <see cref="AddressVariable"/> and the command line's <c>--manager</c> hold them; checked as <see cref="Validate"/> would.
    /// </summary>
    /// <exception cref="FormatException">An entry is empty or not an absolute http:// or https:// address (the message quotes it).</exception>
    public static IList<Uri> ParseAddresses(string list)
    {
        ArgumentNullException.ThrowIfNull(list);
        var addresses = new List<Uri>();
        foreach (string entry in list.Split(',', StringSplitOptions.TrimEntries))
        {
            if (!Uri.TryCreate(entry, UriKind.Absolute, out var uri) || uri.Scheme is not ("http" or "https"))
                throw new FormatException($"'{entry}' is not a manager address (http://HOST:PORT or https://HOST:PORT)");
            addresses.Add(uri);
        }
        return addresses;
    }

    // Whether two addresses name the same manager: scheme, host (any case) and port, the default port spelt or not;
    // a leader's advertised address is matched against the configured ones this way.
    internal static bool SameManager(Uri a, Uri b) =>
        Uri.Compare(a, b, UriComponents.SchemeAndServer, UriFormat.SafeUnescaped, StringComparison.OrdinalIgnoreCase) == 0;
}

using System;
using System.Linq;
using System.Net.Http;

namespace RemoteCache;

/// <summary>
/// How to reach the cache manager, and how the caches it rents are opened. In configuration:
/// <c>"RemoteCacheManager": { "Address": "https://manager:7400", "ApiKey": "…", "Cache": { "OperationTimeout": "00:00:05" } }</c>.
/// </summary>
public sealed class RemoteCacheManagerOptions
{
    /// <summary>The environment variable the command line and samples take the manager's address from.</summary>
    public const string AddressVariable = "REMOTECACHE_MANAGER";

    /// <summary>The environment variable the command line and samples take the API key from.</summary>
    public const string ApiKeyVariable = "REMOTECACHE_API_KEY";

    /// <summary>Where remotecache-manager listens by default.</summary>
    public static Uri DefaultAddress { get; } = new("http://127.0.0.1:7400");

    /// <summary>The manager's gRPC address (http:// or https://). Default: <see cref="DefaultAddress"/>.</summary>
    public Uri Address { get; set; } = DefaultAddress;

    /// <summary>The API key sent with every call (<c>authorization: Bearer</c>). Use https:// beyond one host: it is a password.</summary>
    public string? ApiKey { get; set; }

    /// <summary>How long one call to the manager may take (Allocate may start servers). Default: 30 s.</summary>
    public TimeSpan CallTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>
    /// The longest wait between two attempts to reach a manager that is down (lease renewal, event stream, Create's
    /// Allocate: that one for up to <see cref="CallTimeout"/> in all); the waits double from 100 ms up to it. Default: 5 s.
    /// </summary>
    public TimeSpan RetryLimit { get; set; } = TimeSpan.FromSeconds(5);

    /// <summary>
    /// How the caches are opened: timeouts, lanes, session capacity, logger and meter factories. The cache id, token,
    /// capabilities, regions and configuration come from the manager and are not taken from here.
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
    /// (<see cref="RemoteCacheClient.MapRegionsAheadAsync"/>; shm only), so that its operations after the commit do not
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
        if (Address is null || !Address.IsAbsoluteUri || Address.Scheme is not ("http" or "https"))
            throw new ArgumentException($"RemoteCacheManagerOptions.Address is '{Address}'; it must be an absolute http:// or https:// address", nameof(Address));
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
}

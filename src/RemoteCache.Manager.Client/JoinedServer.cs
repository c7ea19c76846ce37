using System;
using System.Diagnostics;
using System.Collections.Generic;
using System.Linq;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Manager.V1;

namespace RemoteCache;

/// <summary>How a <see cref="JoinedServer"/> joins its managers and what it lends.</summary>
public sealed partial class JoinedServerOptions
{
    /// <summary>The managers' addresses (a manager's replicas); at least one.</summary>
    public IList<Uri> Managers { get; set; } = new List<Uri>();

    /// <summary>The join token an operator issued (<c>remotecache join-token issue</c>): <c>rcj_…</c>.</summary>
    public string JoinToken { get; set; } = "";

    /// <summary>The prefix of the server's id, for people: 1 to 40 of A-Z, a-z, 0-9 and '-'. Default: the host's name (other characters dropped).</summary>
    public string Name { get; set; } = DefaultName();

    /// <summary>A catalogue VM type to lend as; null: the largest one <see cref="MemoryLimit"/> and the cores allow.</summary>
    public string? VmType { get; set; }

    /// <summary>Lend as a spot VM: memory the host may want back (harvested).</summary>
    public bool Spot { get; set; }

    /// <summary>Labels the manager keeps with the server, such as its failure domain (zone=a).</summary>
    public IDictionary<string, string> Labels { get; set; } = new Dictionary<string, string>();

    /// <summary>Where to listen: a tcp endpoint on an address the manager and clients reach is required (no wildcard); shm and verbs may be added.</summary>
    public IList<string> Listen { get; set; } = new List<string>();

    /// <summary>Bytes per region: the manager's catalogue's (64 MiB unless it says otherwise).</summary>
    public long RegionSize { get; set; } = 64L << 20;

    /// <summary>Bytes lent at most (with <see cref="LendAuto"/>: at most, whatever the host has to spare).</summary>
    public long MemoryLimit { get; set; } = RemoteCacheServerOptions.DefaultMemoryLimit;

    /// <summary>
    /// Lend what the host does not use (<c>--lend auto</c>): the headroom of the memory cgroup the process runs in (or
    /// the host's available memory) and what the server holds, less <see cref="Reserve"/>, up to <see cref="MemoryLimit"/>.
    /// When the host's own processes take memory back, the server takes no new cache beyond what is left, asks the
    /// manager to move its cache away in time, and drops it once half the reserve is gone.
    /// </summary>
    public bool LendAuto { get; set; }

    /// <summary>With <see cref="LendAuto"/>: bytes of the host never lent, kept for its own processes.</summary>
    public long Reserve { get; set; } = 1L << 30;

    /// <summary>Where the host's memory is read (tests give their own).</summary>
    internal IHostMemory? HostMemory { get; set; }

    /// <summary>With <see cref="LendAuto"/>: how often the host's memory is read.</summary>
    internal TimeSpan WatchPeriod { get; set; } = TimeSpan.FromMilliseconds(100);

    /// <summary>Server threads at most, and the cores the server says it has; 0: one per hardware thread.</summary>
    public int MaxThreads { get; set; }

    /// <summary>Commit memory ahead for new caches (<see cref="RemoteCacheServerOptions.CommitMemory"/>).</summary>
    public bool CommitMemory { get; set; }

    /// <summary>How long a call to the managers may take, retries on other replicas included.</summary>
    public TimeSpan CallTimeout { get; set; } = TimeSpan.FromSeconds(10);

    /// <summary>Where the server and the membership log.</summary>
    public ILoggerFactory? LoggerFactory { get; set; }

    /// <summary>Checks the options; the one place where they are checked.</summary>
    /// <exception cref="ArgumentException">What is wrong, naming the option.</exception>
    public void Validate()
    {
        if (Managers is null || Managers.Count == 0)
            throw Invalid(nameof(Managers), "needs the address of a manager (or its replicas')");
        if (string.IsNullOrEmpty(JoinToken) || JoinToken.Any(char.IsWhiteSpace) || JoinToken.Length > 256)
            throw Invalid(nameof(JoinToken), "is empty, longer than 256 characters or has white space (an operator issues one: remotecache join-token issue)");
        if (Name is null || Name.Length is 0 or > 40 || !NameText().IsMatch(Name))
            throw Invalid(nameof(Name), "must be 1 to 40 of A-Z, a-z, 0-9 and '-'");
        if (Listen is null || !Listen.Any(l => l.StartsWith("tcp:", StringComparison.Ordinal)))
            throw Invalid(nameof(Listen), "needs a tcp endpoint on an address the manager and the clients reach (tcp:HOST:PORT)");
        foreach (string endpoint in Listen.Where(l => !l.StartsWith("shm:", StringComparison.Ordinal)))
            if (endpoint.Contains(":0.0.0.0:", StringComparison.Ordinal) || endpoint.Contains(":[::]:", StringComparison.Ordinal))
                throw Invalid(nameof(Listen), $"has {endpoint}, a wildcard no client can reach: listen on the host's address");
        if (CallTimeout <= TimeSpan.Zero)
            throw Invalid(nameof(CallTimeout), "must be positive");
        if (LendAuto && Reserve < 0)
            throw Invalid(nameof(Reserve), "must not be negative");
        new RemoteCacheServerOptions { Listen = Listen, RegionSize = RegionSize, MemoryLimit = MemoryLimit, MaxThreads = MaxThreads }.Validate();
    }

    private static ArgumentException Invalid(string option, string problem) => new($"{nameof(JoinedServerOptions)}.{option} {problem}", option);

    private static string DefaultName()
    {
        string name = new(Environment.MachineName.Where(c => char.IsAsciiLetterOrDigit(c) || c == '-').Take(40).ToArray());
        return name.Length > 0 ? name : "server";
    }

    [GeneratedRegex("^[A-Za-z0-9-]+$")]
    private static partial Regex NameText();
}

/// <summary>
/// A cache server in this process that joins its managers by itself (ServerMembership): it presents a join token, is
/// named and keyed by the manager as a new incarnation, listens, registers its endpoints with its first heartbeat and
/// keeps sending heartbeats. When the manager has failed or forgotten it (its heartbeats did not arrive for the TTL: a
/// partition, a stopped process), it stops its server — every cache it held is gone, its clients see their connections
/// close — and joins again as a new incarnation: never as the old one with content it lost. What <c>remotecache serve
/// --join</c> runs.
/// </summary>
public sealed class JoinedServer : IAsyncDisposable
{
    private readonly JoinedServerOptions _options;
    private readonly RemoteCacheManagerClient _managers;
    private readonly ILogger _logger;
    private readonly CancellationTokenSource _stop = new();
    private readonly object _gate = new();
    private Incarnation? _current;
    private Task _loop = Task.CompletedTask;
    private Task _watch = Task.CompletedTask;
    private int _incarnations;
    private readonly SemaphoreSlim _wake = new(0);
    private readonly IHostMemory? _host;
    private readonly LendPolicy? _policy;
    private LendDecision _decision;
    // Set by LeaveAsync: heartbeats say so, and the manager's "left" completes _left.
    private volatile bool _leaving;
    private readonly TaskCompletionSource _left = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private long _lastAccepted = Stopwatch.GetTimestamp();  // when a heartbeat was last answered
    // The give-back under way (watch loop only): when the host first asked, and by when.
    private (DateTimeOffset Asked, DateTimeOffset By)? _givingBack;

    private JoinedServer(JoinedServerOptions options, RemoteCacheManagerClient managers, ILogger logger)
    {
        _options = options;
        _managers = managers;
        _logger = logger;
        _decision = new LendDecision(options.MemoryLimit, 0, null, false);
        if (options.LendAuto)
        {
            _host = options.HostMemory ?? new LinuxHostMemory();
            _policy = new LendPolicy(options.Reserve, options.RegionSize, options.MemoryLimit);
            var reading = _host.Read();
            if (options.Reserve >= reading.Total)
                throw new ArgumentException($"{nameof(JoinedServerOptions)}.{nameof(JoinedServerOptions.Reserve)} is {options.Reserve} bytes, no less than all the host has ({reading.Total} bytes, {reading.Source}): nothing could be lent", nameof(options));
            _decision = _policy.Decide(reading, 0, DateTimeOffset.UtcNow);
            if (_decision.Limit < options.RegionSize)
                throw new ArgumentException($"the host has {reading.Headroom} bytes to spare ({reading.Source}); less the reserve of {options.Reserve}, not one region of {options.RegionSize} is left to lend", nameof(options));
        }
    }

    /// <summary>Bytes the server lends at most now: <see cref="JoinedServerOptions.MemoryLimit"/>, or with <see cref="JoinedServerOptions.LendAuto"/> what its host spares.</summary>
    public long Lending => Volatile.Read(ref _decision).Limit;

    /// <summary>The current incarnation's id (capabilities name it).</summary>
    public string ServerId => Current.Grant.ServerId;

    /// <summary>The current incarnation's endpoints, as bound.</summary>
    public IReadOnlyList<string> Endpoints => Current.Server.Endpoints;

    /// <summary>The catalogue VM type the manager took the server for.</summary>
    public string VmType => Current.Grant.VmType;

    /// <summary>Incarnations so far (1 until the server first joins again).</summary>
    public int Incarnations => Volatile.Read(ref _incarnations);

    /// <summary>The state the manager gave in its last answered heartbeat (ready, draining, reclaiming…).</summary>
    public string State { get; private set; } = "joining";

    /// <summary>Raised with the new server id when the server joined again as a new incarnation.</summary>
    public event Action<string>? Rejoined;

    private Incarnation Current
    {
        get
        {
            lock (_gate)
                return _current ?? throw new ObjectDisposedException(nameof(JoinedServer));
        }
    }

    /// <summary>Joins, starts the server and registers its endpoints; returns once the manager may place caches on it.</summary>
    /// <exception cref="ArgumentException">The options are not valid.</exception>
    /// <exception cref="RemoteCacheManagerException">A manager refused the join (a bad, expired or revoked token; memory or region size the catalogue does not take) or none answered.</exception>
    /// <exception cref="RemoteCacheException">The server could not start (an endpoint in use).</exception>
    public static async Task<JoinedServer> JoinAsync(JoinedServerOptions options, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(options);
        options.Validate();
        var managers = new RemoteCacheManagerClient(new RemoteCacheManagerOptions
        {
            Addresses = options.Managers.ToList(),
            CallTimeout = options.CallTimeout,
            Cache = new RemoteCacheOptions { LoggerFactory = options.LoggerFactory },
        });
        var member = new JoinedServer(options, managers, (ILogger?)options.LoggerFactory?.CreateLogger<JoinedServer>() ?? NullLogger.Instance);
        try
        {
            await member.StartIncarnationAsync(cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            await managers.DisposeAsync().ConfigureAwait(false);
            throw;
        }
        member._loop = Task.Run(member.HeartbeatLoopAsync);
        if (member._policy is not null)
            member._watch = Task.Run(member.WatchHostAsync);
        return member;
    }

    // Join, start the server under the id and key the manager gave, and register its endpoints with the first heartbeat.
    private async Task StartIncarnationAsync(CancellationToken cancellationToken)
    {
        var request = new JoinRequest
        {
            Name = _options.Name, VmType = _options.VmType ?? "", Cores = (uint)(_options.MaxThreads > 0 ? _options.MaxThreads : Environment.ProcessorCount),
            Memory = (ulong)Lending, RegionBytes = (ulong)_options.RegionSize, Spot = _options.Spot,
        };
        foreach (var (key, value) in _options.Labels)
            request.Labels.Add(key, value);
        var headers = new Metadata { { "authorization", "Bearer " + _options.JoinToken } };
        var response = await _managers.CallAsync("Join", (m, o) => m.Members.JoinAsync(request, o.WithHeaders(headers)), cancellationToken).ConfigureAwait(false);
        var grant = new Grant(response.ServerId, response.AdmissionKey.ToByteArray(), response.VmType, response.HeartbeatInterval.ToTimeSpan(), response.HeartbeatTtl.ToTimeSpan());
        var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = _options.Listen, RegionSize = _options.RegionSize, MemoryLimit = Math.Max(Lending, _options.RegionSize), MaxThreads = _options.MaxThreads,
            AdmissionKey = grant.Key, ServerId = grant.ServerId, CommitMemory = _options.CommitMemory, LoggerFactory = _options.LoggerFactory,
        });
        var incarnation = new Incarnation(grant, server);
        try
        {
            await SendHeartbeatAsync(incarnation, withEndpoints: true, cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            server.Dispose();
            throw;
        }
        lock (_gate)
            _current = incarnation;
        Interlocked.Increment(ref _incarnations);
        _logger.LogInformation("Joined as {ServerId} ({VmType}) at {Endpoints}; heartbeats every {Interval} s, TTL {Ttl} s", grant.ServerId, grant.VmType,
                               string.Join(", ", server.Endpoints), grant.Interval.TotalSeconds, grant.Ttl.TotalSeconds);
    }

    private async Task<HeartbeatResponse> SendHeartbeatAsync(Incarnation incarnation, bool withEndpoints, CancellationToken cancellationToken)
    {
        var decision = Volatile.Read(ref _decision);
        var body = new HeartbeatBody
        {
            Sequence = ++incarnation.Sequence, Sent = Timestamp.FromDateTimeOffset(DateTimeOffset.UtcNow),
            MemoryLimit = (ulong)incarnation.Server.MemoryLimit, MemoryLent = (ulong)incarnation.Server.MemoryInUse, GiveBack = (ulong)decision.GiveBack,
            Leaving = _leaving,
        };
        if (decision.By is { } by)
            body.GiveBackBy = Timestamp.FromDateTimeOffset(by);
        ulong[] dropped;
        lock (incarnation.Dropped)
            dropped = incarnation.Dropped.ToArray();
        body.Dropped.AddRange(dropped);
        if (withEndpoints)
            foreach (string endpoint in incarnation.Server.Endpoints)
                body.Endpoints[endpoint[..endpoint.IndexOf(':')]] = endpoint;
        byte[] bytes = body.ToByteArray();
        var request = new HeartbeatRequest { ServerId = incarnation.Grant.ServerId, Body = ByteString.CopyFrom(bytes), Mac = ByteString.CopyFrom(HeartbeatMac.Compute(incarnation.Grant.Key, incarnation.Grant.ServerId, bytes)) };
        // A heartbeat that arrives after the TTL is worth nothing; the next one goes an interval after this one ends.
        var timeout = withEndpoints ? _options.CallTimeout : incarnation.Grant.Ttl - incarnation.Grant.Interval;
        var response = await _managers.CallAsync("Heartbeat", (m, o) => m.Members.HeartbeatAsync(request, o), cancellationToken, timeout).ConfigureAwait(false);
        State = response.State.ToString().ToLowerInvariant();
        Volatile.Write(ref incarnation.CacheId, response.CacheId);
        lock (incarnation.Dropped)
            incarnation.Dropped.RemoveAll(dropped.Contains);  // the manager knows now
        if (response.Left && body.Leaving)
            _left.TrySetResult();
        Volatile.Write(ref _lastAccepted, Stopwatch.GetTimestamp());
        return response;
    }

    private async Task HeartbeatLoopAsync()
    {
        var token = _stop.Token;
        while (!token.IsCancellationRequested)
        {
            var incarnation = Current;
            try
            {
                await _wake.WaitAsync(incarnation.Grant.Interval, token).ConfigureAwait(false);  // an interval, or at once when the host wants memory back
                await SendHeartbeatAsync(incarnation, withEndpoints: false, token).ConfigureAwait(false);
            }
            catch (OperationCanceledException) when (token.IsCancellationRequested)
            {
                return;
            }
            catch (RemoteCacheManagerException e) when (e.Refusal == Refusals.Rejoin && _leaving)
            {
                _logger.LogWarning("The manager no longer holds {ServerId} as a member ({Reason}) as it leaves: nothing left to move", incarnation.Grant.ServerId, e.Message);
                _left.TrySetResult();
                return;
            }
            catch (RemoteCacheManagerException e) when (e.Refusal == Refusals.Rejoin)
            {
                _logger.LogWarning("The manager no longer holds {ServerId} as a member ({Reason}); dropping everything it holds and joining again", incarnation.Grant.ServerId, e.Message);
                await RejoinAsync(incarnation, token).ConfigureAwait(false);
            }
            catch (RemoteCacheManagerException e)
            {
                // The managers are away or refused one heartbeat: the next one may pass. If none passes for the TTL, the
                // manager fails this incarnation and says so at the next heartbeat it hears.
                _logger.LogWarning("A heartbeat of {ServerId} was not accepted: {Reason}", incarnation.Grant.ServerId, e.Message);
            }
        }
    }

    // With LendAuto: reads the host every WatchPeriod, lends what it spares, and gives memory back when it needs it
    // (the manager is told at once; past half the reserve the cache is dropped here and then).
    private async Task WatchHostAsync()
    {
        var token = _stop.Token;
        using var timer = new PeriodicTimer(_options.WatchPeriod);
        try
        {
            while (await timer.WaitForNextTickAsync(token).ConfigureAwait(false))
            {
                Incarnation incarnation;
                lock (_gate)
                {
                    if (_current is null)
                        return;
                    incarnation = _current;
                }
                var before = Volatile.Read(ref _decision);
                var now = DateTimeOffset.UtcNow;
                var decision = _policy!.Decide(_host!.Read(), incarnation.Server.MemoryInUse, now);
                Volatile.Write(ref _decision, decision);
                if (decision.Limit != incarnation.Server.MemoryLimit)
                    incarnation.Server.SetMemoryLimit(decision.Limit);
                ulong cacheId = Volatile.Read(ref incarnation.CacheId);
                if (decision.DropNow && cacheId != 0 && incarnation.Server.DropCache(cacheId) > 0)
                {
                    _logger.LogWarning("The host needs {Bytes} bytes back sooner than cache {CacheId} can move: dropped it", decision.GiveBack, cacheId);
                    lock (incarnation.Dropped)
                        incarnation.Dropped.Add(cacheId);
                    Volatile.Write(ref incarnation.CacheId, 0UL);
                    _givingBack ??= (now, now);
                    _wake.Release();
                }
                else if (decision.GiveBack > 0 && before.GiveBack == 0)
                {
                    _logger.LogWarning("The host needs {Bytes} bytes back by {By:O}: asking the manager to move the cache away", decision.GiveBack, decision.By);
                    _givingBack = (now, decision.By ?? now);
                    _wake.Release();
                }
                else if (decision.GiveBack == 0 && before.GiveBack > 0)
                {
                    _wake.Release();
                }
                if (decision.GiveBack == 0 && _givingBack is { } asked)
                {
                    // Whether memory goes back in time is what the host cares about: said once per give-back, with the margin.
                    var margin = asked.By - now;
                    _logger.LogInformation("Gave the host its memory back {Seconds:0.000} s after it asked, {Margin:0.000} s {Side} the deadline (lending {Lent} of {Limit} bytes)",
                                           (now - asked.Asked).TotalSeconds, Math.Abs(margin.TotalSeconds), margin >= TimeSpan.Zero ? "before" : "after",
                                           incarnation.Server.MemoryInUse, decision.Limit);
                    _givingBack = null;
                }
            }
        }
        catch (OperationCanceledException) when (token.IsCancellationRequested)
        {
        }
        catch (ObjectDisposedException) when (token.IsCancellationRequested)
        {
        }
    }

    private async Task RejoinAsync(Incarnation old, CancellationToken token)
    {
        old.Server.Dispose();
        var wait = TimeSpan.FromMilliseconds(200);
        while (!token.IsCancellationRequested)
        {
            try
            {
                await StartIncarnationAsync(token).ConfigureAwait(false);
                Rejoined?.Invoke(ServerId);
                return;
            }
            catch (Exception e) when (e is RemoteCacheManagerException or RemoteCacheException or ArgumentException)
            {
                _logger.LogWarning("Joining again failed ({Reason}); next try in {Wait} ms", e.Message, wait.TotalMilliseconds);
                try
                {
                    await Task.Delay(wait, token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    return;
                }
                wait = TimeSpan.FromTicks(Math.Min(wait.Ticks * 2, TimeSpan.FromSeconds(10).Ticks));
            }
        }
    }

    /// <summary>
    /// Leaves the cluster before stopping (an operator's SIGTERM): heartbeats say so, the manager moves the cache this
    /// server holds to another server with a deadline sized to move it (its clients follow it, as for any reclaim), takes
    /// no cache here meanwhile, and forgets the server once it holds none. Then <see cref="DisposeAsync"/> stops it with
    /// nothing lost. A new cache is never placed here after this call.
    /// </summary>
    /// <returns>True once the manager has forgotten the server; false when <paramref name="timeout"/> passed first (it is
    /// still a member: disposing it then fails it after the TTL, and its cache's watchers get ServerFailed).</returns>
    public async Task<bool> LeaveAsync(TimeSpan timeout, CancellationToken cancellationToken = default)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(timeout, TimeSpan.Zero);
        _leaving = true;
        _wake.Release();  // say so now, not an interval from now
        var waited = Stopwatch.StartNew();
        var ttl = Current.Grant.Ttl;
        while (!_left.Task.IsCompleted)
        {
            // Managers that answer no heartbeat for the TTL fail this server anyway: waiting longer moves nothing.
            if (waited.Elapsed >= timeout || Stopwatch.GetElapsedTime(Volatile.Read(ref _lastAccepted)) > ttl)
            {
                _logger.LogWarning("Did not leave within {Seconds:0.0} s ({Why}): the managers still hold {ServerId}", waited.Elapsed.TotalSeconds,
                                   waited.Elapsed >= timeout ? "the time given" : "no manager answered for the heartbeat TTL", ServerId);
                return false;
            }
            await Task.WhenAny(_left.Task, Task.Delay(TimeSpan.FromMilliseconds(100), cancellationToken)).ConfigureAwait(false);
            cancellationToken.ThrowIfCancellationRequested();
        }
        _logger.LogInformation("Left: the managers hold nothing on {ServerId} and forgot it", ServerId);
        return true;
    }

    /// <summary>
    /// Stops the heartbeats and the server: its clients see their connections close. Unless it left first
    /// (<see cref="LeaveAsync"/>), the manager fails it after the heartbeat TTL (a server holding a cache: its watchers
    /// get ServerFailed) and forgets it.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        await _stop.CancelAsync().ConfigureAwait(false);
        await _loop.ConfigureAwait(false);
        await _watch.ConfigureAwait(false);
        Incarnation? last;
        lock (_gate)
        {
            last = _current;
            _current = null;
        }
        last?.Server.Dispose();
        await _managers.DisposeAsync().ConfigureAwait(false);
        _stop.Dispose();
        _wake.Dispose();
    }

    private sealed record Grant(string ServerId, byte[] Key, string VmType, TimeSpan Interval, TimeSpan Ttl);

    private sealed class Incarnation(Grant grant, RemoteCacheServer server)
    {
        public Grant Grant { get; } = grant;

        public RemoteCacheServer Server { get; } = server;

        // Heartbeats sent, the last one's number (only the heartbeat loop, or the start before it, sends).
        public ulong Sequence;

        // The cache the manager placed here, as its last answered heartbeat said.
        public ulong CacheId;

        // Caches dropped for the host, until a heartbeat that reported them was answered.
        public List<ulong> Dropped { get; } = new();
    }
}

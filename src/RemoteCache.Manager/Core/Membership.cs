using System;
using System.Collections.Generic;
using System.Linq;
using System.Security.Cryptography;
using System.Text;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Core;

/// <summary>What a server asks for when it joins (ServerMembership.Join), as checked by the service layer's bounds.</summary>
public sealed record JoinSpec(string Name, string? VmType, IReadOnlyDictionary<string, string> Labels, int Cores, long Memory, long RegionBytes, bool Spot);

/// <summary>What a server that joined is told: its id, its own admission key, its type and its heartbeat timing.</summary>
public sealed record JoinGrant(string ServerId, byte[] AdmissionKey, string VmType, TimeSpan HeartbeatInterval, TimeSpan HeartbeatTtl);

/// <summary>A heartbeat's content once its MAC verified (HeartbeatBody).</summary>
public sealed record HeartbeatReport(ulong Sequence, DateTimeOffset Sent, IReadOnlyDictionary<string, string> Endpoints, long MemoryLimit, long MemoryLent)
{
    /// <summary>Bytes its host needs back (harvesting), and by when.</summary>
    public long GiveBack { get; init; }

    public DateTimeOffset? GiveBackBy { get; init; }

    /// <summary>Caches the server dropped because its host needed the memory sooner than they could move.</summary>
    public IReadOnlyList<ulong> Dropped { get; init; } = Array.Empty<ulong>();

    /// <summary>The server is stopping: move its cache away, then forget it.</summary>
    public bool Leaving { get; init; }
}

/// <summary>What a heartbeat leaves: the server's record as the manager holds it (as it was, when it just left), and whether it was leaving and is now forgotten.</summary>
public sealed record HeartbeatOutcome(ServerRecord Server, bool Left);

/// <summary>
/// Servers that join by themselves: join tokens (issued and revoked by operators, kept as hashes), Join (a new
/// incarnation named and keyed by the manager), heartbeats (authenticated by a MAC under the server's key, in order,
/// recent) and the failure of servers whose heartbeats stop (<see cref="ExpireAsync"/>, a leader's duty).
/// </summary>
public sealed partial class Membership : StateUnit
{
    /// <summary>What a join token's text starts with.</summary>
    public const string TokenPrefix = "rcj_";

    /// <summary>Bounds of what a joining server says about itself.</summary>
    public const int MaxNameChars = 40, MaxLabels = 16, MaxLabelChars = 63, MaxCores = 1024;

    /// <summary>A heartbeat's body at most.</summary>
    public const int MaxHeartbeatBytes = 16 << 10;

    /// <summary>A join token's life at most, and when none is asked for.</summary>
    public static readonly TimeSpan MaxTokenTtl = TimeSpan.FromDays(365), DefaultTokenTtl = TimeSpan.FromHours(24);

    /// <summary>How long an expired or revoked token is still named as such (then it is forgotten: "not known").</summary>
    public static readonly TimeSpan TokenMemory = TimeSpan.FromDays(1);

    private static readonly string[] s_transports = { "tcp", "shm", "verbs" };

    private readonly IManagerStore _store;
    private readonly IServerAdmin _admin;
    private readonly VmCatalogue _catalogue;
    private readonly ManagerOptions _options;
    private readonly ServerKeys _keys;
    private readonly Pool _pool;
    private readonly IServerAllocator _allocator;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;

    public Membership(ManagerState state, IManagerStore store, IServerAdmin admin, VmCatalogue catalogue, ManagerOptions options, ServerKeys keys, Pool pool,
                      IServerAllocator allocator, TimeProvider time, ILogger<Membership> logger)
        : base(state)
    {
        _store = store;
        _admin = admin;
        _catalogue = catalogue;
        _options = options;
        _keys = keys;
        _pool = pool;
        _allocator = allocator;
        _time = time;
        _logger = logger;
    }

    /// <summary>Issues a join token valid for <paramref name="ttl"/>; returns its record and its text (given out once).</summary>
    public async Task<(JoinTokenRecord Token, string Text)> IssueTokenAsync(TimeSpan ttl, string description, CancellationToken cancellationToken)
    {
        if (ttl <= TimeSpan.Zero || ttl > MaxTokenTtl)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"ttl {ttl} must be positive and at most {MaxTokenTtl.TotalDays} days");
        if (description.Length > 200)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"description has {description.Length} characters; at most 200");
        string id = Convert.ToHexString(RandomNumberGenerator.GetBytes(6)).ToLowerInvariant();
        string text = $"{TokenPrefix}{id}_{Convert.ToBase64String(RandomNumberGenerator.GetBytes(32)).TrimEnd('=').Replace('+', '-').Replace('/', '_')}";
        var now = _time.GetUtcNow();
        var token = new JoinTokenRecord(id, Hash(text), description, now, now + ttl);
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var change = new StoreChange();
            change.PutJoinTokens.Add(token);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
        _logger.LogInformation("Issued join token {TokenId} ({Description}), valid until {Expires:O}", id, description, token.Expires);
        return (token, text);
    }

    /// <summary>Every join token the manager keeps.</summary>
    public Task<IReadOnlyList<JoinTokenRecord>> TokensAsync(CancellationToken cancellationToken) => _store.JoinTokensAsync(cancellationToken);

    /// <summary>Revokes a token: later joins with it are refused. Revoking one already revoked changes nothing.</summary>
    public async Task<JoinTokenRecord> RevokeTokenAsync(string tokenId, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var token = (await _store.JoinTokensAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(t => t.TokenId == tokenId)
                        ?? throw new ManagerRefusal(RefusalKind.NotFound, $"join token {Input.Quote(tokenId)} is not known to this manager");
            if (token.Revoked is not null)
                return token;
            token = token with { Revoked = _time.GetUtcNow() };
            var change = new StoreChange();
            change.PutJoinTokens.Add(token);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            _logger.LogInformation("Revoked join token {TokenId}", tokenId);
            return token;
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>
    /// Registers a new incarnation of a server presenting <paramref name="tokenText"/>: named after the name it gave and
    /// an incarnation never given before, keyed with a key of its own, in state Joining until its first heartbeat's
    /// endpoints are checked. Every refusal is logged with <paramref name="peer"/>.
    /// </summary>
    public async Task<JoinGrant> JoinAsync(string? tokenText, JoinSpec spec, string peer, CancellationToken cancellationToken)
    {
        try
        {
            if (_allocator.Name != StaticPoolAllocator.AllocatorName)
                throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"this manager runs the {_allocator.Name} allocator; servers join a static pool only (--allocator static)");
            await CheckTokenAsync(tokenText, cancellationToken).ConfigureAwait(false);  // a bad token is refused without the lock
            var type = TypeFor(spec);
            await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
            try
            {
                // Read again under the lock, where every change of a token is made and committed: a revocation or another
                // join since the check above is seen, never written over.
                var token = await CheckTokenAsync(tokenText, cancellationToken).ConfigureAwait(false);
                string serverId;
                do
                    serverId = $"{spec.Name}.{Convert.ToHexString(RandomNumberGenerator.GetBytes(6)).ToLowerInvariant()}";
                while (_servers.ContainsKey(serverId));
                var now = _time.GetUtcNow();
                var server = new ServerRecord(serverId, new Dictionary<string, string>(), type.Name, spec.Spot, StaticPoolAllocator.AllocatorName)
                {
                    Status = ServerStatus.Joining,
                    Join = new JoinRecord(spec.Name, spec.Labels, spec.Cores, spec.Memory, token.TokenId, now),
                };
                var change = new StoreChange();
                change.PutServers.Add(server);
                change.PutJoinTokens.Add(token with { Joins = token.Joins + 1 });
                await CommitAsync(change, cancellationToken).ConfigureAwait(false);
                _state.Heartbeats[serverId] = new Heartbeat(now, 0, spec.Memory, 0);
                _logger.LogInformation("Server {ServerId} joined from {Peer} with token {TokenId} as a {VmType}{Spot} ({Memory} bytes, {Cores} cores)",
                                       serverId, peer, token.TokenId, type.Name, spec.Spot ? " (spot)" : "", spec.Memory, spec.Cores);
                return new JoinGrant(serverId, _keys.Joined(serverId), type.Name, _options.HeartbeatInterval, _options.HeartbeatTtl);
            }
            finally
            {
                _lock.Release();
            }
        }
        catch (ManagerRefusal e)
        {
            _logger.LogWarning("Refused a join from {Peer} (name {Name}): {Reason}", peer, Input.Quote(spec.Name), e.Message);
            throw;
        }
    }

    // The token the text names, if it is one this manager issued, unexpired and not revoked.
    private async Task<JoinTokenRecord> CheckTokenAsync(string? text, CancellationToken cancellationToken)
    {
        if (string.IsNullOrEmpty(text))
            throw new ManagerRefusal(RefusalKind.Unauthenticated, "Join needs a join token: send 'authorization: Bearer rcj_…' (an operator issues one: remotecache join-token issue)");
        var match = TokenText().Match(text);
        if (!match.Success)
            throw new ManagerRefusal(RefusalKind.Unauthenticated, $"the join token {Input.Quote(text)} ({text.Length} characters) is not one a manager issues (rcj_<12 hex>_<secret>); an API key is no join token");
        string id = match.Groups[1].Value;
        var token = (await _store.JoinTokensAsync(cancellationToken).ConfigureAwait(false)).FirstOrDefault(t => t.TokenId == id);
        if (token is null || !CryptographicOperations.FixedTimeEquals(Convert.FromHexString(token.Sha256), Convert.FromHexString(Hash(text))))
            throw new ManagerRefusal(RefusalKind.Unauthenticated, $"join token {id} is not known to this manager (never issued, forgotten a day after it ended, or its secret does not match)");
        if (token.Revoked is { } revoked)
            throw new ManagerRefusal(RefusalKind.Unauthenticated, $"join token {id} was revoked at {revoked:O}");
        if (token.Expires <= _time.GetUtcNow())
            throw new ManagerRefusal(RefusalKind.Unauthenticated, $"join token {id} expired at {token.Expires:O}");
        return token;
    }

    private static string Hash(string text) => Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(text))).ToLowerInvariant();

    [GeneratedRegex("^rcj_([0-9a-f]{12})_[A-Za-z0-9_-]{43}$")]
    private static partial Regex TokenText();

    [GeneratedRegex("^[A-Za-z0-9-]+$")]
    private static partial Regex NameText();

    [GeneratedRegex("^[A-Za-z0-9._/-]+$")]
    private static partial Regex LabelText();

    // The catalogue type the server lends as: the one it names, if it can lend it, else the largest it can.
    private VmType TypeFor(JoinSpec spec)
    {
        if (spec.Name.Length is 0 or > MaxNameChars || !NameText().IsMatch(spec.Name))
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"name {Input.Quote(spec.Name)} must be 1 to {MaxNameChars} of A-Z, a-z, 0-9 and '-'");
        if (spec.Labels.Count > MaxLabels)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"{spec.Labels.Count} labels; at most {MaxLabels}");
        foreach (var (key, value) in spec.Labels)
            if (key.Length is 0 or > MaxLabelChars || value.Length is 0 or > MaxLabelChars || !LabelText().IsMatch(key) || !LabelText().IsMatch(value))
                throw new ManagerRefusal(RefusalKind.InvalidArgument, $"label {Input.Quote(key)}={Input.Quote(value)}: keys and values are 1 to {MaxLabelChars} of A-Z, a-z, 0-9, '.', '_', '/', '-'");
        if (spec.Cores is < 1 or > MaxCores)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"cores {spec.Cores} must be 1 to {MaxCores}");
        if (spec.RegionBytes != _catalogue.RegionBytes)
            throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"the server lends regions of {spec.RegionBytes} bytes; the catalogue's are {_catalogue.RegionBytes}");
        bool Fits(VmType t) => _catalogue.RegionsOf(t) * _catalogue.RegionBytes <= spec.Memory && t.Cores <= spec.Cores && (!spec.Spot || t.SpotPerHour is not null);
        if (!string.IsNullOrEmpty(spec.VmType))
        {
            var named = _catalogue.Find(spec.VmType) ?? throw new ManagerRefusal(RefusalKind.FailedPrecondition, $"vm_type {Input.Quote(spec.VmType)} is not in the catalogue");
            return Fits(named)
                ? named
                : throw new ManagerRefusal(RefusalKind.FailedPrecondition,
                    $"a {named.Name} lends {_catalogue.RegionsOf(named) * _catalogue.RegionBytes} bytes on {named.Cores} cores{(spec.Spot ? " as spot" : "")}; the server offers {spec.Memory} bytes on {spec.Cores}{(spec.Spot && named.SpotPerHour is null ? " and the type has no spot price" : "")}");
        }
        return _catalogue.VmTypes.Where(Fits).OrderByDescending(t => _catalogue.RegionsOf(t)).ThenByDescending(t => t.Cores).ThenBy(t => t.PricePerHour(spec.Spot)).FirstOrDefault()
               ?? throw new ManagerRefusal(RefusalKind.FailedPrecondition,
                   $"the server offers {spec.Memory} bytes on {spec.Cores} cores{(spec.Spot ? " as spot" : "")}: less than any VM type of the catalogue ({string.Join(", ", _catalogue.VmTypes.Select(t => $"{t.Name} {_catalogue.RegionsOf(t) * _catalogue.RegionBytes} B/{t.Cores} cores"))})");
    }

    /// <summary>
    /// A heartbeat: its MAC checked under the key of the server it names, then its order and time, then what it says. The
    /// first one of a joining server registers its endpoints once the admin interface answered there under its key (an
    /// older incarnation registered at one of them is then failed: it is gone from there). Returns the server as the
    /// manager now holds it.
    /// </summary>
    public async Task<HeartbeatOutcome> HeartbeatAsync(string serverId, ReadOnlyMemory<byte> body, ReadOnlyMemory<byte> mac, Func<ReadOnlyMemory<byte>, HeartbeatReport> parse,
                                                   string peer, CancellationToken cancellationToken)
    {
        if (body.Length > MaxHeartbeatBytes)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the heartbeat's body has {body.Length} bytes; at most {MaxHeartbeatBytes}");
        if (!CryptographicOperations.FixedTimeEquals(mac.Span, V1.HeartbeatMac.Compute(_keys.Joined(serverId), serverId, body.Span)))
            throw Refused(serverId, peer, RefusalKind.Unauthenticated, $"the heartbeat of {Input.Quote(serverId)} does not verify: its MAC is not one under that server's key");
        HeartbeatReport report = parse(body);
        var now = _time.GetUtcNow();
        if ((report.Sent - now).Duration() > _options.HeartbeatTtl)
            throw Refused(serverId, peer, RefusalKind.Unauthenticated, $"the heartbeat of {serverId} was sent at {report.Sent:O}, more than the TTL ({_options.HeartbeatTtl.TotalSeconds} s) from this manager's clock ({now:O}): a replay, or a clock to set right");
        if (_state.Heartbeats.TryGetValue(serverId, out var last) && report.Sequence <= last.Sequence)
            throw Refused(serverId, peer, RefusalKind.Unauthenticated, $"the heartbeat of {serverId} has sequence {report.Sequence}, not above the last accepted ({last.Sequence}): a replayed or reordered heartbeat");
        if (!View.Servers.TryGetValue(serverId, out var server) || server.Join is null)
            throw Refused(serverId, peer, RefusalKind.FailedPrecondition, $"server {serverId} is not known to this manager (it was failed and forgotten): drop what it holds and join again", V1.Refusals.Rejoin);
        if (server.Status == ServerStatus.Failed)
            throw Refused(serverId, peer, RefusalKind.FailedPrecondition, $"server {serverId} was failed ({server.FailureReason}): drop what it holds and join again", V1.Refusals.Rejoin);
        if (server.Status == ServerStatus.Joining)
            server = await RegisterEndpointsAsync(server, report, peer, cancellationToken).ConfigureAwait(false);
        else if (report.Endpoints.Count > 0 && !SameEndpoints(report.Endpoints, server.Endpoints))
            throw Refused(serverId, peer, RefusalKind.InvalidArgument, $"server {serverId} registered its endpoints at its first heartbeat; they never change (join again to serve elsewhere)");
        // Accepted: the sequence is taken (a concurrent duplicate of it loses here) and the silence ends.
        var beat = new Heartbeat(now, report.Sequence, report.MemoryLimit, report.MemoryLent);
        if (last is null ? !_state.Heartbeats.TryAdd(serverId, beat) : !_state.Heartbeats.TryUpdate(serverId, beat, last))
            throw Refused(serverId, peer, RefusalKind.Unauthenticated, $"the heartbeat of {serverId} with sequence {report.Sequence} arrived twice at once: one of them is a replay");
        if (report.Leaving)
            return await LeaveAsync(server, cancellationToken).ConfigureAwait(false);
        return new HeartbeatOutcome(await HarvestAsync(server, report, now, cancellationToken).ConfigureAwait(false), false);
    }

    // A server that is stopping: its cache moves away (a deadline sized to move it, as for a host's give-back), and once
    // it holds none it is forgotten: no ServerFailed for anyone, no record left behind.
    private async Task<HeartbeatOutcome> LeaveAsync(ServerRecord server, CancellationToken cancellationToken)
    {
        string id = server.ServerId;
        if (server.CacheId == 0)
        {
            if (await ForgetAsync(id, server.Status, cancellationToken).ConfigureAwait(false))
            {
                _state.Heartbeats.TryRemove(id, out _);
                _logger.LogInformation("Server {ServerId} left (it holds no cache): forgotten", id);
                return new HeartbeatOutcome(server, true);
            }
        }
        else if (server.Status is ServerStatus.Ready or ServerStatus.Draining && View.Caches.TryGetValue(server.CacheId, out var cache))
        {
            var notice = MoveNotice(cache);
            _logger.LogInformation("Server {ServerId} is leaving: reclaiming cache {CacheId} with {Notice} s of notice", id, server.CacheId, notice.TotalSeconds);
            await _pool.ReclaimServerAsync(id, notice, cancellationToken, byHost: true).ConfigureAwait(false);
        }
        return new HeartbeatOutcome(View.Servers.TryGetValue(id, out var now) ? now : server, false);
    }

    // A deadline sized to move a cache, with room for a loaded client (four times the catalogue's rate, and 5 s).
    private TimeSpan MoveNotice(CacheRecord cache) =>
        TimeSpan.FromSeconds(cache.RegionsPerServer * (double)cache.RegionBytes / _catalogue.SpotPolicy.MigrationBytesPerSecond) * 4 + TimeSpan.FromSeconds(5);

    // What the server's host said it needs: a cache it dropped is failed; memory to give back reclaims its cache (a
    // deadline sized to move it, never after the host's) or keeps caches off it while it is free; memory to spare again
    // lets it take caches.
    private async Task<ServerRecord> HarvestAsync(ServerRecord server, HeartbeatReport report, DateTimeOffset now, CancellationToken cancellationToken)
    {
        string id = server.ServerId;
        if (report.Dropped.Count > 0 && server.CacheId != 0 && report.Dropped.Contains(server.CacheId))
        {
            await _pool.ServerFailedAsync(id, $"its host needed {report.GiveBack} bytes back sooner than cache {server.CacheId} could move: the server dropped it",
                                          cancellationToken).ConfigureAwait(false);
            return View.Servers.TryGetValue(id, out var failed) ? failed : server;
        }
        var type = _catalogue.Find(server.VmType)!;
        bool shortOfType = report.MemoryLimit < _catalogue.RegionsOf(type) * _catalogue.RegionBytes;
        if (report.GiveBack > 0 && server.CacheId != 0 && server.Status is ServerStatus.Ready or ServerStatus.Draining &&
            View.Caches.TryGetValue(server.CacheId, out var cache))
        {
            // A deadline sized to move the cache, not the host's estimate, which is when the server itself drops the cache
            // if the host needs the memory by then. A shorter deadline would only lose caches the host could still have
            // waited for.
            var notice = MoveNotice(cache);
            _logger.LogWarning("Server {ServerId}'s host needs {Bytes} bytes back (by {By:O} at the latest): reclaiming cache {CacheId} with {Notice} s of notice", id,
                               report.GiveBack, report.GiveBackBy, server.CacheId, notice.TotalSeconds);
            await _pool.ReclaimServerAsync(id, notice, cancellationToken, byHost: true).ConfigureAwait(false);
        }
        else if ((report.GiveBack > 0 || shortOfType) && server.CacheId == 0 && server.Status == ServerStatus.Ready)
        {
            await SetHostDrainedAsync(id, true, cancellationToken).ConfigureAwait(false);
        }
        else if (report.GiveBack == 0 && !shortOfType && server.HostDrained && server.Status == ServerStatus.Draining)
        {
            await SetHostDrainedAsync(id, false, cancellationToken).ConfigureAwait(false);
        }
        return View.Servers.TryGetValue(id, out var now2) ? now2 : server;
    }

    // A free server whose host has less to spare than its type lends takes no cache (Draining, marked as the host's
    // doing so that an operator's drain is never undone), and takes caches again once the host has it to spare.
    private async Task SetHostDrainedAsync(string serverId, bool drained, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (!_servers.TryGetValue(serverId, out var server) || server.CacheId != 0)
                return;
            ServerRecord changed;
            if (drained && server.Status == ServerStatus.Ready)
                changed = server with { Status = ServerStatus.Draining, HostDrained = true };
            else if (!drained && server.HostDrained && server.Status == ServerStatus.Draining)
                changed = server with { Status = ServerStatus.Ready, HostDrained = false };
            else
                return;
            var change = new StoreChange();
            change.PutServers.Add(changed);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            _logger.LogInformation("Server {ServerId} {What}", serverId, drained ? "takes no cache: its host has less to spare than its type lends" : "takes caches again: its host has the memory to spare");
        }
        finally
        {
            _lock.Release();
        }
    }

    private ManagerRefusal Refused(string serverId, string peer, RefusalKind kind, string message, string? tag = null)
    {
        _logger.LogWarning("Refused a heartbeat of {ServerId} from {Peer}: {Reason}", Input.Quote(serverId), peer, message);
        return new ManagerRefusal(kind, message, tag);
    }

    private static bool SameEndpoints(IReadOnlyDictionary<string, string> a, IReadOnlyDictionary<string, string> b) =>
        a.Count == b.Count && a.All(e => b.TryGetValue(e.Key, out var v) && v == e.Value);

    // The first heartbeat: the endpoints are checked (the admin interface answers at the tcp one under the server's own
    // key, with its id, the catalogue's regions and at least its type's memory), older incarnations there are failed, and
    // the server takes caches.
    private async Task<ServerRecord> RegisterEndpointsAsync(ServerRecord server, HeartbeatReport report, string peer, CancellationToken cancellationToken)
    {
        string id = server.ServerId;
        if (!report.Endpoints.ContainsKey("tcp"))
            throw Refused(id, peer, RefusalKind.InvalidArgument, $"the first heartbeat of {id} must name its endpoints, a tcp one among them (the admin interface is reached there)");
        foreach (var (transport, endpoint) in report.Endpoints)
        {
            if (!s_transports.Contains(transport) || !endpoint.StartsWith(transport + ":", StringComparison.Ordinal))
                throw Refused(id, peer, RefusalKind.InvalidArgument, $"endpoint {Input.Quote(transport)} = {Input.Quote(endpoint)}: transports are tcp, shm and verbs, each endpoint starting with its own");
            if (transport != "shm" && (endpoint.Contains(":0.0.0.0:", StringComparison.Ordinal) || endpoint.Contains(":[::]:", StringComparison.Ordinal)))
                throw Refused(id, peer, RefusalKind.InvalidArgument, $"endpoint {Input.Quote(endpoint)} is a wildcard, which no client can reach: listen on the host's address");
        }
        var registered = server with { Endpoints = new Dictionary<string, string>(report.Endpoints) };
        ServerProbe probe;
        try
        {
            probe = await _pool.CheckAsync(registered, id, cancellationToken).ConfigureAwait(false);
        }
        catch (ManagerRefusal e)
        {
            throw Refused(id, peer, e.Kind, e.Message);
        }
        // Whoever was registered at these endpoints is not there any more: the new incarnation answered in its place.
        var network = registered.Endpoints.Where(e => e.Key != "shm").Select(e => e.Value).ToHashSet(StringComparer.Ordinal);
        foreach (var older in View.Servers.Values.Where(s => s.ServerId != id && s.Status != ServerStatus.Failed && s.Endpoints.Any(e => e.Key != "shm" && network.Contains(e.Value))).ToList())
            await _pool.ServerFailedAsync(older.ServerId, $"a new incarnation ({id}) answers at its endpoint {older.AdminEndpoint}: it restarted and lost what it held",
                                          cancellationToken).ConfigureAwait(false);
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (!_servers.TryGetValue(id, out var current) || current.Status != ServerStatus.Joining)
                return current ?? throw Refused(id, peer, RefusalKind.FailedPrecondition, $"server {id} was forgotten while its endpoints were checked: join again", V1.Refusals.Rejoin);
            var ready = current with { Endpoints = registered.Endpoints, Status = ServerStatus.Ready, LastProbe = _time.GetUtcNow(), MemoryLent = probe.MemoryLent };
            var change = new StoreChange();
            change.PutServers.Add(ready);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            _state.Probes[id] = probe with { At = _time.GetUtcNow() };
            _logger.LogInformation("Server {ServerId} is allocatable at {Endpoints}", id, string.Join(", ", ready.Endpoints.Values));
            return ready;
        }
        finally
        {
            _lock.Release();
        }
    }

    /// <summary>
    /// The leader's duty: a joined server with no accepted heartbeat for the TTL (counted from this term's start at the
    /// earliest) is failed, a joining one forgotten, a failed one that holds no cache forgotten (it never comes back as
    /// itself), and tokens a day past their end forgotten.
    /// </summary>
    public async Task ExpireAsync(CancellationToken cancellationToken)
    {
        var now = _time.GetUtcNow();
        foreach (var server in View.Servers.Values.Where(s => s.Join is not null).ToList())
        {
            var since = _state.Heartbeats.TryGetValue(server.ServerId, out var beat) && beat.At > _state.TermStarted ? beat.At : _state.TermStarted;
            if (server.Join!.Joined > since)
                since = server.Join.Joined;
            var silent = now - since;
            if (server.Status == ServerStatus.Failed)
            {
                if (server.CacheId == 0)
                    await ForgetAsync(server.ServerId, ServerStatus.Failed, cancellationToken).ConfigureAwait(false);
            }
            else if (silent > _options.HeartbeatTtl)
            {
                if (server.Status == ServerStatus.Joining)
                {
                    _logger.LogWarning("Server {ServerId} joined and sent no heartbeat that registered it within {Ttl} s; forgotten", server.ServerId, _options.HeartbeatTtl.TotalSeconds);
                    await ForgetAsync(server.ServerId, ServerStatus.Joining, cancellationToken).ConfigureAwait(false);
                }
                else
                {
                    await _pool.ServerFailedAsync(server.ServerId, $"no heartbeat for {silent.TotalSeconds:0.0} s (TTL {_options.HeartbeatTtl.TotalSeconds:0.###} s)", cancellationToken).ConfigureAwait(false);
                }
            }
        }
    }

    /// <summary>Forgets join tokens that ended (expired or revoked) over <see cref="TokenMemory"/> ago.</summary>
    public async Task ForgetEndedTokensAsync(CancellationToken cancellationToken)
    {
        var now = _time.GetUtcNow();
        var ended = (await _store.JoinTokensAsync(cancellationToken).ConfigureAwait(false))
            .Where(t => (t.Revoked is { } r && r < t.Expires ? r : t.Expires) + TokenMemory < now).Select(t => t.TokenId).ToList();
        if (ended.Count == 0)
            return;
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var change = new StoreChange();
            change.DeleteJoinTokens.AddRange(ended.Take(StoreChange.MaxWrites - 2));
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _lock.Release();
        }
    }

    private async Task<bool> ForgetAsync(string serverId, ServerStatus status, CancellationToken cancellationToken)
    {
        await _state.EnterAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (!_servers.TryGetValue(serverId, out var server) || server.Status != status || server.CacheId != 0)
                return false;
            var change = new StoreChange();
            change.DeleteServers.Add(serverId);
            await CommitAsync(change, cancellationToken).ConfigureAwait(false);
            return true;
        }
        finally
        {
            _lock.Release();
        }
    }
}

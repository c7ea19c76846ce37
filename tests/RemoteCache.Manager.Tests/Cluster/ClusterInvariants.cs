using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Linq;
using System.Threading.Tasks;
using RemoteCache.Admin;
using RemoteCache.Manager.V1;
using Xunit;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// What the manager says (its caches, of the tenants asked, and its pool) and what every server really holds (its admin
/// interface), read at one moment. Servers that did not answer are in <see cref="Unreachable"/>, not in <see cref="Held"/>.
/// </summary>
public sealed record ClusterSnapshot(
    IReadOnlyList<Cache> Caches,
    IReadOnlyList<Server> Servers,
    IReadOnlyDictionary<string, IReadOnlyList<ServerCacheInfo>> Held,
    IReadOnlyDictionary<string, string> Unreachable)
{
    public Cache? Find(ulong cacheId) => Caches.FirstOrDefault(c => c.CacheId == cacheId);

    public override string ToString()
    {
        var text = new System.Text.StringBuilder();
        foreach (var c in Caches)
            text.Append(CultureInfo.InvariantCulture, $"cache {c.CacheId} on [{string.Join(", ", c.Servers.Select(s => s.ServerId))}] until {c.Lease?.Expires}; ");
        foreach (var s in Servers)
            text.Append(CultureInfo.InvariantCulture, $"server {s.ServerId} {s.State} rented by {s.CacheId}; ");
        foreach (var (id, held) in Held)
            text.Append(CultureInfo.InvariantCulture, $"{id} holds [{string.Join(", ", held.Select(h => h.CacheId))}]; ");
        foreach (var (id, why) in Unreachable)
            text.Append(CultureInfo.InvariantCulture, $"{id} unreachable ({why}); ");
        return text.ToString();
    }
}

/// <summary>
/// The invariants every scenario checks, each a function from snapshots to violations (empty: it holds), so that a
/// scenario can assert one at once or wait until it holds (<see cref="EventuallyAsync"/>: e.g. a server that was
/// unreachable drops a deallocated cache at the manager's next probe).
/// </summary>
public static class ClusterInvariants
{
    /// <summary>Reads the manager's caches (of <paramref name="tenantKeys"/>; alice by default) and pool, and every server's caches.</summary>
    public static async Task<ClusterSnapshot> TakeAsync(BedManager manager, IEnumerable<BedServer> servers, params string[] tenantKeys)
    {
        var caches = new List<Cache>();
        foreach (string key in tenantKeys.Length == 0 ? new[] { TestManager.AliceKey } : tenantKeys)
            caches.AddRange((await manager.Tenant(key).ListCachesAsync(new ListCachesRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Caches);
        var pool = (await manager.Operator().ListServersAsync(new ListServersRequest(), deadline: DateTime.UtcNow.AddSeconds(10))).Servers.ToList();
        var held = new Dictionary<string, IReadOnlyList<ServerCacheInfo>>();
        var unreachable = new Dictionary<string, string>();
        foreach (var s in servers)
        {
            if (s.Host.Removed || s.Host.LinkCut)
            {
                unreachable[s.ServerId] = s.Host.Removed ? "host removed" : "link cut";
                continue;
            }
            try
            {
                held[s.ServerId] = await s.ListCachesAsync().ConfigureAwait(false);
            }
            catch (RemoteCacheException e)
            {
                unreachable[s.ServerId] = e.Message;
            }
        }
        return new ClusterSnapshot(caches, pool, held, unreachable);
    }

    /// <summary>No server is in two caches (as a member or a pending replacement): nothing rented twice.</summary>
    public static IEnumerable<string> NoServerRentedTwice(ClusterSnapshot s) =>
        s.Caches.SelectMany(c => c.Servers.Select(x => x.ServerId).Concat(c.Replacements.Select(r => r.Server.ServerId)).Distinct().Select(id => (Server: id, c.CacheId)))
                .GroupBy(p => p.Server).Where(g => g.Count() > 1)
                .Select(g => $"server {g.Key} is in caches {string.Join(", ", g.Select(p => p.CacheId))}");

    /// <summary>
    /// The pool agrees with the caches: a server rented by a cache is one of that cache's, and every server of a live
    /// cache is rented by it (no server leaked: rented by a cache that is gone, or free while a cache uses it).
    /// Needs every tenant's caches in the snapshot.
    /// </summary>
    public static IEnumerable<string> PoolMatchesCaches(ClusterSnapshot s)
    {
        foreach (var server in s.Servers.Where(x => x.CacheId != 0))
        {
            var cache = s.Find(server.CacheId);
            if (cache is null)
                yield return $"server {server.ServerId} is rented by cache {server.CacheId}, which the manager does not list";
            else if (!cache.Servers.Any(x => x.ServerId == server.ServerId) && !cache.Replacements.Any(r => r.Server.ServerId == server.ServerId))
                yield return $"server {server.ServerId} is rented by cache {server.CacheId}, which does not name it";
        }
        foreach (var cache in s.Caches)
            foreach (var member in cache.Servers)
                if (s.Servers.FirstOrDefault(x => x.ServerId == member.ServerId) is { } server && server.CacheId != cache.CacheId)
                    yield return $"cache {cache.CacheId} names server {member.ServerId}, which the pool has rented by {server.CacheId}";
    }

    /// <summary>
    /// Every cache a reachable server holds is one the manager granted it now (a cache it lists, with that server, not
    /// failed): no server holds a cache the manager does not know.
    /// </summary>
    public static IEnumerable<string> NoUnknownCachesOnServers(ClusterSnapshot s)
    {
        foreach (var (serverId, held) in s.Held)
        {
            var state = s.Servers.FirstOrDefault(x => x.ServerId == serverId)?.State;
            foreach (var h in held)
            {
                var cache = s.Find(h.CacheId);
                if (cache is null)
                    yield return $"server {serverId} holds cache {h.CacheId}, which the manager does not list";
                else if (!cache.Servers.Any(x => x.ServerId == serverId) && !cache.Replacements.Any(r => r.Server.ServerId == serverId))
                    yield return $"server {serverId} holds cache {h.CacheId}, whose servers are others";
                else if (state == ServerState.Failed)
                    yield return $"server {serverId} holds cache {h.CacheId} though the manager failed it";
            }
        }
    }

    /// <summary>
    /// Every cache in <paramref name="opened"/> that the manager lists exists on each of its reachable, not failed
    /// servers, with the lease end the manager gives it (to the millisecond, as servers keep it). Caches exist on servers
    /// only once a client has connected, hence the list of those opened.
    /// </summary>
    public static IEnumerable<string> OpenedCachesHeld(ClusterSnapshot s, IEnumerable<ulong> opened)
    {
        foreach (ulong id in opened)
        {
            if (s.Find(id) is not { } cache)
                continue;
            long leaseMs = cache.Lease.Expires.ToDateTimeOffset().ToUnixTimeMilliseconds();
            foreach (var member in cache.Servers)
            {
                if (!s.Held.TryGetValue(member.ServerId, out var held) || s.Servers.FirstOrDefault(x => x.ServerId == member.ServerId)?.State == ServerState.Failed)
                    continue;
                var here = held.Where(h => h.CacheId == id).ToList();
                if (here.Count == 0)
                    yield return $"cache {id} is not on its server {member.ServerId}";
                else if (here.Any(h => h.LeaseEnd?.ToUnixTimeMilliseconds() is not { } end || Math.Abs(end - leaseMs) > 1))
                    yield return $"cache {id} on {member.ServerId} ends at {here[0].LeaseEnd:O}; the manager says {cache.Lease.Expires}";
            }
        }
    }

    /// <summary>The invariants that hold in any settled state (pass the caches opened by clients).</summary>
    public static IEnumerable<string> Consistent(ClusterSnapshot s, IEnumerable<ulong>? opened = null) =>
        NoServerRentedTwice(s).Concat(PoolMatchesCaches(s)).Concat(NoUnknownCachesOnServers(s)).Concat(OpenedCachesHeld(s, opened ?? Array.Empty<ulong>()));

    /// <summary>
    /// Across a fault: every cache of <paramref name="before"/> (but those <paramref name="gone"/>) is still listed, with the
    /// same servers, token and lease end (no cache lost, none moved, leases intact), and no cache appeared that
    /// <paramref name="added"/> does not name (none duplicated). With <paramref name="renewing"/> (clients renew the
    /// caches' leases meanwhile) a lease may end later than before, never earlier.
    /// </summary>
    public static IEnumerable<string> NothingLostOrDuplicated(ClusterSnapshot before, ClusterSnapshot after, IEnumerable<ulong>? gone = null,
                                                            IEnumerable<ulong>? added = null, bool renewing = false)
    {
        var goneSet = (gone ?? Array.Empty<ulong>()).ToHashSet();
        var addedSet = (added ?? Array.Empty<ulong>()).ToHashSet();
        foreach (var was in before.Caches.Where(c => !goneSet.Contains(c.CacheId)))
        {
            if (after.Find(was.CacheId) is not { } now)
            {
                yield return $"cache {was.CacheId} was lost";
                continue;
            }
            if (!was.Servers.Select(x => x.ServerId).SequenceEqual(now.Servers.Select(x => x.ServerId)))
                yield return $"cache {was.CacheId} moved from [{string.Join(", ", was.Servers.Select(x => x.ServerId))}] to [{string.Join(", ", now.Servers.Select(x => x.ServerId))}]";
            if (was.Token != now.Token)
                yield return $"cache {was.CacheId} has another token";
            if (renewing ? now.Lease?.Expires is null || was.Lease?.Expires is { } end && now.Lease.Expires < end : !Equals(was.Lease?.Expires, now.Lease?.Expires))
                yield return $"cache {was.CacheId}'s lease ended at {was.Lease?.Expires}, now at {now.Lease?.Expires}";
        }
        foreach (var c in after.Caches.Where(c => !before.Caches.Any(b => b.CacheId == c.CacheId) && !addedSet.Contains(c.CacheId)))
            yield return $"cache {c.CacheId} appeared";
        foreach (var id in goneSet.Where(id => after.Find(id) is not null))
            yield return $"cache {id} should be gone but is listed";
    }

    /// <summary>Fails the test with the violations and the snapshot when <paramref name="violations"/> is not empty.</summary>
    public static void Holds(IEnumerable<string> violations, ClusterSnapshot snapshot)
    {
        var list = violations.ToList();
        Assert.True(list.Count == 0, $"invariants broken: {string.Join("; ", list)}\nstate: {snapshot}");
    }

    /// <summary>Takes snapshots until <paramref name="check"/> finds nothing wrong (then returns that snapshot) or the time runs out (then fails with the last violations).</summary>
    public static async Task<ClusterSnapshot> EventuallyAsync(Func<Task<ClusterSnapshot>> take, Func<ClusterSnapshot, IEnumerable<string>> check, TimeSpan timeout)
    {
        var waited = Stopwatch.StartNew();
        while (true)
        {
            var snapshot = await take().ConfigureAwait(false);
            var violations = check(snapshot).ToList();
            if (violations.Count == 0)
                return snapshot;
            if (waited.Elapsed > timeout)
            {
                Holds(violations, snapshot);
                return snapshot;
            }
            await Task.Delay(250).ConfigureAwait(false);
        }
    }
}

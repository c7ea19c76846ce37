using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace RemoteCache;

/// <summary>
/// A health check of a <see cref="RemoteCacheManagerClient"/> and the caches it opened: the registration's failure status
/// when no manager replica serves, when a cache's lease has ended or when a cache is disposed; degraded when a cache's lease
/// is about to end (less than a quarter of its length is left: renewals have failed since half was left) or a server of a
/// cache went away (the manager replaces it); healthy otherwise. Registered with
/// <c>services.AddHealthChecks().AddRemoteCacheManager()</c>.
/// </summary>
public sealed class RemoteCacheManagerHealthCheck : IHealthCheck
{
    private readonly RemoteCacheManagerClient _manager;

    /// <summary>Checks <paramref name="manager"/>.</summary>
    public RemoteCacheManagerHealthCheck(RemoteCacheManagerClient manager)
    {
        ArgumentNullException.ThrowIfNull(manager);
        _manager = manager;
    }

    /// <inheritdoc />
    public async Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(context);
        var failure = context.Registration.FailureStatus;
        IReadOnlyList<RemoteCacheManagerState> managers;
        try
        {
            managers = await _manager.CheckManagersAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (ObjectDisposedException)
        {
            return new HealthCheckResult(failure, "the manager client is disposed");
        }
        var data = new Dictionary<string, object>
        {
            ["managers"] = managers.ToDictionary(m => m.Address.ToString(), m => (object)m.Status),
        };
        int serving = managers.Count(m => m.Serving);
        if (serving == 0)
            return new HealthCheckResult(failure, $"no manager serves: {string.Join("; ", managers.Select(m => $"{m.Address}: {m.Status}"))}", data: data);
        var failing = new List<string>();
        var degraded = new List<string>();
        var now = DateTimeOffset.UtcNow;
        foreach (var cache in _manager.OpenCaches)
        {
            var left = cache.LeaseExpires - now;
            if (left <= TimeSpan.Zero)
                failing.Add($"the lease of {cache.Name} ended at {cache.LeaseExpires:O}");
            else if (left < cache.LeaseLength / 4)
                degraded.Add($"the lease of {cache.Name} ends in {left.TotalSeconds:F0} s (its renewals fail)");
            var result = RemoteCacheHealthCheck.Check(cache.Client, HealthStatus.Degraded);
            if (result.Status == HealthStatus.Degraded)
                degraded.Add($"{result.Description} (the manager replaces them)");
        }
        string managersSay = $"{serving} of {managers.Count} manager(s) serve";
        if (failing.Count > 0)
            return new HealthCheckResult(failure, $"{managersSay}; {string.Join("; ", failing.Concat(degraded))}", data: data);
        if (degraded.Count > 0)
            return HealthCheckResult.Degraded($"{managersSay}; {string.Join("; ", degraded)}", data: data);
        return HealthCheckResult.Healthy($"{managersSay}; {_manager.OpenCaches.Count} cache(s) open, their leases current", data);
    }
}

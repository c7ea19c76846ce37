using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Diagnostics.HealthChecks;

namespace RemoteCache;

/// <summary>
/// A health check of one <see cref="RemoteCacheClient"/>: healthy while it is connected to every server of its cache;
/// otherwise the registration's failure status, naming the servers that went away and whether the client is reconnecting
/// to them. A client that was disposed, or could not be opened, is reported the same way (never thrown). Registered with
/// <c>services.AddHealthChecks().AddRemoteCache()</c>.
/// </summary>
public sealed class RemoteCacheHealthCheck : IHealthCheck
{
    private readonly Func<RemoteCacheClient> _client;

    /// <summary>Checks the client <paramref name="client"/> gives (resolved at each check: opening it may fail).</summary>
    public RemoteCacheHealthCheck(Func<RemoteCacheClient> client)
    {
        ArgumentNullException.ThrowIfNull(client);
        _client = client;
    }

    /// <inheritdoc />
    public Task<HealthCheckResult> CheckHealthAsync(HealthCheckContext context, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(context);
        var failure = context.Registration.FailureStatus;
        RemoteCacheClient client;
        try
        {
            client = _client();
        }
        catch (Exception e) when (e is RemoteCacheException or ArgumentException or InvalidOperationException)
        {
            return Task.FromResult(new HealthCheckResult(failure, $"the cache could not be opened: {e.Message}", e));
        }
        return Task.FromResult(Check(client, failure));
    }

    /// <summary>What the check reports for <paramref name="client"/>, with <paramref name="failure"/> as the status of a failing one.</summary>
    public static HealthCheckResult Check(RemoteCacheClient client, HealthStatus failure)
    {
        ArgumentNullException.ThrowIfNull(client);
        IReadOnlyList<RemoteCacheServerState> servers;
        try
        {
            servers = client.CheckServers();
        }
        catch (ObjectDisposedException)
        {
            return new HealthCheckResult(failure, $"{client.Name} is disposed");
        }
        var data = new Dictionary<string, object>
        {
            ["servers"] = servers.ToDictionary(s => s.Endpoint, s => (object)s.Status.ToString()),
            ["recoveries"] = client.Recoveries,
        };
        var gone = servers.Where(s => !s.IsConnected).ToList();
        if (gone.Count == 0)
            return HealthCheckResult.Healthy($"{client.Name}: connected to its {servers.Count} server(s)", data);
        string which = string.Join(", ", gone.Select(s => $"{s.Endpoint} ({s.Status})"));
        string then = client.Reconnect ? "reconnecting; their regions fail at once until then" : "not reconnecting (RemoteCacheOptions.Reconnect is off)";
        return new HealthCheckResult(failure, $"{client.Name}: {gone.Count} of {servers.Count} server(s) gone: {which}; {then}", data: data);
    }
}

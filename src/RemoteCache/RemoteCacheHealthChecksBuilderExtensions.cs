using System;
using System.Collections.Generic;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using RemoteCache;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Adds <see cref="RemoteCacheHealthCheck"/> for a client registered with <c>AddRemoteCache</c>.</summary>
public static class RemoteCacheHealthChecksBuilderExtensions
{
    /// <summary>
    /// Checks the <see cref="RemoteCacheClient"/> registered with <c>services.AddRemoteCache(…)</c> (or, with
    /// <paramref name="cacheName"/>, the keyed one of that name): healthy while connected to every server of its cache.
    /// The check resolves the client, so a cache not opened yet is opened by the first check.
    /// </summary>
    /// <param name="builder">The health checks.</param>
    /// <param name="cacheName">The key of a cache registered by name; null: the unnamed one.</param>
    /// <param name="name">The check's name. Default: "remotecache" or "remotecache:<paramref name="cacheName"/>".</param>
    /// <param name="failureStatus">What a failing check reports. Default: <see cref="HealthStatus.Unhealthy"/>.</param>
    /// <param name="tags">Tags to filter checks by (e.g. "ready").</param>
    public static IHealthChecksBuilder AddRemoteCache(this IHealthChecksBuilder builder, string? cacheName = null, string? name = null,
                                                      HealthStatus? failureStatus = null, IEnumerable<string>? tags = null)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.Add(new HealthCheckRegistration(
            name ?? (cacheName is null ? "remotecache" : $"remotecache:{cacheName}"),
            sp => new RemoteCacheHealthCheck(cacheName is null
                ? () => sp.GetRequiredService<RemoteCacheClient>()
                : () => sp.GetRequiredKeyedService<RemoteCacheClient>(cacheName)),
            failureStatus, tags));
    }
}

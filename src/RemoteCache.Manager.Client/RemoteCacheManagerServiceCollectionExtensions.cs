using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using RemoteCache;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Registers <see cref="RemoteCacheManagerClient"/> with a service collection.</summary>
public static class RemoteCacheManagerServiceCollectionExtensions
{
    /// <summary>
    /// Registers a singleton <see cref="RemoteCacheManagerClient"/> with options bound from <paramref name="configuration"/>
    /// (see <see cref="RemoteCacheManagerOptions"/>), validated when the host starts; the caches it opens log and meter
    /// through the container's factories. Disposed with the container (closing, not deleting, its caches).
    /// </summary>
    public static IServiceCollection AddRemoteCacheManager(this IServiceCollection services, IConfiguration configuration)
    {
        ArgumentNullException.ThrowIfNull(configuration);
        return services.AddRemoteCacheManager(builder => builder.Bind(configuration));
    }

    /// <summary>Registers a singleton <see cref="RemoteCacheManagerClient"/> configured in code; see <see cref="AddRemoteCacheManager(IServiceCollection, IConfiguration)"/>.</summary>
    public static IServiceCollection AddRemoteCacheManager(this IServiceCollection services, Action<RemoteCacheManagerOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(configure);
        return services.AddRemoteCacheManager(builder => builder.Configure(configure));
    }

    private static IServiceCollection AddRemoteCacheManager(this IServiceCollection services, Action<OptionsBuilder<RemoteCacheManagerOptions>> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        var builder = services.AddOptions<RemoteCacheManagerOptions>();
        configure(builder);
        builder.ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<RemoteCacheManagerOptions>, Validator>());
        services.TryAddSingleton(sp =>
        {
            var options = sp.GetRequiredService<IOptions<RemoteCacheManagerOptions>>().Value;
            options.Cache.LoggerFactory ??= sp.GetService<ILoggerFactory>();
            options.Cache.MeterFactory ??= sp.GetService<IMeterFactory>();
            return new RemoteCacheManagerClient(options);
        });
        return services;
    }

    /// <summary>Checks bound options with <see cref="RemoteCacheManagerOptions.Validate"/>, the one set of rules.</summary>
    private sealed class Validator : IValidateOptions<RemoteCacheManagerOptions>
    {
        public ValidateOptionsResult Validate(string? name, RemoteCacheManagerOptions options)
        {
            try
            {
                options.Validate();
                return ValidateOptionsResult.Success;
            }
            catch (ArgumentException e)
            {
                return ValidateOptionsResult.Fail(e.Message);
            }
        }
    }
}

/// <summary>Adds <see cref="RemoteCacheManagerHealthCheck"/> for the client registered with <c>AddRemoteCacheManager</c>.</summary>
public static class RemoteCacheManagerHealthChecksBuilderExtensions
{
    /// <summary>
    /// Checks the <see cref="RemoteCacheManagerClient"/> registered with <c>services.AddRemoteCacheManager(…)</c>: its
    /// managers serve, and the caches it opened have current leases and all their servers.
    /// </summary>
    /// <param name="builder">The health checks.</param>
    /// <param name="name">The check's name. Default: "remotecache-manager".</param>
    /// <param name="failureStatus">What a failing check reports. Default: <see cref="HealthStatus.Unhealthy"/>.</param>
    /// <param name="tags">Tags to filter checks by (e.g. "ready").</param>
    public static IHealthChecksBuilder AddRemoteCacheManager(this IHealthChecksBuilder builder, string name = "remotecache-manager",
                                                             HealthStatus? failureStatus = null, IEnumerable<string>? tags = null)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.Add(new HealthCheckRegistration(
            name, sp => new RemoteCacheManagerHealthCheck(sp.GetRequiredService<RemoteCacheManagerClient>()), failureStatus, tags));
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using RemoteCache;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>
/// What <see cref="RemoteCacheServiceCollectionExtensions.AddRemoteCache(IServiceCollection, IConfiguration)"/> binds:
/// the servers of a cache and how to open it. In configuration:
/// <c>"RemoteCache": { "Endpoints": [ "tcp:10.0.0.5:7300" ], "Cache": { "RegionsPerServer": 2, "OperationTimeout": "00:00:05" } }</c>.
/// </summary>
public sealed class RemoteCacheClientOptions
{
    /// <summary>The servers the cache spans, in order ("tcp:HOST:PORT", "shm:SOCKET_PATH", "verbs:HOST:PORT").</summary>
    public IList<string> Endpoints { get; set; } = new List<string>();

    /// <summary>How to open the cache. Its logger and meter factories, when not set, are the container's.</summary>
    public RemoteCacheOptions Cache { get; set; } = new();
}

/// <summary>Registers <see cref="RemoteCacheClient"/> with a service collection.</summary>
public static class RemoteCacheServiceCollectionExtensions
{
    /// <summary>
    /// Registers a singleton <see cref="RemoteCacheClient"/> opened with options bound from <paramref name="configuration"/>
    /// (see <see cref="RemoteCacheClientOptions"/>), validated when the host starts. The cache is opened when first
    /// resolved (blocking for the connects, up to <see cref="RemoteCacheOptions.ConnectTimeout"/> per server) and
    /// disposed with the container.
    /// </summary>
    public static IServiceCollection AddRemoteCache(this IServiceCollection services, IConfiguration configuration)
    {
        ArgumentNullException.ThrowIfNull(configuration);
        return services.AddRemoteCache(null, builder => builder.Bind(configuration));
    }

    /// <summary>Registers a singleton <see cref="RemoteCacheClient"/> configured in code; see <see cref="AddRemoteCache(IServiceCollection, IConfiguration)"/>.</summary>
    public static IServiceCollection AddRemoteCache(this IServiceCollection services, Action<RemoteCacheClientOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(configure);
        return services.AddRemoteCache(null, builder => builder.Configure(configure));
    }

    /// <summary>
    /// Registers one of several caches: a keyed singleton <see cref="RemoteCacheClient"/> (resolve it with
    /// <c>[FromKeyedServices(name)]</c> or <c>GetRequiredKeyedService&lt;RemoteCacheClient&gt;(name)</c>) whose options are
    /// bound from <paramref name="configuration"/> as named options; <paramref name="name"/> is also the cache's
    /// <see cref="RemoteCacheOptions.Name"/> unless the configuration gives one.
    /// </summary>
    public static IServiceCollection AddRemoteCache(this IServiceCollection services, string name, IConfiguration configuration)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        ArgumentNullException.ThrowIfNull(configuration);
        return services.AddRemoteCache(name, builder => builder.Bind(configuration));
    }

    private static IServiceCollection AddRemoteCache(this IServiceCollection services, string? name,
                                                     Action<OptionsBuilder<RemoteCacheClientOptions>> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        var builder = services.AddOptions<RemoteCacheClientOptions>(name ?? Options.Options.DefaultName);
        configure(builder);
        builder.ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<RemoteCacheClientOptions>, RemoteCacheClientOptionsValidator>());
        if (name is null)
            services.AddSingleton(sp => Open(sp, Options.Options.DefaultName, null));
        else
            services.AddKeyedSingleton(name, (sp, _) => Open(sp, name, name));
        return services;
    }

    private static RemoteCacheClient Open(IServiceProvider services, string optionsName, string? cacheName)
    {
        var options = services.GetRequiredService<IOptionsMonitor<RemoteCacheClientOptions>>().Get(optionsName);
        var cache = options.Cache;
        cache.Name ??= cacheName;
        cache.LoggerFactory ??= services.GetService<ILoggerFactory>();
        cache.MeterFactory ??= services.GetService<IMeterFactory>();
        return RemoteCacheClient.Open(options.Endpoints, cache);
    }

    /// <summary>Checks bound options with <see cref="RemoteCacheOptions.Validate"/>, the one set of rules.</summary>
    private sealed class RemoteCacheClientOptionsValidator : IValidateOptions<RemoteCacheClientOptions>
    {
        public ValidateOptionsResult Validate(string? name, RemoteCacheClientOptions options)
        {
            if (options.Cache is null)
                return ValidateOptionsResult.Fail($"{nameof(RemoteCacheClientOptions)}.{nameof(RemoteCacheClientOptions.Cache)} is null");
            try
            {
                options.Cache.Validate((options.Endpoints ?? new List<string>()).ToArray());
                return ValidateOptionsResult.Success;
            }
            catch (ArgumentException e)
            {
                return ValidateOptionsResult.Fail(e.Message);
            }
        }
    }
}

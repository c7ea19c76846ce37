using System;
using System.Collections.Generic;
using System.Threading.Tasks;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using OpenTelemetry.Metrics;
using RemoteCache;

// Usage: Telemetry [ENDPOINT]. Without an endpoint it starts a cache server in this process.
RemoteCacheServer? embedded = null;
string endpoint;
if (args.Length > 0)
{
    endpoint = args[0];
}
else
{
    embedded = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = { "tcp:127.0.0.1:0" }, RegionSize = 64 << 20, MemoryLimit = 256 << 20 });
    endpoint = embedded.Endpoints[0];
}

// appsettings.json sits next to the program, wherever it is started from.
var builder = Host.CreateApplicationBuilder(new HostApplicationBuilderSettings { ContentRootPath = AppContext.BaseDirectory });
builder.Configuration.AddInMemoryCollection(new Dictionary<string, string?> { ["RemoteCache:Endpoints:0"] = endpoint });
builder.Services.AddRemoteCache(builder.Configuration.GetSection("RemoteCache"));
builder.Services.AddOpenTelemetry().WithMetrics(metrics => metrics
    .AddMeter(RemoteCacheMetrics.MeterName)
    .AddConsoleExporter());

using (var host = builder.Build())
{
    await host.StartAsync();
    var cache = host.Services.GetRequiredService<RemoteCacheClient>();

    var value = new byte[256];
    for (int i = 0; i < 10_000; i++)
    {
        long address = i % 1024 * value.Length;
        await cache.WriteAsync(address, value);
        await cache.ReadAsync(address, value);
    }
    Console.WriteLine($"20000 operations on {cache.Name} ({cache.Capacity >> 20} MiB, {cache.Config})");

    // Exports now (the console exporter otherwise exports once a minute). Observable instruments (operations, bytes,
    // in flight) are read at each export; when the host is disposed the container's meters go first, so an export
    // after that no longer sees them.
    host.Services.GetRequiredService<MeterProvider>().ForceFlush();
    await host.StopAsync();
}
embedded?.Dispose();

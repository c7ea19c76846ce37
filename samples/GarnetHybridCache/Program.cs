// A product service that caches what its (slow) catalog returns with HybridCache: hot entries in this process, the rest
// in Garnet reached as any Redis. Run Garnet as remotecache-garnet and its log past memory lives in remote memory:
//
//   remotecache-garnet --port 6379 --rc-manager http://manager:5000 --rc-api-key-file key --rc-cache-size 8g
//   dotnet run --project samples/GarnetHybridCache -- --Garnet 127.0.0.1:6379 --urls http://127.0.0.1:5080
//   curl http://127.0.0.1:5080/products/42
using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.Caching.Hybrid;
using Microsoft.Extensions.DependencyInjection;

var builder = WebApplication.CreateBuilder(args);
builder.Services.AddStackExchangeRedisCache(options =>
{
    options.Configuration = builder.Configuration["Garnet"] ?? "127.0.0.1:6379";
    options.InstanceName = "products:";
});
builder.Services.AddHybridCache(options => options.DefaultEntryOptions = new HybridCacheEntryOptions
{
    Expiration = TimeSpan.FromHours(1),
    LocalCacheExpiration = TimeSpan.FromSeconds(30),
});
builder.Services.AddSingleton<Catalog>();

var app = builder.Build();
app.MapGet("/products/{id:int}", (int id, HybridCache cache, Catalog catalog, CancellationToken cancellationToken) =>
    cache.GetOrCreateAsync($"product:{id}", (catalog, id), static (state, token) => state.catalog.LoadAsync(state.id, token),
                           cancellationToken: cancellationToken));
// How many products this process had to load from the catalog (the rest came from a cache).
app.MapGet("/stats", (Catalog catalog) => new { loads = catalog.Loads });
app.Run();

/// <summary>A product as the catalog describes it.</summary>
public sealed record Product(int Id, string Name, decimal Price, string Description);

/// <summary>The slow source of truth the cache is in front of (a database, another service).</summary>
public sealed class Catalog
{
    private static readonly TimeSpan Latency = TimeSpan.FromMilliseconds(20);
    private long _loads;

    public long Loads => Interlocked.Read(ref _loads);

    public async ValueTask<Product> LoadAsync(int id, CancellationToken cancellationToken)
    {
        await Task.Delay(Latency, cancellationToken);
        Interlocked.Increment(ref _loads);
        return new Product(id, $"Product {id}", 1 + id % 100 + 0.99m, new string('d', 200 + id % 300));
    }
}

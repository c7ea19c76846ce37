using System;
using System.CommandLine;
using System.Globalization;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache;
using RemoteCache.Manager.Tests.Cluster;
using RemoteCache.Slo;

// Lines on stdout, read by the test (BedClient.cs): "created ID", then "progress OPS FAILED MISMATCHED" every 200 ms and
// "error TEXT" for each error the load keeps; when stdin closes, the load stops, the cache is deleted, and "final OPS
// FAILED MISMATCHED" ends the output.
var managers = new Option<string>("--managers") { Description = "Every manager's address, comma-separated", Required = true };
var apiKey = new Option<string>("--api-key") { Description = "The tenant's API key", Required = true };
var capacity = new Option<long>("--capacity") { Description = "Bytes of the cache", DefaultValueFactory = _ => 64L << 20 };
var lease = new Option<double>("--lease") { Description = "The cache's lease, seconds", DefaultValueFactory = _ => 30 };
var name = new Option<string>("--name") { Description = "The cache's name", DefaultValueFactory = _ => "bed-client" };
var root = new RootCommand("A client host of the RemoteCache test bed: a managed cache under a verified data load") { managers, apiKey, capacity, lease, name };
root.SetAction(async (parse, ct) =>
{
    await using var client = new RemoteCacheManagerClient(new RemoteCacheManagerOptions
    {
        Addresses = parse.GetValue(managers)!.Split(',').Select(a => new Uri(a)).ToList(),
        ApiKey = parse.GetValue(apiKey)!,
        CallTimeout = TimeSpan.FromSeconds(20),
        RetryLimit = TimeSpan.FromSeconds(1),
        Cache = new RemoteCacheOptions { OperationTimeout = TimeSpan.FromSeconds(5), ConnectTimeout = TimeSpan.FromSeconds(5) },
    });
    var cache = await client.CreateAsync(new ManagedCacheRequest
    {
        Capacity = parse.GetValue(capacity), Transport = "tcp", Lease = TimeSpan.FromSeconds(parse.GetValue(lease)), Name = parse.GetValue(name),
        Slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(50), RecordSize = 8, Retune = false },
    }, ct);
    Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"created {cache.CacheId}"));
    var load = VerifiedLoad.Start(cache);
    string Counts() => string.Create(CultureInfo.InvariantCulture, $"{load.Operations} {load.Failures} {load.Mismatches}");
    var input = Task.Run(() => Console.In.ReadToEnd(), CancellationToken.None);  // ends when the test closes stdin
    int told = 0;
    void Tell()
    {
        var errors = load.Errors;
        for (; told < errors.Count; told++)
            Console.WriteLine("error " + errors[told]);
        Console.WriteLine("progress " + Counts());
    }
    while (await Task.WhenAny(input, Task.Delay(200, CancellationToken.None)) != input)
        Tell();
    await load.StopAsync();
    Tell();
    await cache.DeleteAsync(CancellationToken.None);
    Console.WriteLine("final " + Counts());
    return 0;
});
return await root.Parse(args).InvokeAsync();

using System;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache;

using var cts = new CancellationTokenSource(TimeSpan.FromSeconds(30));

// A cache server in this process; in production it is `remotecache-server` on another machine.
using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
{
    Listen = { "tcp:127.0.0.1:0" },
    RegionSize = 64 << 20,
    MemoryLimit = 1L << 30,
});

await using var cache = await RemoteCacheClient.OpenAsync(server.Endpoints, new RemoteCacheOptions
{
    Token = "quickstart-secret",
    RegionsPerServer = 2,                 // 2 × 64 MiB
    Config = CacheConfig.HighThroughput,  // c=0 s=1 b=64 q=4; CacheConfig.LowLatency for b=1
}, cts.Token);

var greeting = Encoding.UTF8.GetBytes("hello, remote memory");
await cache.WriteAsync(4096, greeting, cts.Token);

var back = new byte[greeting.Length];
await cache.ReadAsync(4096, back, cts.Token);
Console.WriteLine($"{Encoding.UTF8.GetString(back)} ({cache.Capacity >> 20} MiB cache, {cache.Config})");

// Many operations in flight at once: they are batched on the way to the server.
var pending = new ValueTask[64];
for (int i = 0; i < pending.Length; i++)
    pending[i] = cache.WriteAsync(i * 8L, BitConverter.GetBytes((long)i), cts.Token);
foreach (var op in pending)
    await op;

try
{
    await cache.ReadAsync(cache.Capacity - 4, new byte[8], cts.Token);  // runs past the end
}
catch (ArgumentOutOfRangeException e)
{
    Console.WriteLine($"refused: {e.Message}");
}

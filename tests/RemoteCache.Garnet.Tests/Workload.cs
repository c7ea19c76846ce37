using System.Collections.Generic;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading.Tasks;
using StackExchange.Redis;
using Xunit;

namespace RemoteCache.Garnet.Tests;

/// <summary>What the tests write into Garnet and read back through StackExchange.Redis, checking every value.</summary>
internal static class Workload
{
    public const int Keys = 20_000;
    public const int Hashes = 20;

    // A GET that waits for a dead cache server waits up to the cache's operation timeout, then reads the files.
    public static Task<ConnectionMultiplexer> ConnectAsync(int port) =>
        ConnectionMultiplexer.ConnectAsync($"127.0.0.1:{port},asyncTimeout=20000,syncTimeout=20000");

    // ~140 B a record, 20 000 of them: about 11 times the 256 KiB of log Garnet keeps in memory; and 20 hashes, lists and sets of 100
    // (objects: their log is the object log).
    public static async Task LoadAsync(IDatabase db)
    {
        foreach (var batch in Enumerable.Range(0, Keys).Chunk(1000))
            await Task.WhenAll(batch.Select(i => db.StringSetAsync(Key(i), Value(i))));
        for (int h = 0; h < Hashes; h++)
        {
            await db.HashSetAsync($"hash:{h}", Enumerable.Range(0, 100).Select(f => new HashEntry($"f{f}", $"{h}/{f}")).ToArray());
            await db.ListRightPushAsync($"list:{h}", Enumerable.Range(0, 100).Select(e => (RedisValue)$"{h}#{e}").ToArray());
            await db.SetAddAsync($"set:{h}", Enumerable.Range(0, 100).Select(e => (RedisValue)$"{h}*{e}").ToArray());
        }
    }

    /// <summary>Reads every key back: each must hold what <see cref="LoadAsync"/> wrote, or <paramref name="rewritten"/>'s value for it.</summary>
    public static async Task VerifyAsync(IDatabase db, IReadOnlyDictionary<int, string>? rewritten = null)
    {
        foreach (var batch in Enumerable.Range(0, Keys).Chunk(1000))
        {
            var values = await Task.WhenAll(batch.Select(i => db.StringGetAsync(Key(i))));
            for (int j = 0; j < batch.Length; j++)
            {
                string expected = rewritten is not null && rewritten.TryGetValue(batch[j], out var last) ? last : Value(batch[j]);
                Assert.True(values[j] == expected, $"{Key(batch[j])}: read {values[j]}, wrote {expected}");
            }
        }
        for (int h = 0; h < Hashes; h++)
        {
            Assert.Equal($"{h}/57", (string?)await db.HashGetAsync($"hash:{h}", "f57"));
            Assert.Equal($"{h}#42", (string?)await db.ListGetByIndexAsync($"list:{h}", 42));
            Assert.Equal(100, await db.SetLengthAsync($"set:{h}"));
            Assert.True(await db.SetContainsAsync($"set:{h}", $"{h}*99"), $"set:{h} lost {h}*99");
        }
    }

    public static string Key(int i) => $"key:{i:D6}";

    public static string Value(int i) => $"{i:D6}:" + new string((char)('a' + i % 26), 93);

    /// <summary>remotecache-garnet's Garnet options for a small Garnet: 256 KiB of log in memory, segments of 1 MiB (4 MiB for objects), its files under <paramref name="directory"/>.</summary>
    public static IEnumerable<string> GarnetArgs(string directory, int port) => new[]
    {
        "--port", port.ToString(System.Globalization.CultureInfo.InvariantCulture), "--bind", "127.0.0.1",
        "--logdir", System.IO.Path.Combine(directory, "log"), "--checkpointdir", System.IO.Path.Combine(directory, "checkpoints"),
        "--memory", "256k", "--page", "64k", "--segment", "1m", "--object-log-segment", "4m", "--index", "1m",
    };

    public static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}

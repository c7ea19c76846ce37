using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using RemoteCache.Slo;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>What the managed-client tests share: requests, address-dependent bytes, checks, an event log.</summary>
internal static class ManagedClientKit
{
    public static readonly TimeSpan Patience = TimeSpan.FromSeconds(15);

    public static ManagedCacheRequest Request(long bytes, TimeSpan? lease = null) => new()
    {
        Capacity = bytes,
        Slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(50), Throughput = 1e5 },
        Transport = "tcp",
        Name = "test",
        Lease = lease,
    };

    // Bytes that depend on their address, so a read proves where it came from.
    public static byte[] Pattern(long address, int length, int seed = 0)
    {
        var bytes = new byte[length];
        for (int i = 0; i < length; i++)
            bytes[i] = (byte)(((address + i) * 2654435761L >> 13) + seed);
        return bytes;
    }

    public static async Task WriteAndVerifyAsync(RemoteCacheClient client, long address, int length, int seed = 0)
    {
        var data = Pattern(address, length, seed);
        await client.WriteAsync(address, data);
        var back = new byte[length];
        await client.ReadAsync(address, back);
        Assert.Equal(data, back);
    }

    public static async Task EventuallyAsync(Func<bool> condition, string what)
    {
        var deadline = DateTime.UtcNow + Patience;
        while (!condition())
        {
            Assert.True(DateTime.UtcNow < deadline, $"timed out waiting until {what}");
            await Task.Delay(50);
        }
    }

    /// <summary>Collects a cache's events in the background (Events is replayed from the cache's opening, then live).</summary>
    public sealed class EventLog
    {
        private readonly List<ManagedCacheEvent> _events = new();
        public readonly Task Reading;

        public EventLog(ManagedCache cache) => Reading = Task.Run(async () =>
        {
            await foreach (var e in cache.Events)
                lock (_events)
                    _events.Add(e);
        });

        public List<ManagedCacheEvent> Snapshot()
        {
            lock (_events)
                return _events.ToList();
        }
    }

    /// <summary>Checks that bytes [<paramref name="from"/>, <paramref name="length"/>) of the cache are those of <paramref name="source"/>.</summary>
    public static async Task VerifyAsync(RemoteCacheClient data, byte[] source, long length, long from = 0)
    {
        var chunk = new byte[MiB];
        for (long offset = from; offset < length; offset += chunk.Length)
        {
            int n = (int)Math.Min(chunk.Length, length - offset);
            await data.ReadAsync(offset, chunk.AsMemory(0, n));
            Assert.True(chunk.AsSpan(0, n).SequenceEqual(source.AsSpan((int)offset, n)), $"bytes at {offset} differ from the file");
        }
    }
}

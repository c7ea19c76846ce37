using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>
/// Pointer chasing, as FASTER follows a hash chain: the cache holds one cycle through all its cells, each cell the
/// index of the next, and every read is issued from the completion of the one before, on each path that runs
/// completions: the client's poller (the chain's thread blocks, as in CompletePending(wait: true)), a thread that
/// polls (TryComplete), an awaiting caller. Every hop must read the cell the cycle says, and every chain must end.
/// </summary>
public sealed class DependentReadTests
{
    private const int Cells = 4096;
    private const int Stride = 512;  // one cell a sector, as FASTER reads records: 2 MiB, two of the test server's regions
    private const int Hops = 2000;

    public static TheoryData<string, string, string, int> Cases()
    {
        var data = new TheoryData<string, string, string, int>();
        foreach (var transport in new[] { "shm", "tcp" })
            foreach (var config in new[] { nameof(CacheConfig.OneSided), nameof(CacheConfig.HighThroughput) })
                foreach (var path in new[] { "poller", "polling", "await" })
                    foreach (var threads in new[] { 1, 4 })
                        data.Add(transport, config, path, threads);
        return data;
    }

    [Theory]
    [MemberData(nameof(Cases))]
    public async Task ChainsOfDependentReadsEndWhereTheCycleSays(string transport, string config, string path, int threads)
    {
        using var server = ServerProcess.Start(transport);
        var options = Options(2, config == nameof(CacheConfig.OneSided) ? CacheConfig.OneSided : CacheConfig.HighThroughput,
                              $"chains {transport} {config}");
        await WithTimeout(TimeSpan.FromSeconds(60), $"{threads} chains on the {path} path over {transport} ({config})", async () =>
        {
            await using var client = RemoteCacheClient.Open(new[] { server.Endpoint }, options);
            var next = await WriteCycle(client, new Random(1300 + threads));
            var chains = Enumerable.Range(0, threads).Select(t => new Chain(client, next, start: t * (Cells / threads))).ToArray();
            var runs = chains.Select(chain => Task.Factory.StartNew(() => chain.Run(path), TaskCreationOptions.LongRunning)).ToArray();
            await Task.WhenAll(runs);
            foreach (var chain in chains)
                chain.AssertEndedRight();
        });
        server.AssertRunning();
    }

    // Sattolo's shuffle: one cycle through every cell, so no chain gets stuck in a short loop.
    private static async Task<long[]> WriteCycle(RemoteCacheClient client, Random rng)
    {
        var next = Enumerable.Range(0, Cells).Select(i => (long)i).ToArray();
        for (int i = Cells - 1; i > 0; i--)
        {
            int j = rng.Next(i);
            (next[i], next[j]) = (next[j], next[i]);
        }
        var cell = new byte[Stride];
        for (int i = 0; i < Cells; i++)
        {
            BitConverter.TryWriteBytes(cell, next[i]);
            BitConverter.TryWriteBytes(cell.AsSpan(Stride - 8), ~next[i]);
            await client.WriteAsync((long)i * Stride, cell);
        }
        return next;
    }

    private sealed class Chain
    {
        private static readonly IoCallback s_onRead = OnRead;
        private readonly RemoteCacheClient _client;
        private readonly long[] _next;
        private readonly long _start;
        private readonly ManualResetEventSlim _done = new();
        private readonly ConcurrentQueue<string> _failures = new();
        private IntPtr _buffer;
        private long _at;
        private int _remaining;

        public Chain(RemoteCacheClient client, long[] next, long start)
        {
            _client = client;
            _next = next;
            _start = start;
        }

        private long Expected
        {
            get
            {
                long at = _start;
                for (int i = 0; i < Hops; i++)
                    at = _next[at];
                return at;
            }
        }

        public void Run(string path)
        {
            _buffer = Allocate();
            try
            {
                _at = _start;
                _remaining = Hops;
                if (path == "await")
                {
                    AwaitHops().GetAwaiter().GetResult();
                    return;
                }
                Issue();
                if (path == "poller")
                {
                    if (!_done.Wait(TimeSpan.FromSeconds(30)))
                        throw new XunitException($"chain from {_start}: {_remaining} hops left after 30 s, waiting on the poller");
                    return;
                }
                var deadline = DateTime.UtcNow.AddSeconds(30);
                while (!_done.IsSet)
                {
                    if (_client.Poll() == 0)
                        Thread.Yield();
                    if (DateTime.UtcNow > deadline)
                        throw new XunitException($"chain from {_start}: {_remaining} hops left after 30 s of polling");
                }
            }
            finally
            {
                Free(_buffer);
            }
        }

        private static unsafe IntPtr Allocate() => (IntPtr)NativeMemory.AlignedAlloc(Stride, 4096);

        private static unsafe void Free(IntPtr buffer) => NativeMemory.AlignedFree((void*)buffer);

        private static unsafe ReadOnlySpan<byte> Cell(IntPtr buffer) => new((void*)buffer, Stride);

        private async Task AwaitHops()
        {
            var cell = new byte[Stride];
            for (; _remaining > 0; _remaining--)
            {
                await _client.ReadAsync(_at * Stride, cell);
                Check(cell);
            }
        }

        private void Issue() => _client.StartRead(_at * Stride, _buffer, Stride, s_onRead, this);

        private void Check(ReadOnlySpan<byte> cell)
        {
            long next = BitConverter.ToInt64(cell), check = BitConverter.ToInt64(cell[(Stride - 8)..]);
            if (next != _next[_at] || check != ~next)
                _failures.Enqueue($"cell {_at}: read ({next}, {~check}), the cycle says {_next[_at]}");
            _at = _next[_at];
        }

        private static void OnRead(RemoteCacheStatus status, object? context)
        {
            var chain = (Chain)context!;
            if (status != RemoteCacheStatus.Ok)
                chain._failures.Enqueue($"a read of cell {chain._at} completed with {status}");
            chain.Check(Cell(chain._buffer));
            if (--chain._remaining > 0 && status == RemoteCacheStatus.Ok)
                chain.Issue();  // from inside the completion, as FASTER issues the next read of a chain
            else
                chain._done.Set();
        }

        public void AssertEndedRight()
        {
            if (!_failures.IsEmpty)
                throw new XunitException($"chain from {_start}: {_failures.Count} wrong hops; first: {string.Join("; ", _failures.Take(3))}");
            Assert.Equal(0, _remaining);
            Assert.Equal(Expected, _at);
        }
    }
}

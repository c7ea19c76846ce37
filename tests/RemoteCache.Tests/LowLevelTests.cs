using System;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>The low-level path: unmanaged buffers, <see cref="IoCallback"/>s, driven by <see cref="RemoteCacheClient.Poll"/>.</summary>
public sealed class LowLevelTests
{
    private const int Slots = 63;
    private const int Slot = 32 << 10;
    private const int Span = 2 << 20;

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task CallbackPathReadsAndWritesUnmanagedBuffers(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(45), $"callback path over {transport}", () => Run(server.Endpoint, transport));
        server.AssertRunning();
    }

    /// <summary>Counts callbacks per context and remembers any that did not get Ok.</summary>
    private sealed class Tracker
    {
        public Tracker(int n) => Calls = new int[n];
        public readonly int[] Calls;
        public int Fired;
        public readonly ConcurrentQueue<string> Failures = new();

        public void OnComplete(RemoteCacheStatus status, object? context)
        {
            if (context is not int index || index < 0 || index >= Calls.Length)
            {
                Failures.Enqueue($"callback with unexpected context {context ?? "null"} (status {status})");
                Interlocked.Increment(ref Fired);
                return;
            }
            if (Interlocked.Increment(ref Calls[index]) != 1)
                Failures.Enqueue($"callback for operation {index} ran more than once");
            if (status != RemoteCacheStatus.Ok)
                Failures.Enqueue($"operation {index} completed with {status}, expected Ok");
            Interlocked.Increment(ref Fired);
        }

        /// <summary>Polls until every callback has fired (fails after 20 s); false if something went wrong.</summary>
        public void PollUntilDone(RemoteCacheClient client, string phase)
        {
            var watch = Stopwatch.StartNew();
            while (Volatile.Read(ref Fired) < Calls.Length)
            {
                client.Poll();
                if (watch.Elapsed > TimeSpan.FromSeconds(20))
                    throw new XunitException($"{phase}: only {Volatile.Read(ref Fired)} of {Calls.Length} callbacks fired within 20 s (Outstanding = {client.Outstanding})");
                Thread.Yield();
            }
            if (!Failures.IsEmpty)
                throw new XunitException($"{phase}: " + string.Join("; ", Failures.Take(10)));
            var missing = Enumerable.Range(0, Calls.Length).Where(i => Volatile.Read(ref Calls[i]) != 1).ToArray();
            if (missing.Length > 0)
                throw new XunitException($"{phase}: callbacks did not run exactly once for operations {string.Join(",", missing.Take(20))}");
        }
    }

    private static unsafe void Run(string endpoint, string transport)
    {
        var rng = new Random(4000);
        using var client = RemoteCacheClient.Open(new[] { endpoint }, Options(4, name: $"lowlevel-{transport}"));
        byte* src = (byte*)NativeMemory.Alloc(Span);
        byte* dst = (byte*)NativeMemory.Alloc(Span);
        bool settled = false;
        try
        {
            rng.NextBytes(new System.Span<byte>(src, Span));
            new System.Span<byte>(dst, Span).Fill(0xEE);

            // Slot i covers [16 KiB + i·32 KiB, +32 KiB): slot 31 crosses the 1 MiB region boundary.
            var address = new long[Slots];
            var length = new int[Slots];
            for (int i = 0; i < Slots; i++)
            {
                length[i] = i == 31 ? Slot : LogUniformLength(rng, Slot);
                address[i] = (16 << 10) + (long)i * Slot + rng.Next(0, Slot - length[i] + 1);
            }

            // Phase 1: writes from unmanaged memory.
            var writes = new Tracker(Slots);
            for (int i = 0; i < Slots; i++)
                client.StartWrite(address[i], (IntPtr)(src + address[i]), length[i], writes.OnComplete, i);
            writes.PollUntilDone(client, $"{transport} writes");

            // Phase 2: reads into unmanaged memory.
            var reads = new Tracker(Slots);
            for (int i = 0; i < Slots; i++)
                client.StartRead(address[i], (IntPtr)(dst + address[i]), length[i], reads.OnComplete, i);
            reads.PollUntilDone(client, $"{transport} reads");
            for (int i = 0; i < Slots; i++)
            {
                AssertSameBytes(new ReadOnlySpan<byte>(src + address[i], length[i]), new ReadOnlySpan<byte>(dst + address[i], length[i]),
                    $"{transport}: low-level read {i} [{address[i]}, +{length[i]})");
            }
            // Bytes around the slots were not written by the reads.
            for (int i = 0; i < Slots; i++)
            {
                long end = i + 1 < Slots ? address[i + 1] : Span;
                for (long k = address[i] + length[i]; k < end; k++)
                {
                    if (dst[k] != 0xEE)
                        throw new XunitException($"{transport}: read {i} wrote past its end at {k}");
                }
            }

            // Phase 3: program order on one thread without polling in between: write A, write B, read → B.
            const int Pairs = 16;
            const int Len = 5000;
            byte* a = (byte*)NativeMemory.Alloc(Pairs * Len);
            byte* b = (byte*)NativeMemory.Alloc(Pairs * Len);
            byte* r = (byte*)NativeMemory.Alloc(Pairs * Len);
            bool orderedSettled = false;
            try
            {
                rng.NextBytes(new System.Span<byte>(a, Pairs * Len));
                rng.NextBytes(new System.Span<byte>(b, Pairs * Len));
                new System.Span<byte>(r, Pairs * Len).Fill(0x11);
                var ordered = new Tracker(3 * Pairs);
                for (int k = 0; k < Pairs; k++)
                {
                    long at = (3 << 20) - 2500 + k * 7001L;  // the first ones cross the 3 MiB boundary
                    client.StartWrite(at, (IntPtr)(a + k * Len), Len, ordered.OnComplete, 3 * k);
                    client.StartWrite(at, (IntPtr)(b + k * Len), Len, ordered.OnComplete, 3 * k + 1);
                    client.StartRead(at, (IntPtr)(r + k * Len), Len, ordered.OnComplete, 3 * k + 2);
                }
                ordered.PollUntilDone(client, $"{transport} ordered write/write/read");
                orderedSettled = true;
                for (int k = 0; k < Pairs; k++)
                {
                    AssertSameBytes(new ReadOnlySpan<byte>(b + k * Len, Len), new ReadOnlySpan<byte>(r + k * Len, Len),
                        $"{transport}: read {k} submitted after write A and write B of the same range (should see B)");
                }
            }
            finally
            {
                if (orderedSettled)
                {
                    NativeMemory.Free(a);
                    NativeMemory.Free(b);
                    NativeMemory.Free(r);
                }
            }
            Assert.Equal(0, client.Outstanding);
            settled = true;
        }
        finally
        {
            // Buffers of operations that may still be in flight are leaked rather than freed under the library.
            if (settled)
            {
                NativeMemory.Free(src);
                NativeMemory.Free(dst);
            }
        }
    }

    /// <summary>
    /// Callbacks that submit the next operation of their chain (which the API allows: the operation
    /// goes back to the pool before its callback runs), with a small session capacity so that
    /// submissions from callbacks also find the session full and have to harvest. Driven by Poll. The caller and the
    /// client's poller both climb to the lane's nesting limit (harvests inside callbacks inside harvests), where a
    /// submission must still make progress; a round hung there about one time in four before that was fixed, so
    /// there are several.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task CallbacksThatSubmitAgain(string transport)
    {
        using var server = ServerProcess.Start(transport);
        const int Rounds = 8;
        await WithTimeout(TimeSpan.FromSeconds(60), $"chained callbacks over {transport}", () =>
        {
            for (int round = 0; round < Rounds; round++)
                RunChains(server.Endpoint, transport);
        });
        server.AssertRunning();
    }

    private sealed class ChainState
    {
        public required RemoteCacheClient Client;
        public required IntPtr Buffer;
        public required long Address;
        public required int Steps;
        public int Step;
        public int Done;
        public readonly ConcurrentQueue<string> Failures = new();
        public IoCallback? Next;
    }

    private static unsafe void RunChains(string endpoint, string transport)
    {
        const int Chains = 64;
        const int Steps = 40;
        const int Len = 256;
        var options = Options(1, name: $"chains-{transport}");
        options.SessionCapacity = 16;
        options.Lanes = 1;
        using var client = RemoteCacheClient.Open(new[] { endpoint }, options);
        byte* memory = (byte*)NativeMemory.Alloc(Chains * Len);
        int finished = 0;
        var chains = new ChainState[Chains];
        for (int c = 0; c < Chains; c++)
        {
            var state = new ChainState { Client = client, Buffer = (IntPtr)(memory + c * Len), Address = c * 8192L, Steps = Steps };
            state.Next = (status, context) =>
            {
                var s = (ChainState)context!;
                if (status != RemoteCacheStatus.Ok)
                    s.Failures.Enqueue($"step {s.Step} completed with {status}");
                if (++s.Step == s.Steps)
                {
                    Volatile.Write(ref s.Done, 1);
                    Interlocked.Increment(ref finished);
                    return;
                }
                // Even steps write the chain's pattern, odd steps read it back into the same buffer.
                try
                {
                    if (s.Step % 2 == 0)
                        s.Client.StartWrite(s.Address, s.Buffer, Len, s.Next!, s);
                    else
                        s.Client.StartRead(s.Address, s.Buffer, Len, s.Next!, s);
                }
                catch (Exception e)
                {
                    s.Failures.Enqueue($"step {s.Step}: submission from the callback threw {e}");
                    Interlocked.Increment(ref finished);
                }
            };
            chains[c] = state;
            new System.Span<byte>(memory + c * Len, Len).Fill((byte)(c + 1));
        }
        for (int c = 0; c < Chains; c++)
            client.StartWrite(chains[c].Address, chains[c].Buffer, Len, chains[c].Next!, chains[c]);
        var watch = Stopwatch.StartNew();
        while (Volatile.Read(ref finished) < Chains)
        {
            client.Poll();
            if (watch.Elapsed > TimeSpan.FromSeconds(20))
            {
                var stuck = chains.Where(s => Volatile.Read(ref s.Done) == 0).Select(s => $"{s.Address / 8192}@{s.Step}").Take(10);
                throw new XunitException($"{transport}: only {Volatile.Read(ref finished)} of {Chains} callback chains finished within 20 s (Outstanding = {client.Outstanding}); stuck: {string.Join(", ", stuck)}");
            }
            Thread.Yield();
        }
        var failures = chains.SelectMany((s, i) => s.Failures.Select(f => $"chain {i}: {f}")).ToList();
        if (failures.Count > 0)
            throw new XunitException($"{transport}: " + string.Join("; ", failures.Take(10)));
        Assert.Equal(0, client.Outstanding);
        // Each buffer went write/read/write/... and still holds its own pattern; so does the cache.
        var back = new byte[Len];
        for (int c = 0; c < Chains; c++)
        {
            var expected = Enumerable.Repeat((byte)(c + 1), Len).ToArray();
            AssertSameBytes(expected, new ReadOnlySpan<byte>(memory + c * Len, Len), $"{transport}: chain {c} buffer after its reads");
            client.ReadAsync(chains[c].Address, back).AsTask().GetAwaiter().GetResult();
            AssertSameBytes(expected, back, $"{transport}: chain {c} in the cache");
        }
        NativeMemory.Free(memory);
    }
}

/// <summary>Which lane a thread is given: the one the fewest live threads hold, kept for the thread's life.</summary>
public sealed class LaneAssignmentTests
{
    [Fact]
    public async Task TwoLiveThreadsGetLanesOfTheirOwnWhateverThreadsCameAndWentBefore()
    {
        var options = Options(1, name: "lane-assignment");
        options.Lanes = 2;
        await WithClient("shm", options, TimeSpan.FromSeconds(30), "lane assignment", client =>
        {
            int LaneOn()
            {
                int lane = -1;
                var thread = new Thread(() => lane = client.CallersLane);
                thread.Start();
                thread.Join();
                return lane;
            }

            // A thread that stays alive holds its lane.
            int first = -1;
            using var holding = new ManualResetEventSlim();
            using var release = new ManualResetEventSlim();
            var holder = new Thread(() =>
            {
                first = client.CallersLane;
                Assert.Equal(first, client.CallersLane);  // kept
                holding.Set();
                release.Wait();
            });
            holder.Start();
            holding.Wait();
            // Threads that came and went in between, one or two of them: each new thread gets the other lane (an odd
            // count of them made lanes handed out in turn put the next thread beside the holder).
            for (int i = 0; i < 3; i++)
                Assert.Equal(1 - first, LaneOn());
            release.Set();
            holder.Join();
            return Task.CompletedTask;
        });
    }
}

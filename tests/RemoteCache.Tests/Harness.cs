using System;
using System.IO;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using Xunit.Sdk;

namespace RemoteCache.Tests;

internal static class Harness
{
    public const long MiB = 1 << 20;

    /// <summary>The configurations every data test cycles through: (c, s, b, q).</summary>
    public static readonly CacheConfig[] Configs =
    {
        new(0, 1, 1, 1),
        new(0, 1, 16, 4),
        new(1, 1, 32, 8),
        new(0, 0, 1, 1),
    };

    /// <summary>
    /// Runs <paramref name="body"/> on the thread pool and fails the test if it has not finished
    /// within <paramref name="limit"/> (a hang becomes a failure instead of a stuck run).
    /// </summary>
    public static async Task WithTimeout(TimeSpan limit, string what, Func<Task> body)
    {
        var task = Task.Run(body);
        try
        {
            await task.WaitAsync(limit);
        }
        catch (TimeoutException) when (!task.IsCompleted)
        {
            throw new XunitException($"HANG: {what} did not finish within {limit.TotalSeconds} s");
        }
    }

    public static Task WithTimeout(TimeSpan limit, string what, Action body) =>
        WithTimeout(limit, what, () => Task.Run(body));

    /// <summary>
    /// Starts a cache server for <paramref name="transport"/>, opens a client on it and runs <paramref name="body"/>
    /// within <paramref name="limit"/>; the client is then disposed (within 30 s) and the server must still be running.
    /// </summary>
    public static async Task WithClient(string transport, RemoteCacheOptions options, TimeSpan limit, string what,
                                        Func<RemoteCacheClient, Task> body)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(limit, what, async () =>
        {
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, options);
            try
            {
                await body(client);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
        });
        server.AssertRunning();
    }

    /// <summary>An embedded server on a free loopback tcp port: 1 MiB regions, 16 MiB in all, one thread.</summary>
    public static RemoteCacheServer StartTcpServer(ILoggerFactory? loggers = null, byte[]? admissionKey = null) =>
        RemoteCacheServer.Start(new RemoteCacheServerOptions
        {
            Listen = { "tcp:127.0.0.1:0" }, RegionSize = MiB, MemoryLimit = 16 * MiB, MaxThreads = 1,
            AdmissionKey = admissionKey, LoggerFactory = loggers,
        });

    public static RemoteCacheOptions Options(int regions, CacheConfig? config = null, string? name = null) => new()
    {
        RegionsPerServer = regions,
        Config = config ?? CacheConfig.HighThroughput,
        OperationTimeout = TimeSpan.FromSeconds(10),
        ConnectTimeout = TimeSpan.FromSeconds(5),
        Name = name,
    };

    /// <summary>Disposes the client, failing the test if that does not finish within 30 s.</summary>
    /// <summary>Listen endpoints for an embedded server: the transport under test first (a client opens Endpoints[0]).</summary>
    public static (string[] Listen, string Shm) ListenList(string transport)
    {
        var shm = $"shm:{ServerProcess.NewSocketPath()}";
        const string tcp = "tcp:127.0.0.1:0";
        return (transport == "tcp" ? new[] { tcp, shm } : new[] { shm, tcp }, shm);
    }

    /// <summary>Removes the socket file of an shm endpoint, if it is still there.</summary>
    public static void DeleteSocket(string shm)
    {
        try
        {
            File.Delete(shm["shm:".Length..]);
        }
        catch (IOException)
        {
        }
    }

    public static async Task DisposeWithTimeout(RemoteCacheClient client)
    {
        var task = client.DisposeAsync().AsTask();
        try
        {
            await task.WaitAsync(TimeSpan.FromSeconds(30));
        }
        catch (TimeoutException) when (!task.IsCompleted)
        {
            throw new XunitException($"HANG: DisposeAsync of {client.Name} did not finish within 30 s");
        }
    }

    /// <summary>1..max, log-uniform.</summary>
    public static int LogUniformLength(Random rng, int max) =>
        (int)Math.Clamp(Math.Floor(Math.Exp(rng.NextDouble() * Math.Log(max + 1.0))), 1, max);

    /// <summary>Throws with the first difference if <paramref name="actual"/> differs from <paramref name="expected"/>.</summary>
    public static void AssertSameBytes(ReadOnlySpan<byte> expected, ReadOnlySpan<byte> actual, string context)
    {
        if (expected.Length != actual.Length)
            throw new XunitException($"{context}: length {actual.Length}, expected {expected.Length}");
        int first = expected.CommonPrefixLength(actual);
        if (first == expected.Length)
            return;
        int differing = 0, last = first;
        for (int i = first; i < expected.Length; i++)
        {
            if (expected[i] != actual[i])
            {
                differing++;
                last = i;
            }
        }
        throw new XunitException(
            $"{context}: wrong data: {differing} of {expected.Length} bytes differ, first at offset {first} " +
            $"(expected 0x{expected[first]:x2}, got 0x{actual[first]:x2}), last at offset {last}; " +
            $"expected[{first}..]={Hex(expected[first..])}, actual[{first}..]={Hex(actual[first..])}");
    }

    private static string Hex(ReadOnlySpan<byte> s) => Convert.ToHexString(s[..Math.Min(16, s.Length)]);

    /// <summary>Waits until every task has finished; false if some are still pending after <paramref name="limit"/>.</summary>
    public static async Task<bool> AllSettled(IReadOnlyCollection<Task> tasks, TimeSpan limit)
    {
        var all = Task.WhenAll(tasks);
        var first = await Task.WhenAny(all, Task.Delay(limit));
        return first == all;
    }
}

/// <summary>
/// Random reads and writes on [Base, Base + Size) of a cache, checked against a shadow copy. Operations
/// are submitted synchronously from one thread in bursts of up to <c>maxInFlight</c> and then awaited,
/// so program order is the submission order: the expected content of a read is taken when it is
/// submitted, after every write submitted before it.
/// </summary>
internal sealed class CheckedIo
{
    private readonly RemoteCacheClient _client;
    private readonly Random _rng;
    private readonly byte[] _shadow;
    private readonly long[] _boundaries;  // region boundaries inside the slice, relative to Base

    public CheckedIo(RemoteCacheClient client, long baseAddress, int size, int seed, long regionSize = Harness.MiB)
    {
        _client = client;
        Base = baseAddress;
        Size = size;
        Seed = seed;
        _rng = new Random(seed);
        _shadow = new byte[size];
        var b = new List<long>();
        for (long r = (baseAddress / regionSize + 1) * regionSize; r < baseAddress + size; r += regionSize)
            b.Add(r - baseAddress);
        _boundaries = b.ToArray();
    }

    public long Base { get; }
    public int Size { get; }
    public int Seed { get; }
    public string Label { get; init; } = "";
    public int Reads { get; private set; }
    public int Writes { get; private set; }
    public int Straddling { get; private set; }
    /// <summary>Operations finished and verified (read racily by other tasks).</summary>
    public int Completed => Volatile.Read(ref _completed);
    private int _completed;

    private string Where => $"{Label} seed {Seed}";

    /// <summary>Reads the whole slice (in one operation per <paramref name="chunk"/>) and compares it with the shadow.</summary>
    public async Task VerifyAllAsync(string phase, int chunk = 1 << 20)
    {
        for (int offset = 0; offset < Size; offset += chunk)
        {
            int len = Math.Min(chunk, Size - offset);
            var buffer = new byte[len];
            buffer.AsSpan().Fill(0xA5);
            try
            {
                await _client.ReadAsync(Base + offset, buffer);
            }
            catch (Exception e)
            {
                throw new XunitException($"{Where}: {phase}: read [{Base + offset}, +{len}) failed: {e}");
            }
            Harness.AssertSameBytes(_shadow.AsSpan(offset, len), buffer, $"{Where}: {phase}: read [{Base + offset}, +{len})");
        }
    }

    private struct Pending
    {
        public ValueTask Task;
        public bool IsRead;
        public long Address;
        public int Length;
        public byte[]? Buffer;
        public byte[]? Expected;
        public int Number;
    }

    /// <summary>
    /// Runs <paramref name="ops"/> operations (or, with <paramref name="keepGoing"/>, at least that many
    /// and until it returns false).
    /// </summary>
    public async Task RunAsync(int ops, int maxInFlight, int maxLength, Func<bool>? keepGoing = null)
    {
        var pending = new Pending[maxInFlight];
        int number = 0;
        while (number < ops || (keepGoing?.Invoke() ?? false))
        {
            int burst = _rng.Next(1, maxInFlight + 1);
            if (keepGoing is null)
                burst = Math.Min(burst, ops - number);
            // Submissions of one burst: synchronous, on this thread, no await in between.
            for (int i = 0; i < burst; i++)
            {
                int len = Harness.LogUniformLength(_rng, Math.Min(maxLength, Size));
                int addr;
                if (_boundaries.Length > 0 && len > 1 && _rng.Next(4) == 0)
                {
                    long boundary = _boundaries[_rng.Next(_boundaries.Length)];
                    addr = (int)Math.Clamp(boundary - _rng.Next(1, len), 0, Size - len);
                }
                else
                {
                    addr = _rng.Next(0, Size - len + 1);
                }
                if (_boundaries.Any(b => addr < b && b < addr + len))
                    Straddling++;
                var p = new Pending { Address = addr, Length = len, Number = number++ };
                try
                {
                    if (_rng.Next(2) == 0)
                    {
                        var data = new byte[len];
                        _rng.NextBytes(data);
                        p.Task = _client.WriteAsync(Base + addr, data);
                        data.AsSpan().CopyTo(_shadow.AsSpan(addr, len));
                        Writes++;
                    }
                    else
                    {
                        p.IsRead = true;
                        p.Buffer = new byte[len];
                        p.Buffer.AsSpan().Fill(0xA5);  // a read that writes nothing must not pass for zeros
                        p.Expected = _shadow.AsSpan(addr, len).ToArray();
                        p.Task = _client.ReadAsync(Base + addr, p.Buffer);
                        Reads++;
                    }
                }
                catch (Exception e)
                {
                    throw new XunitException($"{Where}: op #{p.Number} ({(p.IsRead ? "read" : "write")} [{Base + addr}, +{len})) threw on submission: {e}");
                }
                pending[i] = p;
            }
            for (int i = 0; i < burst; i++)
            {
                var p = pending[i];
                pending[i] = default;
                var what = $"{Where}: op #{p.Number} ({(p.IsRead ? "read" : "write")} [{Base + p.Address}, +{p.Length}), burst of {burst})";
                try
                {
                    await p.Task;
                }
                catch (Exception e)
                {
                    throw new XunitException($"{what} failed: {e}");
                }
                if (p.IsRead)
                    Harness.AssertSameBytes(p.Expected, p.Buffer, what);
                Interlocked.Increment(ref _completed);
            }
        }
    }
}

using System;
using System.Buffers.Binary;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// A data-path client of one cache running in the background: writes a distinct 8-byte value to a slot, reads it back,
/// and reads another slot written earlier, comparing both with what it wrote. It counts operations, failures (an
/// operation that threw) and mismatches (a read that returned something else), and keeps the first errors. A scenario
/// asserts on the counts: "0 failed ops while X happened" is <c>Failures == 0 &amp;&amp; Mismatches == 0</c> over a load
/// that made progress (<see cref="WaitForOperationsAsync"/>). A range the client reports lost
/// (<see cref="RemoteCacheClient.ContentLost"/>: a server failed, its regions not copied) is expected to read as anything
/// until written again: such reads are counted as <see cref="ReportedLost"/> slots, never as mismatches — a loss the
/// client was told of is not a wrong read.
/// </summary>
public sealed class VerifiedLoad : IAsyncDisposable
{
    private const int MaxErrors = 20;
    private readonly RemoteCacheClient _client;
    private readonly long[] _addresses;
    private readonly long?[] _expected;
    private readonly List<string> _errors = new();
    private readonly CancellationTokenSource _stop = new();
    private readonly Task _loop;
    private long _operations, _failures, _mismatches, _reportedLost;

    // Per slot, bumped when a reported loss covers it: a read or write that straddles a report is not held to the slot's value.
    private readonly int[] _lostEpochs;

    private readonly bool _ownsClient;

    private VerifiedLoad(ulong cacheId, long capacity, RemoteCacheClient client, bool ownsClient, int slots)
    {
        CacheId = cacheId;
        _client = client;
        _ownsClient = ownsClient;
        // Slots spread over the whole address space, so that every server of the cache is written.
        long stride = capacity / slots / 8 * 8;
        _addresses = new long[slots];
        for (int i = 0; i < slots; i++)
            _addresses[i] = i * stride;
        _expected = new long?[slots];
        _lostEpochs = new int[slots];
        client.ContentLost += OnContentLost;
        _loop = Task.Run(RunAsync);
    }

    public ulong CacheId { get; }

    public long Operations => Interlocked.Read(ref _operations);

    public long Failures => Interlocked.Read(ref _failures);

    public long Mismatches => Interlocked.Read(ref _mismatches);

    /// <summary>Slots whose content the client reported lost (counted once per report).</summary>
    public long ReportedLost => Interlocked.Read(ref _reportedLost);

    public IReadOnlyList<string> Errors
    {
        get
        {
            lock (_errors)
                return _errors.ToArray();
        }
    }

    public string Summary => string.Create(CultureInfo.InvariantCulture,
        $"cache {CacheId}: {Operations} ops, {Failures} failed, {Mismatches} mismatched, {ReportedLost} slots reported lost{(Errors.Count > 0 ? "; first errors: " + string.Join(" | ", Errors) : "")}");

    /// <summary>Starts the load on <paramref name="client"/>, a client of cache <paramref name="cacheId"/> that the load owns (closed when it stops).</summary>
    public static VerifiedLoad Start(RemoteCacheClient client, ulong cacheId, long capacity, int slots = 256) =>
        new(cacheId, capacity, client, ownsClient: true, slots);

    /// <summary>
    /// Starts the load on a managed cache's data client (<see cref="ManagedCache.Client"/>), which the handle keeps: its
    /// lease is renewed and its capabilities presented to the servers while the load runs; stopping leaves it open.
    /// </summary>
    public static VerifiedLoad Start(ManagedCache cache, int slots = 256) =>
        new(cache.CacheId, cache.Info.Capacity, cache.Client, ownsClient: false, slots);

    /// <summary>Waits until <paramref name="more"/> operations beyond the count now have completed (liveness, not speed).</summary>
    public async Task WaitForOperationsAsync(long more, TimeSpan timeout)
    {
        long target = Operations + more;
        var waited = Stopwatch.StartNew();
        while (Operations < target)
        {
            if (waited.Elapsed > timeout || _loop.IsCompleted)
                throw new TimeoutException($"the load made no progress to {target} ops within {timeout.TotalSeconds} s: {Summary}");
            await Task.Delay(20).ConfigureAwait(false);
        }
    }

    private async Task RunAsync()
    {
        var random = new Random((int)CacheId);
        var value = new byte[8];
        var back = new byte[8];
        for (long round = 1; !_stop.IsCancellationRequested; round++)
        {
            int slot = random.Next(_addresses.Length);
            long written = (round << 16) | (uint)slot;
            BinaryPrimitives.WriteInt64LittleEndian(value, written);
            try
            {
                _expected[slot] = null;  // unknown until the write is known to have happened
                int epoch = Volatile.Read(ref _lostEpochs[slot]);
                await _client.WriteAsync(_addresses[slot], value).ConfigureAwait(false);
                if (Volatile.Read(ref _lostEpochs[slot]) == epoch)
                    _expected[slot] = written;
                Count(ref _operations);
                await CheckAsync(slot, back).ConfigureAwait(false);
                int other = random.Next(_addresses.Length);
                if (_expected[other] is not null)
                    await CheckAsync(other, back).ConfigureAwait(false);
            }
            catch (Exception e) when (e is RemoteCacheException or TimeoutException or OperationCanceledException or ObjectDisposedException)
            {
                Count(ref _failures);
                Error($"{DateTime.UtcNow:HH:mm:ss.fff} {e.GetType().Name}: {e.Message}");
                await Task.Delay(10).ConfigureAwait(false);
            }
        }
    }

    private void OnContentLost(object? sender, RemoteCacheContentLostEventArgs e)
    {
        for (int i = 0; i < _addresses.Length; i++)
            if (_addresses[i] >= e.Address && _addresses[i] < e.Address + e.Length)
            {
                Interlocked.Increment(ref _lostEpochs[i]);
                _expected[i] = null;
                Count(ref _reportedLost);
            }
    }

    private async Task CheckAsync(int slot, byte[] back)
    {
        int epoch = Volatile.Read(ref _lostEpochs[slot]);
        long? expected = _expected[slot];
        await _client.ReadAsync(_addresses[slot], back).ConfigureAwait(false);
        Count(ref _operations);
        long got = BinaryPrimitives.ReadInt64LittleEndian(back);
        if (expected is not null && got != expected && Volatile.Read(ref _lostEpochs[slot]) == epoch)
        {
            Count(ref _mismatches);
            Error(string.Create(CultureInfo.InvariantCulture, $"slot {slot} at {_addresses[slot]}: read {got:x}, wrote {expected:x}"));
        }
    }

    private static void Count(ref long counter) => Interlocked.Increment(ref counter);

    private void Error(string text)
    {
        lock (_errors)
            if (_errors.Count < MaxErrors)
                _errors.Add(text);
    }

    /// <summary>Stops the load (the counts stay readable) and closes the client.</summary>
    public async Task StopAsync()
    {
        if (!_stop.IsCancellationRequested)
        {
            _stop.Cancel();
            await _loop.ConfigureAwait(false);
            _client.ContentLost -= OnContentLost;
            if (_ownsClient)
                await _client.DisposeAsync().ConfigureAwait(false);
        }
    }

    public async ValueTask DisposeAsync()
    {
        await StopAsync().ConfigureAwait(false);
        _stop.Dispose();
    }
}

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>
/// A FASTER log device made of tiers, fastest first (typically a <see cref="RemoteCacheDevice"/> over an SSD
/// device from <see cref="Devices.CreateLogDevice"/>), all sharing one address space.
/// </summary>
/// <remarks>
/// <para><b>Writes</b> go to every live tier. A write completes when every tier is done with the source buffer
/// (FASTER reuses it at completion); it reports the status of the commit-point tier, the tier whose copy makes the
/// write durable.</para>
/// <para><b>Reads</b> go to the fastest tier that holds the segment and, for tiers before the commit point, whose
/// write of the whole range completed in this process; otherwise to the next tier. The commit-point tier and those
/// after it are trusted for every segment they hold (they persist across restarts).</para>
/// <para><b>Failures</b>: a tier before the commit point that fails an operation (its cache server was lost) is
/// taken out: the read that failed is retried on the next tier, later operations skip it, nothing reaches FASTER.
/// The failure is logged and counted (<see cref="FailedTiers"/>, <see cref="TierFailures"/>). Errors of the
/// commit-point tier and beyond reach FASTER, after a failed read has been tried on any later tier.</para>
/// <para><b>Unsegmented logs</b> (FASTER's object log of a FasterKV with class keys or values, DeltaLog devices:
/// segment size −1) work the same way: FASTER names a segment and an offset in it that can be any size; reads are
/// routed by the written ranges of that segment, and a <see cref="RemoteCacheDevice"/> tier answers
/// <see cref="RemoteCacheDevice.NotResident"/> for bytes it evicted or that a later write overtook, which then come
/// from the next tier.</para>
/// <para>The device owns its tiers: <see cref="Dispose"/> disposes them, and so does a constructor or
/// <see cref="Initialize"/> that throws (FASTER drops a device whose Initialize threw, and the caller of a constructor
/// that threw has no device to dispose), so that a cache tier's memory goes back to its server.</para>
/// </remarks>
public sealed partial class TieredDevice : StorageDeviceBase
{
    // A warm copy moves this much per read and write (at most a segment), through a buffer aligned for direct I/O.
    private const int WarmChunk = 1 << 20;
    private const int WarmAlignment = 4096;
    private const int WarmPasses = 3;
    private static readonly TimeSpan WarmRetryDelay = TimeSpan.FromMilliseconds(50);

    private readonly Tier[] _tiers;
    private readonly int _commitPoint;
    private readonly ILogger _logger;
    private readonly Pool<ReadOp> _reads = new(() => new ReadOp());
    private readonly Pool<WriteOp> _writes;
    private long _tierFailures;
    private long _fallThroughs;
    private int _disposed;
    // Per segment: writes FASTER has started and those not yet completed on every tier (a warm copy checks them).
    private readonly System.Collections.Concurrent.ConcurrentDictionary<int, SegmentActivity> _activity = new();
    private Task<long> _warming = Task.FromResult(0L);
    private long _bytesWarmed;
    private readonly SemaphoreSlim _warmGate = new(1, 1);  // one warm copy at a time

    /// <summary>Creates a tiered device, which owns <paramref name="tiers"/> from then on (even if this throws).</summary>
    /// <param name="commitPoint">Index of the tier whose completed write makes a write durable (usually the last, the SSD).</param>
    /// <param name="tiers">The tiers, fastest first.</param>
    /// <param name="logger">Where tier failures are reported.</param>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="commitPoint"/> is not a tier (the tiers are disposed).</exception>
    /// <exception cref="ArgumentException">No tiers, or a null one (the others are disposed).</exception>
    public TieredDevice(int commitPoint, IReadOnlyList<IDevice> tiers, ILogger? logger = null)
        : base(Describe(Validated(tiers, commitPoint), commitPoint), SectorSizeOf(tiers), tiers[^1].Capacity)
    {
        _tiers = tiers.Select((d, i) => new Tier(d, tracked: i < commitPoint)).ToArray();
        _commitPoint = commitPoint;
        _logger = logger ?? NullLogger.Instance;
        int count = _tiers.Length;
        _writes = new Pool<WriteOp>(() => new WriteOp(count));
        for (int i = 0; i < commitPoint; i++)
        {
            int index = i;
            if (tiers[i] is RemoteCacheDevice cache)
                cache.SegmentsLost += (_, segments) => TakeBack(index, segments);
        }
    }

    /// <summary>Creates a tiered device from tiers given fastest first; the last one is the commit point.</summary>
    public TieredDevice(params IDevice[] tiers) : this((tiers ?? throw new ArgumentNullException(nameof(tiers))).Length - 1, tiers)
    {
    }

    /// <summary>The tiers, fastest first.</summary>
    public IReadOnlyList<IDevice> Tiers => _tiers.Select(t => t.Device).ToArray();

    /// <summary>Index of the commit-point tier.</summary>
    public int CommitPoint => _commitPoint;

    /// <summary>Operations failed by tiers before the commit point (each took its tier out).</summary>
    public long TierFailures => Interlocked.Read(ref _tierFailures);

    /// <summary>Reads a tier could not serve (not resident, write not completed, or failed) that went to a later tier.</summary>
    public long FallThroughs => Interlocked.Read(ref _fallThroughs);

    /// <summary>Indexes of the tiers taken out by a failure.</summary>
    public IReadOnlyList<int> FailedTiers => Enumerable.Range(0, _tiers.Length).Where(i => _tiers[i].Failed).ToArray();

    /// <summary>Reads served by tier <paramref name="tier"/>.</summary>
    public long ReadsServedBy(int tier) => _tiers[tier].Served.Sum();

    /// <summary>The last warm copy started (<see cref="WarmAsync"/>, or the one a tier taken back starts): the bytes it copied.</summary>
    public Task<long> Warming => Volatile.Read(ref _warming);

    /// <summary>Bytes every warm copy so far has copied into tiers.</summary>
    public long BytesWarmed => Interlocked.Read(ref _bytesWarmed);

    /// <inheritdoc/>
    /// <remarks>If a tier refuses (throws), every tier is disposed before the exception reaches FASTER.</remarks>
    public override void Initialize(long segmentSize, LightEpoch? epoch = null, bool omitSegmentIdFromFilename = false)
    {
        try
        {
            base.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);
            foreach (var tier in _tiers)
                tier.Device.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);
        }
        catch
        {
            Dispose();
            throw;
        }
        // The log's extent is what the commit-point tier holds (recovered from disk after a restart).
        startSegment = _tiers[_commitPoint].Device.StartSegment;
        endSegment = _tiers[_commitPoint].Device.EndSegment;
    }

    /// <inheritdoc/>
    public override bool Throttle()
    {
        foreach (var tier in _tiers)
            if (!tier.Failed && tier.Device.Throttle())
                return true;
        return false;
    }

    /// <inheritdoc/>
    public override bool TryComplete() => Harvest(static device => device.TryComplete());

    // Every live tier harvests its completions, as `how` asks it to.
    private bool Harvest(Func<IDevice, bool> how)
    {
        bool any = false;
        foreach (var tier in _tiers)
            if (!tier.Failed)
                any |= how(tier.Device);
        return any;
    }

    /// <inheritdoc/>
    public override long GetFileSize(int segment) => _tiers[_commitPoint].Device.GetFileSize(segment);

    /// <inheritdoc/>
    public override void Reset()
    {
        foreach (var tier in _tiers)
            tier.Device.Reset();
    }

    // ---- reads ------------------------------------------------------------------------------------

    /// <inheritdoc/>
    public override void ReadAsync(int segmentId, ulong sourceAddress, IntPtr destinationAddress, uint readLength,
                                   DeviceIOCompletionCallback callback, object context)
    {
        var op = _reads.Rent();
        op.Device = this;
        op.Segment = segmentId;
        op.Offset = sourceAddress;
        op.Destination = destinationAddress;
        op.Length = readLength;
        op.Callback = callback;
        op.Context = context;
        Route(op, 0);
    }

    private void Route(ReadOp op, int from)
    {
        long start = (long)op.Offset;
        long end = Math.Min(start + op.Length, segmentSize > 0 ? segmentSize : long.MaxValue);
        for (int i = from; i < _tiers.Length; i++)
        {
            var tier = _tiers[i];
            bool last = i == _tiers.Length - 1;
            // Read before what it was taken back for: a read routed by ranges a loss then forgets carries the old one.
            int generation = tier.Generation;
            if (!last && (tier.Failed || op.Segment < tier.Device.StartSegment ||
                          (tier.Tracked && !tier.Written.Contains(op.Segment, start, end))))
                continue;
            if (i > from || from > 0)
                Interlocked.Increment(ref _fallThroughs);
            op.Tier = i;
            op.Generation = generation;
            tier.Device.ReadAsync(op.Segment, op.Offset, op.Destination, op.Length, s_onRead, op);
            return;
        }
    }

    private static void OnTierRead(uint errorCode, uint numBytes, object context)
    {
        var op = (ReadOp)context;
        var device = op.Device!;
        var tier = device._tiers[op.Tier];
        if (errorCode != 0 && op.Tier < device._tiers.Length - 1)
        {
            if (errorCode != RemoteCacheDevice.NotResident && op.Tier < device._commitPoint)
                device.TakeOut(op.Tier, op.Generation, errorCode, "read");
            device.Route(op, op.Tier + 1);
            return;
        }
        if (op.Tier < device._commitPoint && op.Generation != tier.Generation)
        {
            // The tier lost content while this read was on its way: it may have been served by the replacement (a read
            // that waited behind a write to a moving region), whose bytes there are not the log's. Routed again.
            device.Route(op, op.Tier);
            return;
        }
        if (errorCode == 0)
            tier.Served.Add(1);  // striped: every reading thread bumps it
        var callback = op.Callback!;
        var userContext = op.Context;
        op.Clear();
        device._reads.Return(op);
        callback.Complete(errorCode, numBytes, userContext!);
    }

    // ---- writes -----------------------------------------------------------------------------------

    /// <inheritdoc/>
    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite,
                                    DeviceIOCompletionCallback callback, object context)
    {
        var op = _writes.Rent();
        if (op.Parts.Length != _tiers.Length)
            op = new WriteOp(_tiers.Length);  // pooled by another tiered device with another tier count
        op.Device = this;
        op.Segment = segmentId;
        op.Start = (long)destinationAddress;
        op.End = (long)destinationAddress + numBytesToWrite;
        op.Callback = callback;
        op.Context = context;
        op.Status = 0;
        op.NumBytes = numBytesToWrite;
        op.Remaining = 1;  // held by this method until every tier has been issued
        if (segmentId > endSegment)
            Utility.MonotonicUpdate(ref endSegment, segmentId, out _);  // the tail, which a warm copy leaves alone
        op.Activity = Activity(segmentId);
        Interlocked.Increment(ref op.Activity.Started);
        Interlocked.Increment(ref op.Activity.InFlight);
        for (int i = 0; i < _tiers.Length; i++)
        {
            var tier = _tiers[i];
            if (tier.Failed && tier.Skip(segmentId))
                continue;
            if (tier.Tracked && tier.Written.BeginWrite(segmentId, op.Start, op.End))
                tier.Written.RemoveBelow(tier.Device.StartSegment);  // a new segment: forget the evicted ones
            Interlocked.Increment(ref op.Remaining);
            op.Parts[i].Generation = tier.Generation;
            tier.Device.WriteAsync(sourceAddress, segmentId, destinationAddress, numBytesToWrite, s_onWrite, op.Parts[i]);
        }
        op.Release();
    }

    private static void OnTierWrite(uint errorCode, uint numBytes, object context)
    {
        var part = (WritePart)context;
        var op = part.Op;
        var device = op.Device!;
        var tier = device._tiers[part.Tier];
        if (tier.Tracked)
        {
            // Only what the tier still holds is readable from it (a segment below its start was not kept).
            bool kept = errorCode == 0 && op.Segment >= tier.Device.StartSegment;
            tier.Written.EndWrite(op.Segment, op.Start, op.End, kept);
        }
        if (part.Tier == device._commitPoint)
        {
            op.Status = errorCode;
            op.NumBytes = numBytes;
        }
        else if (errorCode != 0)
        {
            if (part.Tier < device._commitPoint)
                device.TakeOut(part.Tier, part.Generation, errorCode, "write");
            else
                DeviceLog.TierWriteFailed(device._logger, part.Tier, tier.Device.FileName, op.Segment, errorCode);
        }
        op.Release();
    }

    // ---- segments ---------------------------------------------------------------------------------

    /// <inheritdoc/>
    public override void RemoveSegmentAsync(int segment, AsyncCallback callback, IAsyncResult result)
    {
        // Every tier is asked (one that does not hold the segment completes at once); the callback runs once,
        // after the last of them.
        int remaining = _tiers.Length;
        _activity.TryRemove(segment, out _);
        foreach (var tier in _tiers)
        {
            tier.Written.Remove(segment);
            tier.Device.RemoveSegmentAsync(segment, r =>
            {
                if (Interlocked.Decrement(ref remaining) == 0)
                    callback(r);
            }, result);
        }
    }

    /// <inheritdoc/>
    public override void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        DisposeAll(_tiers.Select(t => t.Device));
        Disposed?.Invoke(this);
    }

    /// <summary>Raised once, after <see cref="Dispose"/> disposed the tiers (whoever rented their caches can free them).</summary>
    public event Action<TieredDevice>? Disposed;

    private static void DisposeAll(IEnumerable<IDevice?> devices)
    {
        foreach (var device in devices)
            device?.Dispose();
    }

    // ---- failure ----------------------------------------------------------------------------------

    // Takes tier `index` out after an operation issued in `generation` failed; a failure of one issued before the tier
    // was last taken back belongs to the cache as it was then (its lost server), not to the tier as it is now.
    private void TakeOut(int index, int generation, uint errorCode, string what)
    {
        Interlocked.Increment(ref _tierFailures);
        var tier = _tiers[index];
        if (tier.Failed || generation != tier.Generation)
            return;
        tier.Failed = true;
        var status = RemoteCacheDevice.StatusOf(errorCode);
        DeviceLog.TierTakenOut(_logger, index, tier.Device.FileName, what, errorCode, status?.ToString() ?? "not a RemoteCache status");
    }

    // ---- a cache tier replaced: taken back, warmed ----------------------------------------------------

    // Tier `index`'s cache lost `lost` (its server was replaced without them): forget them and what was written while
    // the tier was out, take the tier back, and refill it from the commit point in the background.
    private void TakeBack(int index, IReadOnlyList<int> lost)
    {
        var tier = _tiers[index];
        var forgotten = new HashSet<int>(lost);
        lock (tier.Skipped)
        {
            forgotten.UnionWith(tier.Skipped);
            foreach (int segment in forgotten)
                tier.Written.Remove(segment);
            tier.Skipped.Clear();
            tier.Generation++;
            tier.Failed = false;
        }
        DeviceLog.TierBack(_logger, index, tier.Device.FileName, forgotten.Count);
        if (segmentSize > 0 && Volatile.Read(ref _disposed) == 0)
            Volatile.Write(ref _warming, Task.Run(() => WarmAsync(index)));
    }

    private SegmentActivity Activity(int segment)
    {
        if (_activity.TryGetValue(segment, out var activity))
            return activity;
        activity = _activity.GetOrAdd(segment, _ => new SegmentActivity());
        // A segment's first write: forget the activity of segments the log no longer holds.
        int start = _tiers[_commitPoint].Device.StartSegment;
        foreach (int old in _activity.Keys)
            if (old < start)
                _activity.TryRemove(old, out _);
        return activity;
    }

    /// <summary>
    /// Copies the newest segments of the log from the commit-point tier into tier <paramref name="tier"/>, so that their
    /// reads are served by that tier again: after its cache lost segments (a tier taken back starts this by itself) or
    /// after a restart, whose cache tier starts empty. It runs beside FASTER and never blocks it: a range becomes
    /// readable from the tier once its copy has landed; a chunk FASTER is writing is left to FASTER's writes, and a
    /// copy overtaken by one of them is not kept (it is tried again, twice, 50 ms apart). As many segments as the tier
    /// holds at once (its ring, for a <see cref="RemoteCacheDevice"/>), newest first, each as far as the commit point
    /// holds it. Only segmented logs are warmed (an unsegmented log completes at once with 0).
    /// </summary>
    /// <param name="tier">A tier before the commit point.</param>
    /// <param name="cancellationToken">Stops the copy between two chunks.</param>
    /// <returns>The bytes copied. A read or write that fails ends the copy early (a failed write takes the tier out).</returns>
    public async Task<long> WarmAsync(int tier = 0, CancellationToken cancellationToken = default)
    {
        if (tier < 0 || tier >= _commitPoint)
            throw new ArgumentOutOfRangeException(nameof(tier), tier, $"only a tier before the commit point ({_commitPoint}) is warmed");
        if (segmentSize <= 0)
            return 0;
        await _warmGate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            return await WarmLockedAsync(tier, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            _warmGate.Release();
        }
    }

    private async Task<long> WarmLockedAsync(int index, CancellationToken cancellationToken)
    {
        var tier = _tiers[index];
        var source = _tiers[_commitPoint].Device;
        int tail = Math.Max(EndSegment, source.EndSegment);
        int held = tier.Device is RemoteCacheDevice cache ? cache.RingSegments : (int)Math.Max(1, tier.Device.Capacity / segmentSize);
        int first = Math.Max(source.StartSegment, tail - held + 1);
        int chunk = (int)Math.Min(WarmChunk, segmentSize);
        var clock = Stopwatch.StartNew();
        long bytes = 0;
        var segments = new HashSet<int>();
        IntPtr allocated = Marshal.AllocHGlobal(chunk + WarmAlignment);
        var buffer = (IntPtr)(((long)allocated + WarmAlignment - 1) & ~(long)(WarmAlignment - 1));
        try
        {
            // Chunks FASTER was writing are tried again on the next pass (its own writes may fill them meanwhile).
            bool skipped = true;
            for (int pass = 0; pass < WarmPasses && skipped; pass++)
            {
                skipped = false;
                for (int segment = tail; segment >= first; segment--)
                {
                    for (long offset = 0; offset < segmentSize; offset += chunk)
                    {
                        cancellationToken.ThrowIfCancellationRequested();
                        if (tier.Failed || Volatile.Read(ref _disposed) != 0)
                        {
                            DeviceLog.WarmFailed(_logger, index, tier.Device.FileName, "the tier failed or the device was disposed");
                            return bytes;
                        }
                        if (tier.Written.Contains(segment, offset, offset + chunk))
                            continue;
                        var (copied, more) = await WarmChunkAsync(index, source, segment, offset, chunk, buffer).ConfigureAwait(false);
                        if (copied < 0)
                            skipped = true;
                        if (copied > 0)
                        {
                            bytes += copied;
                            segments.Add(segment);
                            Interlocked.Add(ref _bytesWarmed, copied);
                        }
                        if (!more)
                            break;
                    }
                }
                if (skipped)
                    await Task.Delay(WarmRetryDelay, cancellationToken).ConfigureAwait(false);
            }
        }
        finally
        {
            Marshal.FreeHGlobal(allocated);
        }
        DeviceLog.TierWarmed(_logger, index, tier.Device.FileName, segments.Count, bytes, _commitPoint, clock.Elapsed.TotalMilliseconds);
        return bytes;
    }

    // Copies one chunk of `segment` from the commit point into tier `index`: the bytes kept (−1: FASTER was writing the
    // segment, try later), and whether the segment goes on past it (a short read is its written end).
    private async Task<(long Copied, bool More)> WarmChunkAsync(int index, IDevice source, int segment, long offset, int chunk, IntPtr buffer)
    {
        var tier = _tiers[index];
        int generation = tier.Generation;
        var activity = Activity(segment);
        long started = Interlocked.Read(ref activity.Started);
        if (Volatile.Read(ref activity.InFlight) != 0)
            return (-1, true);
        var (error, read) = await IoAsync(done => source.ReadAsync(segment, (ulong)offset, buffer, (uint)chunk, done, this)).ConfigureAwait(false);
        read &= ~(SectorSize - 1);
        if (error != 0 || read == 0)
            return (0, false);  // past what the commit point holds of the segment
        long end = offset + read;
        tier.Written.BeginWrite(segment, offset, end);
        (error, _) = await IoAsync(done => tier.Device.WriteAsync(buffer, segment, (ulong)offset, read, done, this)).ConfigureAwait(false);
        // Kept only if no write of FASTER's to the segment started or is still in flight since the source was read.
        bool kept = error == 0 && segment >= tier.Device.StartSegment &&
                    Interlocked.Read(ref activity.Started) == started && Volatile.Read(ref activity.InFlight) == 0;
        tier.Written.EndWrite(segment, offset, end, kept);
        if (error != 0)
        {
            TakeOut(index, generation, error, "warm write");
            return (0, false);
        }
        return (kept ? read : -1, read == chunk);
    }

    private static Task<(uint Error, uint Bytes)> IoAsync(Action<DeviceIOCompletionCallback> start)
    {
        var done = new TaskCompletionSource<(uint, uint)>(TaskCreationOptions.RunContinuationsAsynchronously);
        start(Completing(done));
        return done.Task;
    }

    // Runs before the base constructor uses the tiers: whatever is wrong, the tiers given are disposed.
    private static IReadOnlyList<IDevice> Validated(IReadOnlyList<IDevice> tiers, int commitPoint)
    {
        ArgumentNullException.ThrowIfNull(tiers);
        try
        {
            if (tiers.Count == 0)
                throw new ArgumentException("a tiered device needs at least one tier", nameof(tiers));
            if (tiers.Any(t => t is null))
                throw new ArgumentException("a tier is null", nameof(tiers));
            if (commitPoint < 0 || commitPoint >= tiers.Count)
                throw new ArgumentOutOfRangeException(nameof(commitPoint), commitPoint, $"there are {tiers.Count} tiers");
        }
        catch
        {
            DisposeAll(tiers);
            throw;
        }
        return tiers;
    }

    private static uint SectorSizeOf(IReadOnlyList<IDevice> tiers) => tiers.Max(t => t.SectorSize);

    private static string Describe(IReadOnlyList<IDevice> tiers, int commitPoint) =>
        "tiered:" + string.Join(";", tiers.Select((t, i) => (i == commitPoint ? "*" : "") + t.FileName));

    private sealed class Tier
    {
        public Tier(IDevice device, bool tracked)
        {
            Device = device;
            Tracked = tracked;
        }

        public readonly IDevice Device;
        public readonly bool Tracked;  // before the commit point: readable only where its write completed
        public readonly WrittenRanges Written = new();
        public volatile bool Failed;
        public volatile int Generation;  // taken back this many times: operations record it when issued
        public readonly StripedCounter Served = new();
        // Segments written while the tier was out: what it holds of them may be stale (FASTER rewrites a log's last
        // page as it fills), so a tier taken back forgets them. Guarded by itself, with Failed's changes.
        public readonly HashSet<int> Skipped = new();

        // A write of `segment` skips this failed tier: true, and the segment is remembered; false if the tier came back.
        public bool Skip(int segment)
        {
            lock (Skipped)
            {
                if (!Failed)
                    return false;
                Skipped.Add(segment);
                return true;
            }
        }
    }

    // Writes of one segment FASTER has started, and those still in flight on some tier.
    private sealed class SegmentActivity
    {
        public long Started;
        public int InFlight;
    }

    private sealed class ReadOp
    {
        public TieredDevice? Device;
        public int Segment;
        public ulong Offset;
        public IntPtr Destination;
        public uint Length;
        public int Tier;
        public int Generation;
        public DeviceIOCompletionCallback? Callback;
        public object? Context;

        public void Clear()
        {
            Device = null;
            Callback = null;
            Context = null;
        }
    }

    private sealed class WriteOp
    {
        public WriteOp(int tiers)
        {
            Parts = new WritePart[tiers];
            for (int i = 0; i < tiers; i++)
                Parts[i] = new WritePart(this, i);
        }

        public readonly WritePart[] Parts;  // the per-tier contexts
        public TieredDevice? Device;
        public int Segment;
        public long Start, End;
        public DeviceIOCompletionCallback? Callback;
        public object? Context;
        public uint Status, NumBytes;
        public int Remaining;
        public SegmentActivity? Activity;

        public void Release()
        {
            if (Interlocked.Decrement(ref Remaining) != 0)
                return;
            var device = Device!;
            var callback = Callback!;
            var context = Context;
            uint status = Status, numBytes = NumBytes;
            Interlocked.Decrement(ref Activity!.InFlight);
            Activity = null;
            Device = null;
            Callback = null;
            Context = null;
            device._writes.Return(this);
            callback.Complete(status, numBytes, context!);
        }
    }

    private sealed class WritePart
    {
        public WritePart(WriteOp op, int tier)
        {
            Op = op;
            Tier = tier;
        }

        public readonly WriteOp Op;
        public readonly int Tier;
        public int Generation;  // of the tier when this part was issued
    }
}

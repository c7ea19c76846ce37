using System;
using System.Threading;
using FASTER.core;
using RemoteCache.Interop;

namespace RemoteCache.Device;

/// <summary>
/// A FASTER log device whose storage is a RemoteCache: the cache's address space is a ring of FASTER segments
/// (capacity / segment size of them). Segment s lives in ring slot s mod n; when the log reaches a segment whose
/// slot still holds an older one, the older one is evicted and <see cref="IDevice.StartSegment"/> moves past it,
/// so readers of evicted ranges go to the next tier. Use it as the first tier of a <see cref="TieredDevice"/>.
/// </summary>
/// <remarks>
/// <para>Completions come through the cache client's native completion path: <see cref="TryComplete"/> harvests
/// them on FASTER's threads, and the client's poller finishes whatever nobody harvests, so progress never depends
/// on FASTER calling TryComplete. <see cref="Throttle"/> reports more than <see cref="IDevice.ThrottleLimit"/>
/// operations in flight on the calling thread's lane of the client.</para>
/// <para>A read of a segment the device does not hold (evicted, being replaced, or never written) completes with
/// <see cref="NotResident"/>; a write to a segment older than the ring completes successfully without storing,
/// as a write below StartSegment would. I/O errors complete with <see cref="ErrorCodeOf"/> of the native status.
/// No call throws into FASTER.</para>
/// </remarks>
public sealed class RemoteCacheDevice : StorageDeviceBase
{
    /// <summary>Error code of a read of a range this device does not hold; a tiered device reads the next tier.</summary>
    public const uint NotResident = 0x2000_0100;

    private const uint ErrorBase = 0x2000_0000;

    private static readonly IoCallback s_onDone = OnDone;

    private readonly RemoteCacheClient _cache;
    private readonly bool _ownsCache;
    private readonly Pool<Io> _pool = new(() => new Io());
    private Slot[] _slots = Array.Empty<Slot>();
    private int _disposed;

    /// <summary>Creates a device over <paramref name="cache"/>, which must hold a whole number of FASTER segments.</summary>
    /// <param name="cache">
    /// The cache that stores the log's most recent segments, opened with <see cref="RemoteCacheOptions.Exclusive"/> = true:
    /// a cache belongs to one store, and a second client writing into it would corrupt the log silently.
    /// </param>
    /// <param name="throttleLimit">Operations in flight above which <see cref="Throttle"/> asks FASTER to wait.</param>
    /// <param name="ownsCache">
    /// Whether <see cref="Dispose"/> also disposes <paramref name="cache"/>; if so, a constructor or
    /// <see cref="Initialize"/> that throws disposes it too (nobody else would).
    /// </param>
    /// <remarks>
    /// A cache opened without a configuration (<see cref="RemoteCacheOptions.Config"/> null) is switched to
    /// <see cref="CacheConfig.OneSided"/>, what FASTER's reads want: each read is issued alone, from FASTER's thread,
    /// and over shm or RDMA reads the server's memory without its CPU.
    /// </remarks>
    /// <exception cref="ArgumentException"><paramref name="cache"/> was not opened exclusively.</exception>
    /// <exception cref="RemoteCacheException">The cache could not be switched to <see cref="CacheConfig.OneSided"/>.</exception>
    public RemoteCacheDevice(RemoteCacheClient cache, int throttleLimit = 256, bool ownsCache = false)
        : base($"remotecache:{cache?.Name}", 512, cache?.Capacity ?? 0)
    {
        ArgumentNullException.ThrowIfNull(cache);
        try
        {
            ArgumentOutOfRangeException.ThrowIfLessThan(throttleLimit, 1);
            if (!cache.IsExclusive)
                throw new ArgumentException(
                    $"RemoteCacheDevice: cache '{cache.Name}' was not opened exclusively; open it with " +
                    "RemoteCacheOptions.Exclusive = true, so that no other client (another store, or this store opened " +
                    "twice) can write into the log's segments", nameof(cache));
            if (!cache.ConfigGiven)
                cache.Reconfigure(CacheConfig.OneSided);
        }
        catch
        {
            if (ownsCache)
                cache.Dispose();
            throw;
        }
        _cache = cache;
        _ownsCache = ownsCache;
        ThrottleLimit = throttleLimit;
    }

    /// <summary>The cache this device stores segments in.</summary>
    public RemoteCacheClient Cache => _cache;

    /// <summary>Segments the cache holds at once (known after FASTER initialized the device).</summary>
    public int RingSegments => _slots.Length;

    /// <summary>Operations submitted to the cache and not yet completed (by anyone using the cache).</summary>
    public int InFlight => _cache.Outstanding;

    /// <summary>The device error code FASTER receives for a failed native operation.</summary>
    public static uint ErrorCodeOf(RcStatus status) => ErrorBase | (uint)(-(int)status & 0xff);

    /// <summary>The native status behind a device error code, or null if the code is not one of ours.</summary>
    public static RcStatus? StatusOf(uint errorCode) =>
        errorCode == NotResident || (errorCode & ~0xffu) != ErrorBase ? null : (RcStatus)(-(int)(errorCode & 0xff));

    /// <summary>Whether the device holds <paramref name="segment"/> now (it may be evicted right after).</summary>
    public bool Holds(int segment) =>
        _slots.Length > 0 && segment >= 0 && Volatile.Read(ref _slots[segment % _slots.Length].Segment) == segment;

    /// <inheritdoc/>
    public override void Initialize(long segmentSize, LightEpoch? epoch = null, bool omitSegmentIdFromFilename = false)
    {
        if (segmentSize <= 0 || segmentSize > Capacity || Capacity % segmentSize != 0)
        {
            if (_ownsCache)
                Dispose();  // FASTER drops a device whose Initialize threw: release the cache it owns now
            throw new FasterException(
                $"RemoteCacheDevice: cache '{_cache.Name}' holds {Capacity} bytes, which is not a whole number of " +
                $"FASTER segments of {segmentSize} bytes; choose LogSettings.SegmentSizeBits so that a segment divides " +
                "the cache (a cache of a power-of-two size and a smaller segment)");
        }
        base.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);
        var slots = new Slot[Capacity / segmentSize];
        for (int i = 0; i < slots.Length; i++)
            slots[i] = new Slot(i * segmentSize);
        _slots = slots;
    }

    /// <inheritdoc/>
    // FASTER asks before every read. Only the calling thread's lane is looked at: summing every lane read counters
    // other cores write on each of their I/Os (2 % of a two-thread YCSB run), and this thread can only wait for its own.
    public override bool Throttle() => _cache.OutstandingOnCallersLane > ThrottleLimit;

    /// <inheritdoc/>
    public override bool TryComplete() => Volatile.Read(ref _disposed) == 0 && _cache.Poll() > 0;

    /// <inheritdoc/>
    public override void ReadAsync(int segmentId, ulong sourceAddress, IntPtr destinationAddress, uint readLength,
                                   DeviceIOCompletionCallback callback, object context)
    {
        // FASTER reads whole sectors, so the last record of a segment can ask for bytes past its end; like a
        // segment file, the device returns what the segment has.
        long length = Math.Min((long)readLength, segmentSize - (long)Math.Min(sourceAddress, (ulong)segmentSize));
        var slot = Enter(segmentId);
        if (slot is null)
        {
            callback(NotResident, 0, context);
            return;
        }
        Submit(slot, write: false, slot.Base + (long)sourceAddress, destinationAddress, (uint)length, callback, context);
    }

    /// <inheritdoc/>
    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite,
                                    DeviceIOCompletionCallback callback, object context)
    {
        if (segmentId < 0 || destinationAddress + numBytesToWrite > (ulong)segmentSize)
        {
            callback(ErrorCodeOf(RcStatus.OutOfRange), 0, context);
            return;
        }
        var write = new PendingWrite(sourceAddress, destinationAddress, numBytesToWrite, callback, context);
        StartWrite(segmentId, write);
    }

    /// <inheritdoc/>
    public override void RemoveSegmentAsync(int segment, AsyncCallback callback, IAsyncResult result)
    {
        // Nothing to free remotely: the slot is simply forgotten (stragglers still read consistent bytes, and
        // the next segment of the slot waits for them before it writes).
        if (_slots.Length > 0 && segment >= 0)
            Interlocked.CompareExchange(ref _slots[segment % _slots.Length].Segment, Slot.Empty, segment);
        callback(result);
    }

    /// <inheritdoc/>
    public override void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        if (_ownsCache)
            _cache.Dispose();  // waits for operations in flight
    }

    // ---- slots ------------------------------------------------------------------------------------
    // A slot's Users counts operations inside it. An operation enters by counting itself and then checking the
    // slot's segment (both full fences), so a slot that changes segment can wait for Users to reach zero: the
    // new segment's writes are queued on the slot meanwhile, and whoever brings Users to zero issues them.
    // Users is striped per thread: one shared counter, touched twice per I/O by every thread, was the hottest
    // instruction of a two-thread YCSB run.
    // Nobody blocks, so a completion callback that writes again can never wait on itself.

    private Slot? Enter(int segment)
    {
        if (_slots.Length == 0 || segment < 0)
            return null;
        var slot = _slots[segment % _slots.Length];
        slot.Users.Add(1);
        if (Volatile.Read(ref slot.Segment) == segment)
            return slot;
        Leave(slot);
        return null;
    }

    private void Leave(Slot slot)
    {
        slot.Users.Add(-1);
        if (Volatile.Read(ref slot.Segment) == Slot.Switching && slot.Users.Sum() == 0)
            FinishSwitch(slot);
    }

    private void StartWrite(int segment, PendingWrite write)
    {
        var slot = Enter(segment);
        if (slot is not null)
        {
            Submit(slot, write: true, slot.Base + (long)write.Offset, write.Source, write.Length, write.Callback, write.Context);
            return;
        }
        if (_slots.Length == 0)
        {
            write.Callback(ErrorCodeOf(RcStatus.InvalidArgument), 0, write.Context);  // not initialized by FASTER
            return;
        }
        slot = _slots[segment % _slots.Length];
        bool tooOld, switching = false;
        lock (slot)
        {
            int current = slot.Segment;
            if (current == segment)
            {
                tooOld = false;  // switched meanwhile: go round again
            }
            else if (current == Slot.Switching ? segment < slot.Target : segment < current)
            {
                tooOld = true;
            }
            else
            {
                tooOld = false;
                if (current != Slot.Switching || segment > slot.Target)
                {
                    // This segment takes the slot: the one there is evicted, and so is every older segment.
                    DropPending(slot);
                    slot.Target = segment;
                    Interlocked.Exchange(ref slot.Segment, Slot.Switching);
                    MoveStartSegment(segment - _slots.Length + 1);
                    Utility.MonotonicUpdate(ref endSegment, segment, out _);
                }
                (slot.Pending ??= new()).Add(write);
                switching = true;
            }
        }
        if (tooOld)
            write.Callback(0, write.Length, write.Context);  // below the ring, as below StartSegment: not kept
        else if (!switching)
            StartWrite(segment, write);
        else if (slot.Users.Sum() == 0)
            FinishSwitch(slot);
    }

    private void FinishSwitch(Slot slot)
    {
        System.Collections.Generic.List<PendingWrite>? pending;
        int segment;
        lock (slot)
        {
            if (slot.Segment != Slot.Switching || slot.Users.Sum() != 0)
                return;
            segment = slot.Target;
            pending = slot.Pending;
            slot.Pending = null;
            Volatile.Write(ref slot.Segment, segment);
        }
        if (pending is null)
            return;
        foreach (var write in pending)
            StartWrite(segment, write);
    }

    private static void DropPending(Slot slot)
    {
        // Writes queued for a segment that is itself overtaken before it got the slot: below the ring now.
        if (slot.Pending is null)
            return;
        foreach (var write in slot.Pending)
            write.Callback(0, write.Length, write.Context);
        slot.Pending = null;
    }

    private void MoveStartSegment(int segment)
    {
        for (;;)
        {
            int current = Volatile.Read(ref startSegment);
            if (segment <= current || Interlocked.CompareExchange(ref startSegment, segment, current) == current)
                return;
        }
    }

    // ---- I/O --------------------------------------------------------------------------------------

    private void Submit(Slot slot, bool write, long address, IntPtr buffer, uint length,
                        DeviceIOCompletionCallback callback, object context)
    {
        var io = _pool.Rent();
        io.Device = this;
        io.Slot = slot;
        io.Length = length;
        io.Callback = callback;
        io.Context = context;
        try
        {
            if (write)
                _cache.Write(address, buffer, (int)length, s_onDone, io);
            else
                _cache.Read(address, buffer, (int)length, s_onDone, io);
        }
        catch (Exception e) when (e is RemoteCacheException or ObjectDisposedException or ArgumentOutOfRangeException)
        {
            var status = e switch
            {
                RemoteCacheException r => r.Status,
                ObjectDisposedException => RcStatus.Closed,
                _ => RcStatus.OutOfRange,
            };
            OnDone(status, io);
        }
    }

    private static void OnDone(RcStatus status, object? context)
    {
        var io = (Io)context!;
        var device = io.Device!;
        var callback = io.Callback!;
        var userContext = io.Context;
        uint length = io.Length;
        var slot = io.Slot!;
        io.Clear();
        device._pool.Return(io);
        device.Leave(slot);
        callback(status == RcStatus.Ok ? 0 : ErrorCodeOf(status), status == RcStatus.Ok ? length : 0, userContext!);
    }

    private sealed class Slot
    {
        public const int Empty = -1;
        public const int Switching = -2;

        public Slot(long @base) => Base = @base;

        public readonly long Base;  // cache address of the slot
        public int Segment = Empty; // the segment held, Empty, or Switching (to Target, once Users is zero)
        public readonly StripedCounter Users = new();
        public int Target;
        public System.Collections.Generic.List<PendingWrite>? Pending;
    }

    private readonly record struct PendingWrite(IntPtr Source, ulong Offset, uint Length,
                                                DeviceIOCompletionCallback Callback, object Context);

    private sealed class Io
    {
        public RemoteCacheDevice? Device;
        public Slot? Slot;
        public uint Length;
        public DeviceIOCompletionCallback? Callback;
        public object? Context;

        public void Clear()
        {
            Device = null;
            Slot = null;
            Callback = null;
            Context = null;
        }
    }
}

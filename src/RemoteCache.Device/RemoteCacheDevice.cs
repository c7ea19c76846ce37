using System;
using System.Numerics;
using System.Threading;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Slo;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>
/// A FASTER log device whose storage is a RemoteCache. For a segmented log (FASTER's main log) the cache's address
/// space is a ring of FASTER segments (capacity / segment size of them): segment s lives in ring slot s mod n; when
/// the log reaches a segment whose slot still holds an older one, the older one is evicted and
/// <see cref="IDevice.StartSegment"/> moves past it, so readers of evicted ranges go to the next tier. For an
/// unsegmented log (FASTER initializes the object log of a FasterKV with class keys or values, and DeltaLog devices,
/// with segment size −1) the cache is a ring of bytes filled in write order, the oldest evicted. Use it as the first
/// tier of a <see cref="TieredDevice"/>.
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
/// <para><b>Unsegmented logs.</b> FASTER still names a segment in every call: a DeltaLog's is 0 and its offsets are
/// the log's flat addresses; the object log's is the main-log segment whose page the objects belong to, and each
/// segment's offsets start at 0. So writes are not placed at their address mod capacity (two segments would share
/// bytes) but at the ring's head, in arrival order, and an index maps (segment, offsets) to where they went; the
/// resident window is the last capacity bytes placed. A read is served only if every byte it asks for was written
/// completely into the window (from at most <see cref="UnsegmentedReadParts"/> writes); it is checked again after
/// the data arrived, and a read that a later write overtook while in flight completes with <see cref="NotResident"/>
/// instead of returning overwritten bytes. Rewriting offsets makes their old bytes unreadable at once. A write
/// larger than the cache, or one that would land on bytes an older write is still writing, completes successfully
/// without storing. <see cref="IDevice.RemoveSegment"/> forgets a segment's objects. Nothing written is readable
/// through a new device: a process that recovers starts with an empty cache, and reads go to the next tier.</para>
/// </remarks>
public sealed partial class RemoteCacheDevice : StorageDeviceBase
{
    /// <summary>Error code of a read of a range this device does not hold; a tiered device reads the next tier.</summary>
    public const uint NotResident = 0x2000_0100;

    /// <summary>The most writes one read of an unsegmented log may span and still be served by the cache.</summary>
    public const int UnsegmentedReadParts = ExtentRing.MaxParts;

    private const uint ErrorBase = 0x2000_0000;

    private static readonly IoCallback s_onDone = OnDone;
    private static readonly IoCallback s_onRingWrite = OnRingWrite;
    private static readonly IoCallback s_onRingRead = OnRingRead;

    private readonly RemoteCacheClient _cache;
    private readonly bool _ownsCache;
    private readonly ILogger _logger;
    private int _refusalLogged;
    private readonly Pool<Io> _pool = new(() => new Io());
    private readonly Pool<RingIo> _ringPool = new(() => new RingIo());
    private Slot[] _slots = Array.Empty<Slot>();
    private ExtentRing? _ring;  // set for an unsegmented log
    private int _disposed;
    private long _readsThatHeldASwitch;

    /// <summary>
    /// Creates a device over <paramref name="cache"/>, which must hold a whole number of FASTER segments if FASTER
    /// initializes the device with a segment size. Over an encrypted cache (<see cref="RemoteCacheClient.EncryptionBlockSize"/>)
    /// the device's sector is the block (FASTER then writes whole blocks).
    /// </summary>
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
    /// A cache opened without a configuration or an SLO is switched to the configuration its performance model
    /// (<see cref="RemoteCacheOptions.SloModelPath"/>) predicts to meet <see cref="DefaultSlo"/> (the fastest when none
    /// does), or without a model to <see cref="CacheConfig.OneSided"/>, what FASTER's reads want: each read is issued
    /// alone, from FASTER's thread, and over shm or RDMA reads the server's memory without its CPU. Whatever the cache's
    /// configuration (given, chosen for an SLO, or the manager's for a managed cache), the device keeps its batch size and
    /// queue depth at least <see cref="DeviceWindow"/>, so that FASTER's concurrent reads are not sent one round trip at a
    /// time.
    /// </remarks>
    /// <param name="logger">Where the device logs its set-up and refused operations; null: nowhere.</param>
    /// <param name="capacity">
    /// Bytes of the cache the device uses, from address 0: a multiple of its sector, at most the cache's capacity (say
    /// a whole number of the segments FASTER will ask for). 0 (the default): all of a plain cache; the largest power of
    /// two an encrypted cache holds (its capacity is whole blocks after its key check, seldom a round number).
    /// </param>
    /// <exception cref="ArgumentException">
    /// <paramref name="cache"/> was not opened exclusively, or its SLO model cannot be read or is not of 512 B records.
    /// </exception>
    /// <exception cref="RemoteCacheException">The cache could not be switched to <see cref="CacheConfig.OneSided"/>.</exception>
    public RemoteCacheDevice(RemoteCacheClient cache, int throttleLimit = 256, bool ownsCache = false, ILogger? logger = null, long capacity = 0)
        : base($"remotecache:{cache?.Name}", SectorSizeOf(cache), UsableCapacityOf(cache, capacity))
    {
        ArgumentNullException.ThrowIfNull(cache);
        _logger = logger ?? NullLogger.Instance;
        try
        {
            ArgumentOutOfRangeException.ThrowIfLessThan(throttleLimit, 1);
            if (capacity < 0 || capacity > cache.Capacity || capacity % SectorSize != 0)
                throw new ArgumentOutOfRangeException(nameof(capacity), capacity,
                    $"RemoteCacheDevice: cache '{cache.Name}' holds {cache.Capacity} bytes; the device's capacity must be a multiple of its {SectorSize}-byte sector within them (0: the default)");
            if (!cache.IsExclusive)
                throw new ArgumentException(
                    $"RemoteCacheDevice: cache '{cache.Name}' was not opened exclusively; open it with " +
                    "RemoteCacheOptions.Exclusive = true, so that no other client (another store, or this store opened " +
                    "twice) can write into the log's segments", nameof(cache));
            if (!cache.ConfigGiven)
            {
                var config = cache.SloModelPath is { } model ? ConfigForDefaultSlo(cache, model) : CacheConfig.OneSided;
                cache.ReconfigureAsync(config).GetAwaiter().GetResult();  // a constructor: FASTER builds devices synchronously
                DeviceLog.Reconfigured(_logger, FileName, cache.Name, config);
            }
            // FASTER keeps up to throttleLimit reads in flight; a configuration chosen for one read's latency (a managed
            // cache's, an SLO's: often one request per batch and one batch in flight) would send them one round trip at a
            // time. The window costs no server core.
            cache.KeepWindowAtLeast(DeviceWindow.BatchSize, DeviceWindow.QueueDepth);
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
        cache.ContentLost += OnContentLost;
    }

    // FASTER aligns every read and write to the device's sector: an encrypted cache's block makes writes whole blocks.
    private static uint SectorSizeOf(RemoteCacheClient? cache) => (uint)Math.Max(MinSectorSize, cache?.EncryptionBlockSize ?? 0);

    // By default an encrypted cache's largest power of two: every segment size up to it divides that. A capacity out of
    // range is refused in the constructor's body, where an owned cache is disposed.
    private static long UsableCapacityOf(RemoteCacheClient? cache, long capacity) =>
        cache is null ? 0
        : capacity > 0 && capacity <= cache.Capacity ? capacity
        : cache.EncryptionBlockSize is null || cache.Capacity <= 0 ? cache.Capacity
        : (long)BitOperations.RoundUpToPowerOf2((ulong)cache.Capacity + 1) / 2;

    private const int MinSectorSize = 512;

    /// <summary>
    /// The least batch size and queue depth the device keeps its cache at (<see cref="RemoteCacheClient.KeepWindowAtLeast"/>),
    /// whatever configuration the cache was opened with or is given later: <see cref="CacheConfig.OneSided"/>'s.
    /// </summary>
    public static (int BatchSize, int QueueDepth) DeviceWindow => (CacheConfig.OneSided.BatchSize, CacheConfig.OneSided.QueueDepth);

    /// <summary>
    /// Raised when the cache lost bytes it held for the log (<see cref="RemoteCacheClient.ContentLost"/>: a server was
    /// replaced without its content), after the device forgot them: reads of those segments complete with
    /// <see cref="NotResident"/> until they are written again. The list holds the segments forgotten (empty for an
    /// unsegmented log, whose ring forgets the lost bytes' extents). A <see cref="TieredDevice"/> over this device
    /// takes the tier back and refills it from the next tier.
    /// </summary>
    public event Action<RemoteCacheDevice, System.Collections.Generic.IReadOnlyList<int>>? SegmentsLost;

    /// <summary>
    /// The SLO a device asks of a cache opened without a configuration or an SLO but with a performance model
    /// (<see cref="RemoteCacheOptions.SloModelPath"/>): FASTER's reads of the cache follow its hash chains one after
    /// another, so what it needs is latency: mean reads of 512 B (FASTER reads whole sectors) within 10 µs (Redy's example
    /// SLO), with no throughput bound — FASTER gets its throughput from many reads in flight.
    /// </summary>
    public static RemoteCacheSlo DefaultSlo => new() { ReadLatency = TimeSpan.FromMicroseconds(10), RecordSize = 512 };

    // The cheapest configuration the model predicts to meet DefaultSlo; when none does, the one with the lowest read latency.
    private CacheConfig ConfigForDefaultSlo(RemoteCacheClient cache, string modelPath)
    {
        PerformanceModel model;
        try
        {
            model = PerformanceModel.Load(modelPath);
        }
        catch (FormatException e)
        {
            throw new ArgumentException($"RemoteCacheDevice: cache '{cache.Name}': the SLO model: {e.Message}", nameof(cache), e);
        }
        var slo = DefaultSlo;
        if (model.RecordSize != slo.RecordSize)
            throw new ArgumentException(
                $"RemoteCacheDevice: cache '{cache.Name}': the SLO model {modelPath} was measured with {model.RecordSize} B records; " +
                $"the device's reads are {slo.RecordSize} B: give it a {slo.RecordSize} B model (remotecache slo model --record-size {slo.RecordSize})",
                nameof(cache));
        var plan = new SloPlanner(model).Plan(slo);
        if (plan.Config is { } config)
            return config;
        var fastest = plan.Searches[0].LowestLatencyReachingThroughput
            ?? throw new ArgumentException($"RemoteCacheDevice: cache '{cache.Name}': the SLO model {modelPath} predicts no configuration", nameof(cache));
        DeviceLog.SloNotMet(_logger, FileName, cache.Name, slo.ToString(), fastest.Config, fastest.Predicted.MeanUs);
        return fastest.Config;
    }

    /// <summary>The cache this device stores segments in.</summary>
    public RemoteCacheClient Cache => _cache;

    /// <summary>Segments the cache holds at once (known after FASTER initialized the device; 0 for an unsegmented log).</summary>
    public int RingSegments => _slots.Length;

    /// <summary>Whether FASTER initialized the device for an unsegmented log (segment size −1).</summary>
    public bool IsUnsegmented => _ring is not null;

    /// <summary>The write-order ring of an unsegmented log (tests look at it).</summary>
    internal ExtentRing? Ring => _ring;

    /// <summary>Operations submitted to the cache and not yet completed (by anyone using the cache).</summary>
    public int InFlight => _cache.Outstanding;

    /// <summary>
    /// Reads of a segment still in flight when a newer segment took their slot: each held the newer segment's
    /// writes back until it completed (tests check that the case occurs and reads stay right).
    /// </summary>
    internal long ReadsThatHeldASwitch => Volatile.Read(ref _readsThatHeldASwitch);

    /// <summary>The device error code FASTER receives for a failed native operation.</summary>
    public static uint ErrorCodeOf(RemoteCacheStatus status) => ErrorBase | (uint)(-(int)status & 0xff);

    /// <summary>The native status behind a device error code, or null if the code is not one of ours.</summary>
    public static RemoteCacheStatus? StatusOf(uint errorCode) =>
        errorCode == NotResident || (errorCode & ~0xffu) != ErrorBase ? null : (RemoteCacheStatus)(-(int)(errorCode & 0xff));

    /// <summary>Whether the device holds <paramref name="segment"/> of a segmented log now (it may be evicted right after).</summary>
    public bool Holds(int segment) =>
        _slots.Length > 0 && segment >= 0 && Volatile.Read(ref _slots[segment % _slots.Length].Segment) == segment;

    /// <inheritdoc/>
    /// <remarks>
    /// A segment size of −1 (FASTER's unsegmented object log and DeltaLog devices) makes the cache a ring filled in
    /// write order; any other size must be a power of two that divides the cache.
    /// </remarks>
    public override void Initialize(long segmentSize, LightEpoch? epoch = null, bool omitSegmentIdFromFilename = false)
    {
        if (segmentSize == -1)
        {
            base.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);
            _ring = new ExtentRing(Capacity);
            DeviceLog.InitializedUnsegmented(_logger, FileName, Capacity);
            return;
        }
        if (segmentSize <= 0 || segmentSize > Capacity || Capacity % segmentSize != 0)
        {
            if (_ownsCache)
                Dispose();  // FASTER drops a device whose Initialize threw: release the cache it owns now
            throw StoreBinding.Refusal(
                $"RemoteCacheDevice: cache '{_cache.Name}' holds {Capacity} bytes, which is not a whole number of " +
                $"FASTER segments of {segmentSize} bytes; choose LogSettings.SegmentSizeBits so that a segment divides " +
                "the cache (a cache of a power-of-two size and a smaller segment)");
        }
        base.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);
        var slots = new Slot[Capacity / segmentSize];
        for (int i = 0; i < slots.Length; i++)
            slots[i] = new Slot(i * segmentSize);
        _slots = slots;
        DeviceLog.InitializedSegmented(_logger, FileName, slots.Length, segmentSize, Capacity);
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
        if (_ring is not null)
        {
            ReadUnsegmented(segmentId, sourceAddress, destinationAddress, readLength, callback, context);
            return;
        }
        // FASTER reads whole sectors, so the last record of a segment can ask for bytes past its end; like a
        // segment file, the device returns what the segment has.
        long length = Math.Min((long)readLength, segmentSize - (long)Math.Min(sourceAddress, (ulong)segmentSize));
        var slot = Enter(segmentId);
        if (slot is null)
        {
            callback.Complete(NotResident, 0, context);
            return;
        }
        Submit(slot, write: false, slot.Base + (long)sourceAddress, destinationAddress, (uint)length, callback, context);
    }

    /// <inheritdoc/>
    public override void WriteAsync(IntPtr sourceAddress, int segmentId, ulong destinationAddress, uint numBytesToWrite,
                                    DeviceIOCompletionCallback callback, object context)
    {
        if (_ring is not null)
        {
            WriteUnsegmented(sourceAddress, segmentId, destinationAddress, numBytesToWrite, callback, context);
            return;
        }
        if (segmentId < 0 || destinationAddress + numBytesToWrite > (ulong)segmentSize)
        {
            callback.Complete(ErrorCodeOf(RemoteCacheStatus.OutOfRange), 0, context);
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
        _ring?.Remove(segment);
        if (_slots.Length > 0 && segment >= 0)
            Interlocked.CompareExchange(ref _slots[segment % _slots.Length].Segment, Slot.Empty, segment);
        callback(result);
    }

    // The cache's bytes [address, + length) no longer hold what was written: forget the segments (or extents) there.
    private void OnContentLost(object? sender, RemoteCacheContentLostEventArgs lost)
    {
        var forgotten = new System.Collections.Generic.List<int>();
        long end = lost.Address + lost.Length;
        if (_ring is { } ring)
        {
            ring.ForgetCacheRange(lost.Address, end);
        }
        else
        {
            foreach (var slot in _slots)
            {
                if (slot.Base + segmentSize <= lost.Address || end <= slot.Base)
                    continue;
                // A slot switching to a newer segment has not written it yet: those writes land on the replacement.
                int segment = Volatile.Read(ref slot.Segment);
                if (segment >= 0 && Interlocked.CompareExchange(ref slot.Segment, Slot.Empty, segment) == segment)
                    forgotten.Add(segment);
            }
        }
        DeviceLog.ContentLost(_logger, FileName, lost.Address, lost.Length, forgotten.Count, lost.Reason);
        SegmentsLost?.Invoke(this, forgotten);
    }

    /// <inheritdoc/>
    public override void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
            return;
        _cache.ContentLost -= OnContentLost;
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
            write.Callback.Complete(ErrorCodeOf(RemoteCacheStatus.InvalidArgument), 0, write.Context);  // not initialized by FASTER
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
            write.Callback.Complete(0, write.Length, write.Context);  // below the ring, as below StartSegment: not kept
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
            write.Callback.Complete(0, write.Length, write.Context);
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
        io.IsRead = !write;
        io.Length = length;
        io.Callback = callback;
        io.Context = context;
        Issue(write, address, buffer, length, s_onDone, io);
    }

    // Hands one operation to the cache; one refused before it was sent completes through the callback like any other.
    private void Issue(bool write, long address, IntPtr buffer, uint length, IoCallback onDone, object io)
    {
        try
        {
            if (write)
                _cache.StartWrite(address, buffer, (int)length, onDone, io);
            else
                _cache.StartRead(address, buffer, (int)length, onDone, io);
        }
        catch (Exception e) when (e is RemoteCacheException or ObjectDisposedException or ArgumentOutOfRangeException)
        {
            var status = e switch
            {
                RemoteCacheException r => r.Status,
                ObjectDisposedException => RemoteCacheStatus.Closed,
                _ => RemoteCacheStatus.OutOfRange,
            };
            if (Interlocked.Exchange(ref _refusalLogged, 1) == 0)
                DeviceLog.OperationRefused(_logger, FileName, status);
            onDone(status, io);
        }
    }

    private static void OnDone(RemoteCacheStatus status, object? context)
    {
        var io = (Io)context!;
        var device = io.Device!;
        var callback = io.Callback!;
        var userContext = io.Context;
        uint length = io.Length;
        var slot = io.Slot!;
        // Still counted in Users, so a switch of the slot cannot have finished: Switching means one waits for us.
        if (io.IsRead && Volatile.Read(ref slot.Segment) == Slot.Switching)
            Interlocked.Increment(ref device._readsThatHeldASwitch);
        io.Clear();
        device._pool.Return(io);
        device.Leave(slot);
        callback.Complete(status == RemoteCacheStatus.Ok ? 0 : ErrorCodeOf(status), status == RemoteCacheStatus.Ok ? length : 0, userContext!);
    }

    // ---- unsegmented logs ---------------------------------------------------------------------------

    private void WriteUnsegmented(IntPtr source, int segment, ulong offset, uint length,
                                  DeviceIOCompletionCallback callback, object context)
    {
        var extent = Addressable(offset, length) ? _ring!.Place(segment, (long)offset, length) : null;
        if (extent is null)
        {
            callback.Complete(0, length, context);  // not kept: reads of it go to the next tier
            return;
        }
        var io = _ringPool.Rent();
        io.Device = this;
        io.Extent = extent;
        io.Length = length;
        io.Callback = callback;
        io.Context = context;
        Issue(write: true, extent.CacheAddress(Capacity), source, length, s_onRingWrite, io);
    }

    private static void OnRingWrite(RemoteCacheStatus status, object? context)
    {
        var io = (RingIo)context!;
        var device = io.Device!;
        device._ring!.Written(io.Extent!, status == RemoteCacheStatus.Ok);
        io.Finish(status == RemoteCacheStatus.Ok ? 0 : ErrorCodeOf(status));
    }

    private void ReadUnsegmented(int segment, ulong offset, IntPtr destination, uint length,
                                 DeviceIOCompletionCallback callback, object context)
    {
        Span<ExtentRing.Part> parts = stackalloc ExtentRing.Part[ExtentRing.MaxParts];
        long oldest = 0;
        int count = Addressable(offset, length) ? _ring!.Locate(segment, (long)offset, length, parts, out oldest) : 0;
        if (count == 0)
        {
            callback.Complete(NotResident, 0, context);
            return;
        }
        var io = _ringPool.Rent();
        io.Device = this;
        io.Oldest = oldest;
        io.Remaining = count;
        io.Length = length;
        io.Callback = callback;
        io.Context = context;
        // io may be finished and reused as soon as the last part is issued: nothing reads it after that.
        for (int i = 0; i < count; i++)
            Issue(write: false, parts[i].CacheAddress, destination + (nint)parts[i].Skip, (uint)parts[i].Length, s_onRingRead, io);
    }

    private static bool Addressable(ulong offset, uint length) => offset <= (ulong)(long.MaxValue - length);

    private static void OnRingRead(RemoteCacheStatus status, object? context)
    {
        var io = (RingIo)context!;
        if (status != RemoteCacheStatus.Ok)
            Interlocked.CompareExchange(ref io.Status, (int)status, (int)RemoteCacheStatus.Ok);
        if (Interlocked.Decrement(ref io.Remaining) != 0)
            return;
        var failed = (RemoteCacheStatus)io.Status;
        // Checked after the data arrived: a write placed over these bytes meanwhile may have changed them.
        uint error = failed != RemoteCacheStatus.Ok ? ErrorCodeOf(failed)
                   : io.Device!._ring!.StillHolds(io.Oldest) ? 0 : NotResident;
        io.Finish(error);
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
        public bool IsRead;
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

    // One write, or one read of up to ExtentRing.MaxParts cache ranges, of an unsegmented log.
    private sealed class RingIo
    {
        public RemoteCacheDevice? Device;
        public ExtentRing.Extent? Extent;
        public long Oldest;
        public int Remaining;
        public int Status;  // RemoteCacheStatus of the first part that failed
        public uint Length;
        public DeviceIOCompletionCallback? Callback;
        public object? Context;

        public void Finish(uint error)
        {
            var device = Device!;
            var callback = Callback!;
            var context = Context;
            uint length = Length;
            Device = null;
            Extent = null;
            Callback = null;
            Context = null;
            Status = (int)RemoteCacheStatus.Ok;
            device._ringPool.Return(this);
            callback.Complete(error, error == 0 ? length : 0, context!);
        }
    }
}

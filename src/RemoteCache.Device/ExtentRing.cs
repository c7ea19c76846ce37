using System;
using System.Collections.Generic;
using System.Threading;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>
/// Where an unsegmented <see cref="RemoteCacheDevice"/> keeps what FASTER wrote: the cache is a ring filled in write
/// order. Each write takes the next bytes of the ring (ring address r is cache address r mod capacity), evicting the
/// oldest; an index maps each segment's written offset ranges (extents) to ring addresses.
/// </summary>
/// <remarks>
/// <para>Why write order and not FASTER's address mod capacity: FASTER addresses an unsegmented device in two ways.
/// A DeltaLog uses one flat address (segment 0, offset = address), but the object log of a FasterKV with class keys or
/// values is written at (segment of the main-log page, offset in that segment's objects), and every segment's
/// offsets start at 0; one offset therefore names different bytes in different segments. Placing writes in arrival
/// order serves both, and for a DeltaLog (one append-only address) it is the same as address mod capacity with a
/// resident window of the last <c>capacity</c> bytes.</para>
/// <para>Residency is decided by ring address: bytes at ring address r are intact as long as r is not below
/// <see cref="Low"/> (head − capacity), since only a write placed at r + capacity or beyond reuses them. A read
/// checks this when it is planned (<see cref="Locate"/>) and again after its data arrived
/// (<see cref="StillHolds"/>): a write placed over it while it was in flight makes it not resident, never torn.</para>
/// <para>An extent becomes readable when its write completed. A later write of overlapping offsets removes the
/// overlap from the index at once (those bytes are stale from then on). A write that would land on ring bytes an older
/// write is still writing is not kept (the two could land in either order), nor is one larger than the cache.</para>
/// <para>One lock guards the index: these logs are written a page at a time and read an object (or a page) at a
/// time, far less often than the main log, whose segments keep the lock-free ring of slots.</para>
/// </remarks>
internal sealed class ExtentRing
{
    /// <summary>The most cache ranges one read is split into; a read needing more falls through to the next tier.</summary>
    public const int MaxParts = 8;

    private readonly long _capacity;
    private readonly object _lock = new();
    private readonly Dictionary<int, List<Extent>> _segments = new();  // per segment: disjoint, sorted by Offset
    private readonly Queue<Extent> _placed = new();                    // every write placed, in ring order
    private readonly LinkedList<Extent> _writing = new();              // writes in flight, in ring order
    private long _head;                                                // ring bytes placed so far

    public ExtentRing(long capacity)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(capacity, 1);
        _capacity = capacity;
    }

    /// <summary>Ring bytes placed so far (the ring address of the next write).</summary>
    public long Head => Volatile.Read(ref _head);

    /// <summary>Ring addresses below this have been (or are being) overwritten.</summary>
    public long Low => Head - _capacity;

    /// <summary>
    /// Places a write of [<paramref name="offset"/>, + <paramref name="length"/>) of <paramref name="segment"/>;
    /// null if it is not kept. Every extent returned must be finished with <see cref="Written"/>.
    /// </summary>
    public Extent? Place(int segment, long offset, long length)
    {
        if (length <= 0)
            return null;
        lock (_lock)
        {
            Forget(segment, offset, offset + length);
            if (length > _capacity)
                return null;
            long at = _head;
            long room = _capacity - at % _capacity;
            if (length > room)
                at += room;  // never across the cache's end, so that every extent is one cache range
            if (_writing.First is { } oldest && oldest.Value.Ring < at + length - _capacity)
                return null;
            var extent = new Extent(segment, offset, length, at, origin: null);
            Volatile.Write(ref _head, at + length);
            Insert(extent);
            _placed.Enqueue(extent);
            extent.InFlight = _writing.AddLast(extent);
            Prune();
            return extent;
        }
    }

    /// <summary>Ends a write placed by <see cref="Place"/>; its bytes become readable if it succeeded.</summary>
    public void Written(Extent extent, bool succeeded)
    {
        lock (_lock)
        {
            if (extent.InFlight is { } node)
                _writing.Remove(node);
            extent.InFlight = null;
            // A write whose offsets were partly rewritten while it was in flight left pieces in the index that
            // stay unreadable: they were cut from an extent that was not readable yet.
            if (succeeded && !extent.Cut)
                extent.Readable = true;
        }
    }

    /// <summary>
    /// Finds the cache ranges holding [<paramref name="offset"/>, + <paramref name="length"/>) of
    /// <paramref name="segment"/>: how many parts were filled, 0 if some byte is not resident (never written, write
    /// in flight, evicted, or more than <see cref="MaxParts"/> extents). <paramref name="oldest"/> is the lowest
    /// ring address read, for <see cref="StillHolds"/> after the read.
    /// </summary>
    public int Locate(int segment, long offset, long length, Span<Part> parts, out long oldest)
    {
        oldest = long.MaxValue;
        if (length <= 0)
            return 0;
        lock (_lock)
        {
            if (!_segments.TryGetValue(segment, out var extents))
                return 0;
            long low = _head - _capacity;
            long position = offset, end = offset + length;
            int count = 0;
            for (int i = IndexOfFirstEndingAfter(extents, offset); position < end; i++)
            {
                if (i >= extents.Count || count == parts.Length)
                    return 0;
                var e = extents[i];
                if (e.Offset > position || !e.Readable)
                    return 0;
                long ring = e.Ring + (position - e.Offset);
                if (ring < low)
                    return 0;
                long n = Math.Min(end, e.End) - position;
                parts[count++] = new Part(ring % _capacity, position - offset, n);
                oldest = Math.Min(oldest, ring);
                position += n;
            }
            return count;
        }
    }

    /// <summary>Whether bytes read from ring address <paramref name="oldest"/> on were intact when they were read (call after the read).</summary>
    public bool StillHolds(long oldest) => oldest >= Low;

    /// <summary>Forgets <paramref name="segment"/> (FASTER removed it).</summary>
    public void Remove(int segment)
    {
        lock (_lock)
        {
            if (_segments.Remove(segment, out var extents))
                foreach (var e in extents)
                    e.Cut = true;
        }
    }

    /// <summary>Forgets every extent stored in cache bytes [<paramref name="start"/>, <paramref name="end"/>) (they were lost).</summary>
    public void ForgetCacheRange(long start, long end)
    {
        lock (_lock)
        {
            var emptied = new List<int>();
            foreach (var (segment, extents) in _segments)
            {
                extents.RemoveAll(e =>
                {
                    long at = e.CacheAddress(_capacity);
                    bool lost = at < end && start < at + e.Length;
                    e.Cut |= lost;
                    return lost;
                });
                if (extents.Count == 0)
                    emptied.Add(segment);
            }
            foreach (int segment in emptied)
                _segments.Remove(segment);
        }
    }

    /// <summary>Extents in the index (tests).</summary>
    public int ExtentCount
    {
        get
        {
            lock (_lock)
            {
                int n = 0;
                foreach (var list in _segments.Values)
                    n += list.Count;
                return n;
            }
        }
    }

    // ---- index ------------------------------------------------------------------------------------

    private void Insert(Extent extent)
    {
        if (!_segments.TryGetValue(extent.Segment, out var extents))
            _segments.Add(extent.Segment, extents = new List<Extent>());
        extents.Insert(IndexOfFirstEndingAfter(extents, extent.Offset), extent);
    }

    // Removes [start, end) from the segment's extents; an extent partly inside leaves the pieces outside.
    private void Forget(int segment, long start, long end)
    {
        if (!_segments.TryGetValue(segment, out var extents))
            return;
        int i = IndexOfFirstEndingAfter(extents, start);
        while (i < extents.Count && extents[i].Offset < end)
        {
            var e = extents[i];
            extents.RemoveAt(i);
            e.Cut = true;
            if (e.Offset < start)
                extents.Insert(i++, e.Piece(e.Offset, start));
            if (end < e.End)
                extents.Insert(i++, e.Piece(end, e.End));
        }
        if (extents.Count == 0)
            _segments.Remove(segment);
    }

    // Drops from the index the extents the ring has wholly passed (they cannot be read any more).
    private void Prune()
    {
        long low = _head - _capacity;
        while (_placed.TryPeek(out var gone) && gone.Ring + gone.Length <= low)
        {
            _placed.Dequeue();
            if (!_segments.TryGetValue(gone.Segment, out var extents))
                continue;
            // The write's extent, or the pieces left of it, lie within its offsets.
            int i = IndexOfFirstEndingAfter(extents, gone.Offset);
            while (i < extents.Count && extents[i].Offset < gone.End)
            {
                if (extents[i].Origin == gone)
                    extents.RemoveAt(i);
                else
                    i++;
            }
            if (extents.Count == 0)
                _segments.Remove(gone.Segment);
        }
    }

    private static int IndexOfFirstEndingAfter(List<Extent> extents, long offset)
    {
        int lo = 0, hi = extents.Count;
        while (lo < hi)
        {
            int mid = (lo + hi) >>> 1;
            if (extents[mid].End <= offset)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }

    /// <summary>A cache range of a read: <see cref="Length"/> bytes at <see cref="CacheAddress"/> go to the read's buffer at <see cref="Skip"/>.</summary>
    public readonly record struct Part(long CacheAddress, long Skip, long Length);

    /// <summary>Offsets [Offset, End) of a segment, stored from ring address <see cref="Ring"/> on.</summary>
    public sealed class Extent
    {
        public Extent(int segment, long offset, long length, long ring, Extent? origin)
        {
            Segment = segment;
            Offset = offset;
            Length = length;
            Ring = ring;
            Origin = origin ?? this;
        }

        public readonly int Segment;
        public readonly long Offset;
        public readonly long Length;
        public readonly long Ring;
        public readonly Extent Origin;       // the write this extent is (a piece of)
        public bool Readable;                // its write completed (and was not overtaken)
        public bool Cut;                     // no longer in the index as a whole
        public LinkedListNode<Extent>? InFlight;

        public long End => Offset + Length;

        /// <summary>Cache address of the extent's first byte.</summary>
        public long CacheAddress(long capacity) => Ring % capacity;

        public Extent Piece(long start, long end) =>
            new(Segment, start, end - start, Ring + (start - Offset), Origin) { Readable = Readable };
    }
}

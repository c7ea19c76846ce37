using System.Collections.Concurrent;
using System.Collections.Generic;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>
/// Which byte ranges of which segments a tier has finished writing (in this process): a read may use the tier
/// only inside them. A range being written is not readable until its write completes; a range with two
/// overlapping writes in flight becomes readable when the last of them completes.
/// </summary>
internal sealed class WrittenRanges
{
    private readonly ConcurrentDictionary<int, Segment> _segments = new();

    public bool Contains(int segment, long start, long end) =>
        _segments.TryGetValue(segment, out var s) && s.Contains(start, end);

    /// <summary>Marks [start, end) as being written; true if this is the segment's first write.</summary>
    public bool BeginWrite(int segment, long start, long end)
    {
        bool first = false;
        if (!_segments.TryGetValue(segment, out var s))
            s = _segments.GetOrAdd(segment, _ => { first = true; return new Segment(); });
        s.Begin(start, end);
        return first;
    }

    public void EndWrite(int segment, long start, long end, bool succeeded)
    {
        if (_segments.TryGetValue(segment, out var s))
            s.End(start, end, succeeded);
    }

    public void Remove(int segment) => _segments.TryRemove(segment, out _);

    /// <summary>Forgets every segment below <paramref name="segment"/> (evicted or truncated).</summary>
    public void RemoveBelow(int segment)
    {
        foreach (var key in _segments.Keys)
            if (key < segment)
                _segments.TryRemove(key, out _);
    }

    public int SegmentCount => _segments.Count;

    private sealed class Segment
    {
        // Sorted, disjoint, non-adjacent [Start, End) ranges. FASTER flushes pages in order, so there are few.
        private readonly List<(long Start, long End)> _done = new();
        private readonly List<(long Start, long End)> _writing = new();

        // Reads (one per device read) look at an immutable copy without locking; writes (one per page flush)
        // replace it under the lock.
        private (long Start, long End)[] _snapshot = System.Array.Empty<(long, long)>();

        public bool Contains(long start, long end)
        {
            foreach (var (s, e) in System.Threading.Volatile.Read(ref _snapshot))
            {
                if (s > start)
                    return false;
                if (end <= e)
                    return true;
            }
            return false;
        }

        private void Publish() => System.Threading.Volatile.Write(ref _snapshot, _done.ToArray());

        public void Begin(long start, long end)
        {
            lock (this)
            {
                Cut(start, end);
                _writing.Add((start, end));
                Publish();
            }
        }

        public void End(long start, long end, bool succeeded)
        {
            lock (this)
            {
                _writing.Remove((start, end));
                if (!succeeded)
                    return;
                foreach (var (s, e) in _writing)
                    if (s < end && start < e)
                        return;  // another write of these bytes is still in flight
                Add(start, end);
                Publish();
            }
        }

        private void Cut(long start, long end)
        {
            for (int i = _done.Count - 1; i >= 0; i--)
            {
                var (s, e) = _done[i];
                if (e <= start || end <= s)
                    continue;
                _done.RemoveAt(i);
                if (end < e)
                    _done.Insert(i, (end, e));
                if (s < start)
                    _done.Insert(i, (s, start));
            }
        }

        private void Add(long start, long end)
        {
            int i = 0;
            while (i < _done.Count && _done[i].End < start)
                i++;
            // Merge with every range that overlaps or touches [start, end).
            while (i < _done.Count && _done[i].Start <= end)
            {
                start = System.Math.Min(start, _done[i].Start);
                end = System.Math.Max(end, _done[i].End);
                _done.RemoveAt(i);
            }
            _done.Insert(i, (start, end));
        }
    }
}

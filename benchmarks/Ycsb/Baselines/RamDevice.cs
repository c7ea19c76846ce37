using System;
using System.Collections.Concurrent;
using System.Runtime.InteropServices;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// The in-memory baseline's device: FASTER's memory holds the whole loaded log, and what inserts push out of it lands
/// here, in process memory allocated segment by segment as the log grows (so a record evicted by inserts stays
/// readable, where FASTER's NullDevice would lose it).
/// </summary>
public sealed unsafe class RamDevice : BlockingIoDevice
{
    private readonly ConcurrentDictionary<int, IntPtr> _segments = new();
    private long _segmentBytes;

    public RamDevice(string name) : base($"ram:{name}", workers: 2)
    {
        StartWorkers();
    }

    public override void Initialize(long segmentSize, FASTER.core.LightEpoch? epoch = null, bool omitSegmentIdFromFilename = false)
    {
        base.Initialize(segmentSize, epoch, omitSegmentIdFromFilename);
        _segmentBytes = segmentSize;
    }

    private byte* Segment(int segment) => (byte*)_segments.GetOrAdd(segment, _ =>
    {
        if (_segmentBytes <= 0)
            throw new InvalidOperationException($"{FileName}: I/O before FASTER set the segment size");
        var memory = (IntPtr)NativeMemory.AlignedAlloc((nuint)_segmentBytes, 4096);
        NativeMemory.Clear((void*)memory, (nuint)_segmentBytes);
        return memory;
    });

    protected override uint Read(int worker, int segment, ulong offset, IntPtr destination, uint length)
    {
        Check(segment, offset, length);
        Buffer.MemoryCopy(Segment(segment) + offset, (void*)destination, length, length);
        return length;
    }

    protected override uint Write(int worker, int segment, ulong offset, IntPtr source, uint length)
    {
        Check(segment, offset, length);
        Buffer.MemoryCopy((void*)source, Segment(segment) + offset, length, length);
        return length;
    }

    private void Check(int segment, ulong offset, uint length)
    {
        if (offset + length > (ulong)_segmentBytes)
            throw new ArgumentOutOfRangeException(nameof(offset), $"{FileName}: [{offset}, +{length}) leaves segment {segment} of {_segmentBytes} B");
    }

    protected override void DisposeStorage()
    {
        foreach (var memory in _segments.Values)
            NativeMemory.AlignedFree((void*)memory);
        _segments.Clear();
    }
}

using System;
using System.Collections.Concurrent;
using System.Runtime.InteropServices;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// Process memory as FASTER's device, allocated segment by segment as the log grows. Two uses: the in-memory
/// baseline's device (FASTER's memory holds the whole loaded log, and what inserts push out of it lands here, so a
/// record evicted by inserts stays readable, where FASTER's NullDevice would lose it: I/O on worker threads); and, with
/// <c>inline</c>, the floor of FASTER's pending-read path (the <c>ram-inline</c> device: a log as large as the others'
/// under the same memory, each read a copy done and completed inside ReadAsync, so that what it costs beyond
/// all-in-memory is FASTER's own pending machinery and one copy per read).
/// </summary>
public sealed unsafe class RamDevice : BlockingIoDevice
{
    private readonly ConcurrentDictionary<int, IntPtr> _segments = new();
    private long _segmentBytes;

    public RamDevice(string name, bool inline = false) : base($"ram:{name}", workers: inline ? 0 : 2)
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

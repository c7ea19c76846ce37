using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using FASTER.core;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>A 1 KiB value (the YCSB record of Redy's larger-value runs).</summary>
[StructLayout(LayoutKind.Explicit, Size = 1024)]
public struct KiloValue
{
    [FieldOffset(0)] public long Head;
    [FieldOffset(1016)] public long Tail;
}

/// <summary>Makes and checks values of one size; value of key k at version v = k * 1000 + v.</summary>
public interface IValues<TValue> where TValue : unmanaged
{
    static abstract int Bytes { get; }
    static abstract TValue Make(long key, long version);
    static abstract TValue Add(TValue old, TValue delta);
    static abstract long Stamp(TValue value);
}

public readonly struct LongValues : IValues<long>
{
    public static int Bytes => 8;
    public static long Make(long key, long version) => key * 1000 + version;
    public static long Add(long old, long delta) => old + delta;
    public static long Stamp(long value) => value;
}

public readonly struct KiloValues : IValues<KiloValue>
{
    public static int Bytes => 1024;
    public static KiloValue Make(long key, long version) => new() { Head = key * 1000 + version, Tail = key * 1000 + version };
    public static KiloValue Add(KiloValue old, KiloValue delta) => new() { Head = old.Head + delta.Head, Tail = old.Tail + delta.Tail };
    public static long Stamp(KiloValue value) => value.Head == value.Tail ? value.Head : long.MinValue;
}

/// <summary>
/// The FASTER callbacks of one benchmark thread: values merge by addition (RMW), and a pending operation's latency
/// (its context is the timestamp at which it was issued) is recorded when it completes.
/// </summary>
public sealed class YcsbFunctions<TValue, TValues> : SimpleFunctions<long, TValue, long>
    where TValue : unmanaged where TValues : IValues<TValue>
{
    public YcsbFunctions() : base(TValues.Add)
    {
    }

    public Histogram Latency = new();
    public long Outstanding;
    public long Errors;
    public bool Recording;

    public override void ReadCompletionCallback(ref long key, ref TValue input, ref TValue output, long ctx, Status status, RecordMetadata recordMetadata)
    {
        Outstanding--;
        if (!status.Found || TValues.Stamp(output) / 1000 != key)
            Errors++;
        if (Recording)
            Latency.Record(Elapsed(ctx));
    }

    public override void RMWCompletionCallback(ref long key, ref TValue input, ref TValue output, long ctx, Status status, RecordMetadata recordMetadata)
    {
        Outstanding--;
        if (Recording)
            Latency.Record(Elapsed(ctx));
    }

    public static long Elapsed(long start) =>
        (long)((Stopwatch.GetTimestamp() - start) * (1e9 / Stopwatch.Frequency));
}

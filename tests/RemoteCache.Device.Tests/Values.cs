using System.Runtime.InteropServices;

namespace RemoteCache.Device.Tests;

/// <summary>A 1 KiB FASTER value; three stamps (start, middle, end) catch a torn or misplaced record.</summary>
[StructLayout(LayoutKind.Explicit, Size = 1024)]
public struct KiloValue
{
    [FieldOffset(0)] public long Head;
    [FieldOffset(512)] public long Middle;
    [FieldOffset(1016)] public long Tail;
}

/// <summary>How a test makes, merges and checks values of one size. Value of (key, version) = key * <see cref="Versions"/> + version.</summary>
public abstract class ValueKind<TValue> where TValue : unmanaged
{
    /// <summary>
    /// Versions a key can reach before its value reads as the next key's: concurrent tests count RMWs of keys
    /// every thread updates, well past the few versions of the sequential ones.
    /// </summary>
    public const long Versions = 1_000_000;

    protected static long Stamp(long key, long version) => key * Versions + version;

    public abstract string Name { get; }

    /// <summary>FASTER's log bytes per record (header + key + value), for sizing the log memory.</summary>
    public abstract int RecordBytes { get; }

    public abstract TValue Make(long key, long version);

    /// <summary>RMW merge: adds <paramref name="input"/>'s stamp to <paramref name="old"/>'s.</summary>
    public abstract TValue Add(TValue old, TValue input);

    /// <summary>Null if <paramref name="value"/> is (key, version), else what is wrong.</summary>
    public abstract string? Check(TValue value, long key, long version);

    /// <summary>
    /// The version <paramref name="value"/> holds if it is a whole value of <paramref name="key"/>; null if it is
    /// another key's, torn or garbage. For checks where the exact version is not known, only bounds.
    /// </summary>
    public abstract long? VersionOf(TValue value, long key);

    protected static long? VersionOfStamp(long stamp, long key)
    {
        long version = stamp - key * Versions;
        return version is >= 0 and < Versions ? version : null;
    }
}

public sealed class LongKind : ValueKind<long>
{
    public override string Name => "8 B values";
    public override int RecordBytes => 8 + 8 + 8;
    public override long Make(long key, long version) => Stamp(key, version);
    public override long Add(long old, long input) => old + input;
    public override string? Check(long value, long key, long version) =>
        value == Make(key, version) ? null : $"key {key}: value {value}, expected {Make(key, version)}";
    public override long? VersionOf(long value, long key) => VersionOfStamp(value, key);
}

public sealed class KiloKind : ValueKind<KiloValue>
{
    public override string Name => "1 KiB values";
    public override int RecordBytes => 8 + 8 + 1024;
    public override KiloValue Make(long key, long version)
    {
        long stamp = Stamp(key, version);
        return new KiloValue { Head = stamp, Middle = ~stamp, Tail = stamp };
    }
    public override KiloValue Add(KiloValue old, KiloValue input) =>
        new() { Head = old.Head + input.Head, Middle = old.Middle - input.Head, Tail = old.Tail + input.Tail };
    public override string? Check(KiloValue value, long key, long version)
    {
        var expected = Make(key, version);
        return value.Head == expected.Head && value.Middle == expected.Middle && value.Tail == expected.Tail
            ? null
            : $"key {key}: value ({value.Head}, {value.Middle}, {value.Tail}), expected ({expected.Head}, {expected.Middle}, {expected.Tail})";
    }
    public override long? VersionOf(KiloValue value, long key) =>
        value.Middle == ~value.Head && value.Tail == value.Head ? VersionOfStamp(value.Head, key) : null;
}

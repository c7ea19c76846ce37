using System;
using System.Runtime.InteropServices;
using FASTER.core;

namespace RemoteCache.Device.Tests;

/// <summary>A 1 KiB FASTER value; three stamps (start, middle, end) catch a torn or misplaced record.</summary>
[StructLayout(LayoutKind.Explicit, Size = 1024)]
public struct KiloValue
{
    [FieldOffset(0)] public long Head;
    [FieldOffset(512)] public long Middle;
    [FieldOffset(1016)] public long Tail;
}

/// <summary>How a test makes, merges and checks values of one kind. Value of (key, version) = key * <see cref="Versions"/> + version.</summary>
public abstract class ValueKind<TValue>
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

/// <summary>A class value, which FASTER keeps in its object log: a stamp, a string and a byte array whose length varies by key.</summary>
public sealed class Payload
{
    public long Stamp;
    public string Text = "";
    public byte[] Blob = Array.Empty<byte>();
}

/// <summary>Writes <see cref="Payload"/>s into FASTER's object log (FASTER's default for classes is the much slower DataContract).</summary>
public sealed class PayloadSerializer : BinaryObjectSerializer<Payload>
{
    public override void Serialize(ref Payload obj)
    {
        writer.Write(obj.Stamp);
        writer.Write(obj.Text);
        writer.Write(obj.Blob.Length);
        writer.Write(obj.Blob);
    }

    public override void Deserialize(out Payload obj)
    {
        obj = new Payload { Stamp = reader.ReadInt64(), Text = reader.ReadString() };
        obj.Blob = reader.ReadBytes(reader.ReadInt32());
    }
}

public sealed class PayloadKind : ValueKind<Payload>
{
    public override string Name => "class values";

    // The main log holds a header and the key's and value's object-log addresses; the objects are in the object log.
    public override int RecordBytes => 8 + 8 + 8;

    public override Payload Make(long key, long version)
    {
        long stamp = Stamp(key, version);
        var blob = new byte[64 + (int)(key % 193)];
        for (int i = 0; i < blob.Length; i++)
            blob[i] = (byte)(stamp * 31 + i);
        return new Payload { Stamp = stamp, Text = $"record {key} version {version}", Blob = blob };
    }

    public override Payload Add(Payload old, Payload input) => Make(old.Stamp / Versions, old.Stamp % Versions + input.Stamp);

    public override string? Check(Payload value, long key, long version)
    {
        var expected = Make(key, version);
        return value.Stamp == expected.Stamp && value.Text == expected.Text && value.Blob.AsSpan().SequenceEqual(expected.Blob)
            ? null
            : $"key {key}: value (stamp {value.Stamp}, '{value.Text}', {value.Blob.Length} B), expected (stamp {expected.Stamp}, '{expected.Text}', {expected.Blob.Length} B)";
    }

    public override long? VersionOf(Payload value, long key)
    {
        if (VersionOfStamp(value.Stamp, key) is not { } version)
            return null;
        return Check(value, key, version) is null ? version : null;
    }
}

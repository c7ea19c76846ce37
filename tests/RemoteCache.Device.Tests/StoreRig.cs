using System;
using System.Collections.Generic;
using System.IO;
using System.Numerics;
using FASTER.core;
using Xunit.Sdk;

namespace RemoteCache.Device.Tests;

/// <summary>The shape of a FasterKV log in a test: page, memory and segment sizes (as bit counts).</summary>
public sealed record LogShape(int PageBits, int MemoryBits, int SegmentBits, long Records)
{
    public LogSettings Settings(IDevice device, IDevice? objectLog = null) => new()
    {
        LogDevice = device,
        ObjectLogDevice = objectLog,
        PageSizeBits = PageBits,
        MemorySizeBits = MemoryBits,
        SegmentSizeBits = SegmentBits,
    };
}

/// <summary>
/// How a test store indexes its keys: <paramref name="Buckets"/> hash buckets (a power of two); a
/// <paramref name="HashModulo"/> above 0 folds every key's hash onto that many codes, as FASTER's own read-cache
/// stress tests do (with 100), so that a few long hash chains run through the whole log; a read cache of
/// 2^<paramref name="ReadCacheMemoryBits"/> bytes (0: none).
/// </summary>
public sealed record IndexShape(long Buckets, int HashModulo = 0, int ReadCachePageBits = 0, int ReadCacheMemoryBits = 0)
{
    /// <summary>The comparer folding hashes, for the tests' long keys; null if hashes are not folded.</summary>
    public IFasterEqualityComparer<TKey>? ComparerFor<TKey>() => HashModulo <= 0 ? null
        : new FoldedComparer(HashModulo) as IFasterEqualityComparer<TKey>
          ?? throw new NotSupportedException($"hash folding is for long keys, not {typeof(TKey).Name}");

    public ReadCacheSettings? ReadCache => ReadCacheMemoryBits > 0
        ? new ReadCacheSettings { PageSizeBits = ReadCachePageBits, MemorySizeBits = ReadCacheMemoryBits }
        : null;

    private sealed class FoldedComparer : IFasterEqualityComparer<long>
    {
        private readonly long _modulo;

        public FoldedComparer(long modulo) => _modulo = modulo;

        public bool Equals(ref long k1, ref long k2) => k1 == k2;

        // FASTER's own hash first, so that the folded codes still spread over buckets and tags.
        public long GetHashCode64(ref long k) => Utility.GetHashCode(k) % _modulo;
    }
}

/// <summary>
/// A FasterKV&lt;TKey, TValue&gt; over given devices, with the load / read-back / update checks the tests share.
/// Records are numbered; <c>keyOf</c> makes record n's key. Class keys or values need an object-log device.
/// </summary>
public sealed class StoreRig<TKey, TValue> : IDisposable
{
    private readonly ValueKind<TValue> _kind;
    private readonly LogShape _shape;
    private readonly Func<long, TKey> _keyOf;
    // The context of an operation is its record number, so that a completed read can be checked against it.
    private readonly SimpleFunctions<TKey, TValue, long> _functions;
    private ClientSession<TKey, TValue, TValue, TValue, long, SimpleFunctions<TKey, TValue, long>>? _session;

    public StoreRig(ValueKind<TValue> kind, LogShape shape, IDevice device, Func<long, TKey> keyOf,
                    CheckpointSettings? checkpoints = null, IDevice? objectLog = null,
                    SerializerSettings<TKey, TValue>? serializers = null, IndexShape? index = null)
    {
        _kind = kind;
        _shape = shape;
        _keyOf = keyOf;
        Device = device;
        ObjectLog = objectLog;
        var settings = shape.Settings(device, objectLog);
        settings.ReadCacheSettings = index?.ReadCache;
        Kv = new FasterKV<TKey, TValue>(
            index?.Buckets ?? Math.Max(1L << 10, (long)BitOperations.RoundUpToPowerOf2((ulong)shape.Records)),
            settings, checkpoints, serializers, index?.ComparerFor<TKey>());
        // SimpleFunctions merges (input, old value); an RMW of a class value must not take one for the other.
        _functions = new SimpleFunctions<TKey, TValue, long>((input, old) => kind.Add(old, input));
        _session = NewSession();
    }

    public FasterKV<TKey, TValue> Kv { get; }
    public long Records => _shape.Records;
    public IDevice Device { get; }
    public IDevice? ObjectLog { get; }
    private ClientSession<TKey, TValue, TValue, TValue, long, SimpleFunctions<TKey, TValue, long>> Session =>
        _session ?? throw new ObjectDisposedException(nameof(StoreRig<TKey, TValue>));

    /// <summary>
    /// Another session (RMW adds the input's stamp; an operation's context is its record number), for a thread of
    /// its own: sessions are single-threaded.
    /// </summary>
    public ClientSession<TKey, TValue, TValue, TValue, long, SimpleFunctions<TKey, TValue, long>> NewSession() =>
        Kv.For(_functions).NewSession<SimpleFunctions<TKey, TValue, long>>();

    /// <summary>Log bytes beyond what FASTER keeps in memory: the part only the device holds.</summary>
    public long BytesOnDeviceOnly => Kv.Log.HeadAddress - Kv.Log.BeginAddress;

    public void Load(long version = 0)
    {
        for (long n = 0; n < _shape.Records; n++)
            Session.Upsert(_keyOf(n), _kind.Make(n, version), n);
        Session.CompletePending(wait: true);
    }

    /// <summary>Upserts the even keys and RMWs the odd ones (by +1 version) from <paramref name="from"/> to <paramref name="from"/> + 1.</summary>
    public void UpdateAll(long from)
    {
        var increment = _kind.Make(0, 1);
        for (long n = 0; n < _shape.Records; n++)
        {
            if ((n & 1) == 0)
                Session.Upsert(_keyOf(n), _kind.Make(n, from + 1), n);
            else
                Session.RMW(_keyOf(n), increment, n);
            if ((n & 255) == 255)
                Session.CompletePending(wait: true);
        }
        Session.CompletePending(wait: true);
    }

    /// <summary>
    /// Reads every key (in an order that scatters them over the log), checks each value and returns how many
    /// reads went to the device. <paramref name="onProgress"/> runs after each batch with the keys done.
    /// </summary>
    public long ReadBackAll(long version, Action<long>? onProgress = null) => ReadBackAll(_ => version, onProgress);

    /// <summary>As <see cref="ReadBackAll(long, Action{long}?)"/>, where key k must hold version <paramref name="versionOf"/>(k).</summary>
    public long ReadBackAll(Func<long, long> versionOf, Action<long>? onProgress = null)
    {
        var session = Session;
        var errors = new List<string>();
        long pending = 0, found = 0;
        const int Batch = 256;
        long stride = FindStride(_shape.Records);
        for (long i = 0; i < _shape.Records; i++)
        {
            long n = i * stride % _shape.Records;
            var key = _keyOf(n);
            TValue output = default!;
            var status = session.Read(ref key, ref output, n);
            if (status.IsPending)
            {
                pending++;
            }
            else
            {
                Record(status, n, output);
            }
            if (i % Batch == Batch - 1 || i == _shape.Records - 1)
            {
                session.CompletePendingWithOutputs(out var outputs, wait: true);
                using (outputs)
                {
                    while (outputs.Next())
                        Record(outputs.Current.Status, outputs.Current.Context, outputs.Current.Output);
                }
                onProgress?.Invoke(i + 1);
            }
        }
        if (errors.Count > 0)
            throw new XunitException($"{errors.Count} wrong reads of {_shape.Records} ({_kind.Name}); first: {string.Join("; ", errors.GetRange(0, Math.Min(5, errors.Count)))}");
        if (found != _shape.Records)
            throw new XunitException($"{found} of {_shape.Records} keys found");
        return pending;

        void Record(Status status, long n, TValue output)
        {
            if (!status.Found)
            {
                errors.Add($"record {n}: status {status}");
                return;
            }
            found++;
            if (_kind.Check(output, n, versionOf(n)) is { } problem)
                errors.Add(problem);
        }
    }

    public Guid Checkpoint()
    {
        var (success, token) = Kv.TakeFullCheckpointAsync(CheckpointType.FoldOver).AsTask().GetAwaiter().GetResult();
        if (!success)
            throw new XunitException("TakeFullCheckpointAsync failed");
        Kv.CompleteCheckpointAsync().AsTask().GetAwaiter().GetResult();
        return token;
    }

    /// <summary>A log-only snapshot checkpoint; incremental (a DeltaLog over the last snapshot) where FASTER can.</summary>
    public Guid SnapshotCheckpoint(bool tryIncremental)
    {
        var (success, token) = Kv.TakeHybridLogCheckpointAsync(CheckpointType.Snapshot, tryIncremental).AsTask().GetAwaiter().GetResult();
        if (!success)
            throw new XunitException("TakeHybridLogCheckpointAsync failed");
        return token;
    }

    public void Recover(Guid token) => Kv.Recover(token);

    /// <summary>Recovers the latest checkpoint (log-only checkpoints have no index checkpoint to name).</summary>
    public void RecoverLatest() => Kv.Recover();

    public void Dispose()
    {
        _session?.Dispose();
        _session = null;
        Kv.Dispose();
        Device.Dispose();
        ObjectLog?.Dispose();
    }

    // A stride coprime with the record count visits every key once, far from its neighbours in the log.
    private static long FindStride(long records)
    {
        long stride = Math.Max(1, records / 3 + 7);
        while (Gcd(stride, records) != 1)
            stride++;
        return stride;
    }

    private static long Gcd(long a, long b) => b == 0 ? a : Gcd(b, a % b);
}

/// <summary>A scratch directory for SSD segment files and checkpoints, deleted at dispose.</summary>
public sealed class ScratchDir : IDisposable
{
    public ScratchDir(string name)
    {
        // Not /tmp if it is a tmpfs (no O_DIRECT there): under the test output folder, on the build disk.
        Path = System.IO.Path.Combine(AppContext.BaseDirectory, "scratch", $"{name}-{Environment.ProcessId}-{Guid.NewGuid():N}");
        Directory.CreateDirectory(Path);
    }

    public string Path { get; }

    public string File(string name) => System.IO.Path.Combine(Path, name);

    public void Dispose()
    {
        try
        {
            Directory.Delete(Path, recursive: true);
        }
        catch (IOException)
        {
        }
    }
}

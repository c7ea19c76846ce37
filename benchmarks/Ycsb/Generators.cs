using System;
using System.Threading;

namespace RemoteCache.Benchmarks.Ycsb;

// YCSB's key generators as site.ycsb core 0.17.0 defines them (site.ycsb.generator: ZipfianGenerator,
// ScrambledZipfianGenerator, SkewedLatestGenerator, AcknowledgedCounterGenerator, UniformLongGenerator; the key
// choice of CoreWorkload.nextKeynum). Each chooser is used by one thread.

/// <summary>A source of key numbers (YCSB's NumberGenerator).</summary>
public interface IKeyChooser
{
    long Next(Random rng);
}

/// <summary>Every key of [0, count) equally likely (YCSB's UniformLongGenerator over the loaded records).</summary>
public sealed class UniformChooser : IKeyChooser
{
    private readonly long _count;
    public UniformChooser(long count) => _count = count;
    public long Next(Random rng) => rng.NextInt64(_count);
}

/// <summary>
/// YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record synthetic databases", SIGMOD 1994):
/// item 0 is the most popular, P(i) ∝ 1 / (i + 1)^θ over [0, items). <see cref="Next(Random, long)"/> draws over a
/// larger item count, updating ζ incrementally as YCSB does when inserts grow the key space.
/// </summary>
public sealed class ZipfianChooser : IKeyChooser
{
    public const double DefaultTheta = 0.99;

    // Above this many items ζ's sum is finished in closed form (Euler–Maclaurin) instead of term by term.
    private const long ExactTerms = 1L << 22;

    private readonly long _items;
    private readonly double _theta, _alpha, _zeta2, _half;
    private double _zetan, _eta;
    private long _countForZeta;

    /// <param name="items">Items 0 .. items − 1.</param>
    /// <param name="theta">The Zipf constant, in (0, 1).</param>
    /// <param name="zetan">ζ(items, θ) when known (YCSB's precomputed constant); computed otherwise.</param>
    public ZipfianChooser(long items, double theta = DefaultTheta, double? zetan = null)
    {
        if (items < 2)
            throw new ArgumentOutOfRangeException(nameof(items), items, "a Zipfian chooser needs at least 2 items");
        if (theta <= 0 || theta >= 1)
            throw new ArgumentOutOfRangeException(nameof(theta), theta, "θ must be in (0, 1)");
        _items = items;
        _theta = theta;
        _zeta2 = Zeta(2, theta);
        _alpha = 1.0 / (1.0 - theta);
        _zetan = zetan ?? Zeta(items, theta);
        _countForZeta = items;
        _eta = Eta();
        _half = 1 + Math.Pow(0.5, theta);
    }

    public long Count => _items;
    public double Theta => _theta;

    /// <summary>ζ now (it grows with the item count <see cref="Next(Random, long)"/> was last given).</summary>
    public double ZetaN => _zetan;

    /// <summary>
    /// ζ(n, θ) = Σ_{i=1..n} 1 / i^θ: term by term up to 2^22 terms, then the Euler–Maclaurin formula for the rest
    /// (YCSB sums all terms; over 10^10 items that takes minutes, and the two agree to about 1e-12).
    /// </summary>
    public static double Zeta(long n, double theta)
    {
        long exact = Math.Min(n, ExactTerms);
        double sum = 0;
        for (long i = 1; i <= exact; i++)
            sum += 1.0 / Math.Pow(i, theta);
        if (n > exact)
            sum += TailSum(exact + 1, n, theta);
        return sum;
    }

    /// <summary>ζ(n) from ζ(from): YCSB's incremental update when the item count grows.</summary>
    public static double Zeta(long from, long n, double theta, double zetaFrom) =>
        n - from <= ExactTerms ? zetaFrom + ExactSum(from + 1, n, theta) : zetaFrom + TailSum(from + 1, n, theta);

    private static double ExactSum(long a, long b, double theta)
    {
        double sum = 0;
        for (long i = a; i <= b; i++)
            sum += 1.0 / Math.Pow(i, theta);
        return sum;
    }

    // Σ_{i=a..b} i^-θ ≈ ∫_a^b x^-θ dx + (f(a) + f(b)) / 2 + (f'(b) − f'(a)) / 12 − (f'''(b) − f'''(a)) / 720; with
    // a ≥ 2^22 the next term is below 1e-30.
    private static double TailSum(long a, long b, double theta)
    {
        double f(double x) => Math.Pow(x, -theta);
        double f1(double x) => -theta * Math.Pow(x, -theta - 1);
        double f3(double x) => -theta * (theta + 1) * (theta + 2) * Math.Pow(x, -theta - 3);
        double integral = (Math.Pow(b, 1 - theta) - Math.Pow(a, 1 - theta)) / (1 - theta);
        return integral + (f(a) + f(b)) / 2 + (f1(b) - f1(a)) / 12 - (f3(b) - f3(a)) / 720;
    }

    /// <summary>The probability of item <paramref name="rank"/> (0 = most popular) over this chooser's items.</summary>
    public double Probability(long rank) => 1.0 / Math.Pow(rank + 1, _theta) / _zetan;

    public long Next(Random rng) => Next(rng, _items);

    /// <summary>A draw over <paramref name="itemCount"/> items (YCSB's nextLong(itemcount)).</summary>
    public long Next(Random rng, long itemCount)
    {
        if (itemCount > _countForZeta)
        {
            _zetan = Zeta(_countForZeta, itemCount, _theta, _zetan);
            _countForZeta = itemCount;
            // As YCSB: η keeps the item count the chooser was made with (only ζ follows the new count).
            _eta = Eta();
        }
        double u = rng.NextDouble();
        double uz = u * _zetan;
        if (uz < 1.0)
            return 0;
        if (uz < _half)
            return 1;
        return (long)(itemCount * Math.Pow(_eta * u - _eta + 1, _alpha));
    }

    private double Eta() => (1 - Math.Pow(2.0 / _items, 1 - _theta)) / (1 - _zeta2 / _zetan);
}

/// <summary>
/// YCSB's ScrambledZipfianGenerator: a Zipf rank drawn over a fixed space of <see cref="ItemCount"/> + 1 items, then
/// <c>fnvhash64(rank) % count</c>. The popular keys are scattered over the key space, and since 10^10 ranks fold onto
/// the keys, each key collects many ranks: the hottest key is markedly less hot than the unscrambled distribution's
/// item 0, and every key can be drawn.
/// </summary>
public sealed class ScrambledZipfianChooser : IKeyChooser
{
    /// <summary>YCSB's rank space (ITEM_COUNT in core 0.17.0; later master raised it to 10^16 without a new ζ).</summary>
    public const long ItemCount = 10_000_000_000L;

    /// <summary>YCSB's precomputed ζ for <see cref="ItemCount"/> items and θ = 0.99 (ZETAN).</summary>
    public const double ZetaForDefaultTheta = 26.46902820178302;

    private readonly ZipfianChooser _ranks;
    private readonly long _count;

    /// <param name="count">Keys 0 .. count − 1.</param>
    public ScrambledZipfianChooser(long count, double theta = ZipfianChooser.DefaultTheta)
    {
        if (count < 1)
            throw new ArgumentOutOfRangeException(nameof(count), count, "the key space is empty");
        _count = count;
        // new ZipfianGenerator(0, ITEM_COUNT, θ[, ZETAN]): ITEM_COUNT + 1 items.
        _ranks = new ZipfianChooser(ItemCount + 1, theta, theta == ZipfianChooser.DefaultTheta ? ZetaForDefaultTheta : null);
    }

    public long Count => _count;

    /// <summary>The rank distribution before the hash folds it onto the keys.</summary>
    public ZipfianChooser Ranks => _ranks;

    public long Next(Random rng) => Scramble(_ranks.Next(rng), _count);

    /// <summary>Where rank <paramref name="rank"/> lands among <paramref name="count"/> keys.</summary>
    /// <remarks>
    /// Java's <c>%</c> of the one negative hash (long.MinValue, which Math.abs leaves negative) would give a negative
    /// key; this takes the unsigned remainder instead, the only place where the two can differ.
    /// </remarks>
    public static long Scramble(long rank, long count) => (long)((ulong)Fnv64(rank) % (ulong)count);

    /// <summary>
    /// YCSB's Utils.fnvhash64: FNV-1a over the value's 8 bytes, low byte first, then the absolute value of the
    /// signed result (Java's Math.abs, which leaves long.MinValue as it is).
    /// </summary>
    public static long Fnv64(long value)
    {
        ulong hash = 0xCBF29CE484222325ul;
        ulong v = (ulong)value;
        for (int i = 0; i < 8; i++)
        {
            hash ^= v & 0xff;
            hash *= 0x100000001B3ul;
            v >>= 8;
        }
        long signed = (long)hash;
        return signed == long.MinValue ? signed : Math.Abs(signed);
    }
}

/// <summary>
/// YCSB's SkewedLatestGenerator: the most recently inserted keys are the most popular. It draws
/// <c>last − zipf(last)</c>, where <c>last</c> is the newest acknowledged insert, over a Zipfian whose ζ grows with
/// the key space.
/// </summary>
public sealed class LatestChooser : IKeyChooser
{
    private readonly InsertCounter _inserted;
    private readonly ZipfianChooser _zipf;

    public LatestChooser(InsertCounter inserted, double theta = ZipfianChooser.DefaultTheta)
    {
        _inserted = inserted;
        _zipf = new ZipfianChooser(Math.Max(2, inserted.Last), theta);
    }

    public long Next(Random rng)
    {
        long last = _inserted.Last;
        return last - _zipf.Next(rng, Math.Max(2, last));
    }
}

/// <summary>
/// YCSB's AcknowledgedCounterGenerator: hands out insert keys (<see cref="Take"/>) and reports as
/// <see cref="Last"/> the highest key below which every insert has been acknowledged, so readers never pick a key
/// whose insert has not happened yet. Shared by the threads of a store.
/// </summary>
public sealed class InsertCounter
{
    private const int Window = 1 << 20;  // YCSB's WINDOW_SIZE: inserts that may be outstanding at once

    private readonly bool[] _acknowledged = new bool[Window];
    private readonly object _gate = new();
    private long _next;
    private long _last;

    /// <param name="loaded">Keys 0 .. loaded − 1 exist; the first insert is key <paramref name="loaded"/>.</param>
    public InsertCounter(long loaded)
    {
        _next = loaded;
        _last = loaded - 1;
    }

    /// <summary>The newest key such that it and every key before it exist.</summary>
    public long Last => Volatile.Read(ref _last);

    /// <summary>Keys handed out to inserts so far, acknowledged or not, plus the loaded ones.</summary>
    public long Issued => Interlocked.Read(ref _next);

    /// <summary>
    /// A key from <paramref name="chooser"/> whose insert has been acknowledged; keys past <see cref="Last"/> are drawn
    /// again (CoreWorkload.nextKeynum).
    /// </summary>
    public long Draw(IKeyChooser chooser, Random rng)
    {
        long key;
        do
            key = chooser.Next(rng);
        while (key > Last);
        return key;
    }

    /// <summary>The key of the next insert.</summary>
    public long Take() => Interlocked.Increment(ref _next) - 1;

    /// <summary>Marks <paramref name="key"/>'s insert as done; <see cref="Last"/> moves over every contiguous done key.</summary>
    public void Acknowledge(long key)
    {
        int slot = (int)(key & (Window - 1));
        if (Volatile.Read(ref _acknowledged[slot]))
            throw new InvalidOperationException($"more than {Window} inserts outstanding (key {key})");
        Volatile.Write(ref _acknowledged[slot], true);
        // As YCSB: whoever gets the gate advances Last over the contiguous acknowledged keys. One that finds the gate
        // taken leaves its key to the holder; the holder looks again after letting go, since it may have passed the
        // key's slot just before it was set (YCSB's would leave Last behind until the next insert).
        for (;;)
        {
            if (!Monitor.TryEnter(_gate))
                return;
            try
            {
                long index = _last + 1;
                for (; index <= _last + Window; index++)
                {
                    int s = (int)(index & (Window - 1));
                    if (!Volatile.Read(ref _acknowledged[s]))
                        break;
                    Volatile.Write(ref _acknowledged[s], false);
                }
                Volatile.Write(ref _last, index - 1);
            }
            finally
            {
                Monitor.Exit(_gate);
            }
            Interlocked.MemoryBarrier();  // the release above before the look below (against a setter's store, then TryEnter)
            if (!Volatile.Read(ref _acknowledged[(int)((Last + 1) & (Window - 1))]))
                return;
        }
    }
}

/// <summary>The key chooser of each request distribution, as YCSB's CoreWorkload builds it.</summary>
public static class KeyChoosers
{
    /// <summary>
    /// Uniform over the loaded records; the scrambled Zipfian over them plus the expected inserts
    /// (new ScrambledZipfianGenerator(0, recordcount + expectednewkeys): one key more than that, as its max is
    /// inclusive); "latest" following the inserts.
    /// </summary>
    public static IKeyChooser For(Distribution distribution, YcsbOptions options, InsertCounter inserted) => distribution switch
    {
        Distribution.Uniform => new UniformChooser(options.Records),
        Distribution.Zipfian => new ScrambledZipfianChooser(options.Records + options.ExpectedNewKeys + 1, options.Theta),
        Distribution.ZipfianRaw => new ZipfianChooser(options.Records, options.Theta),
        Distribution.Latest => new LatestChooser(inserted, options.Theta),
        _ => throw new ArgumentOutOfRangeException(nameof(distribution)),
    };
}

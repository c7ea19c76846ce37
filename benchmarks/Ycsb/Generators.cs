using System;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>A source of item numbers in [0, count) (YCSB's NumberGenerator); one instance per thread.</summary>
public interface IKeyChooser
{
    long Next(Random rng);
}

/// <summary>Every item equally likely.</summary>
public sealed class UniformChooser : IKeyChooser
{
    private readonly long _count;
    public UniformChooser(long count) => _count = count;
    public long Next(Random rng) => rng.NextInt64(_count);
}

/// <summary>
/// YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record synthetic databases", SIGMOD 1994):
/// item 0 is the most popular, P(i) ∝ 1 / (i + 1)^θ.
/// </summary>
public sealed class ZipfianChooser : IKeyChooser
{
    public const double DefaultTheta = 0.99;

    private readonly long _count;
    private readonly double _theta, _alpha, _zetan, _eta, _half;

    public ZipfianChooser(long count, double theta = DefaultTheta)
    {
        if (count < 2)
            throw new ArgumentOutOfRangeException(nameof(count), count, "a Zipfian chooser needs at least 2 items");
        if (theta <= 0 || theta >= 1)
            throw new ArgumentOutOfRangeException(nameof(theta), theta, "θ must be in (0, 1)");
        _count = count;
        _theta = theta;
        _zetan = Zeta(count, theta);
        _alpha = 1.0 / (1.0 - theta);
        double zeta2 = Zeta(2, theta);
        _eta = (1 - Math.Pow(2.0 / count, 1 - theta)) / (1 - zeta2 / _zetan);
        _half = 1 + Math.Pow(0.5, theta);
    }

    public long Count => _count;
    public double Theta => _theta;

    /// <summary>ζ(n, θ) = Σ_{i=1..n} 1 / i^θ.</summary>
    public static double Zeta(long n, double theta)
    {
        double sum = 0;
        for (long i = 1; i <= n; i++)
            sum += 1.0 / Math.Pow(i, theta);
        return sum;
    }

    /// <summary>The probability of item <paramref name="rank"/> (0 = most popular): what the chooser should produce.</summary>
    public double Probability(long rank) => 1.0 / Math.Pow(rank + 1, _theta) / _zetan;

    public long Next(Random rng)
    {
        double u = rng.NextDouble();
        double uz = u * _zetan;
        if (uz < 1.0)
            return 0;
        if (uz < _half)
            return 1;
        long item = (long)(_count * Math.Pow(_eta * u - _eta + 1, _alpha));
        return Math.Min(item, _count - 1);
    }
}

/// <summary>
/// YCSB's ScrambledZipfianGenerator: Zipfian popularity, with the popular items spread over the key space by an
/// FNV-1a hash (so they are not all neighbours in the log). YCSB draws from 10^10 items before hashing; this draws
/// from the record count itself, so each rank maps to one item and the distribution keeps θ exactly (hash
/// collisions merge a few ranks, as in YCSB).
/// </summary>
public sealed class ScrambledZipfianChooser : IKeyChooser
{
    private readonly ZipfianChooser _zipf;
    private readonly long _count;

    public ScrambledZipfianChooser(long count, double theta = ZipfianChooser.DefaultTheta)
    {
        _zipf = new ZipfianChooser(count, theta);
        _count = count;
    }

    public long Next(Random rng) => Scramble(_zipf.Next(rng), _count);

    /// <summary>Where rank <paramref name="rank"/> lands among <paramref name="count"/> items.</summary>
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
/// YCSB's SkewedLatestGenerator: the most recently inserted items are the most popular (Zipfian over the distance
/// from the newest). <see cref="Inserted"/> is shared by the threads of a run.
/// </summary>
public sealed class LatestChooser : IKeyChooser
{
    private readonly InsertCounter _inserted;
    private readonly ZipfianChooser _zipf;

    public LatestChooser(InsertCounter inserted, double theta = ZipfianChooser.DefaultTheta)
    {
        _inserted = inserted;
        _zipf = new ZipfianChooser(Math.Max(2, inserted.Count), theta);
    }

    public InsertCounter Inserted => _inserted;

    public long Next(Random rng)
    {
        long newest = _inserted.Count - 1;
        long back = _zipf.Next(rng);
        return Math.Max(0, newest - back);
    }
}

/// <summary>The number of records inserted so far (keys 0 .. Count-1), advanced by inserts during a run.</summary>
public sealed class InsertCounter
{
    private long _count;
    public InsertCounter(long initial) => _count = initial;
    public long Count => System.Threading.Interlocked.Read(ref _count);
    public long Take() => System.Threading.Interlocked.Increment(ref _count) - 1;
}

using System;
using System.Collections.Generic;
using System.Numerics;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// Latencies in nanoseconds, log-linear buckets (32 per power of two, about 3 % resolution), no allocation per
/// value; one per thread, merged at the end of a run.
/// </summary>
public sealed class Histogram
{
    private const int SubBits = 5;
    private const int Sub = 1 << SubBits;
    private readonly long[] _counts = new long[64 * Sub];
    private long _total;
    private double _sum;
    private long _max;

    public long Count => _total;
    public double MeanNs => _total == 0 ? 0 : _sum / _total;
    public long MaxNs => _max;

    public void Record(long ns)
    {
        if (ns < 0)
            ns = 0;
        _counts[Index(ns)]++;
        _total++;
        _sum += ns;
        if (ns > _max)
            _max = ns;
    }

    public void Add(Histogram other)
    {
        for (int i = 0; i < _counts.Length; i++)
            _counts[i] += other._counts[i];
        _total += other._total;
        _sum += other._sum;
        _max = Math.Max(_max, other._max);
    }

    /// <summary>The value at quantile <paramref name="q"/> (0..1): the upper edge of its bucket, at most the maximum.</summary>
    public long Quantile(double q)
    {
        if (_total == 0)
            return 0;
        long rank = (long)Math.Ceiling(q * _total);
        long seen = 0;
        for (int i = 0; i < _counts.Length; i++)
        {
            seen += _counts[i];
            if (seen >= rank && _counts[i] > 0)
                return Math.Min(UpperEdge(i), _max);
        }
        return _max;
    }

    /// <summary>
    /// The cumulative distribution: for each non-empty bucket in ascending order, its upper edge (at most the
    /// maximum) and the fraction of values at or below it; the last point's fraction is 1. Empty if nothing was recorded.
    /// </summary>
    public IEnumerable<(long UpperNs, double Fraction)> Cdf()
    {
        if (_total == 0)
            yield break;
        long seen = 0;
        for (int i = 0; i < _counts.Length && seen < _total; i++)
        {
            if (_counts[i] == 0)
                continue;
            seen += _counts[i];
            yield return (Math.Min(UpperEdge(i), _max), seen == _total ? 1.0 : (double)seen / _total);
        }
    }

    private static int Index(long v)
    {
        if (v < Sub)
            return (int)v;
        int msb = 63 - BitOperations.LeadingZeroCount((ulong)v);
        int shift = msb - SubBits;
        return (shift + 1) * Sub + (int)((v >> shift) & (Sub - 1));
    }

    private static long UpperEdge(int index)
    {
        if (index < Sub)
            return index;
        int shift = index / Sub - 1;
        long mantissa = Sub + index % Sub;
        return ((mantissa + 1) << shift) - 1;
    }
}

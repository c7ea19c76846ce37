using System;
using System.Threading;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>
/// A count that many threads change often and that is read rarely: each thread adds to its own stripe (its own
/// cache line), so changes do not bounce a line between cores; <see cref="Sum"/> adds the stripes up. A decrement
/// may land on another stripe than its increment (the thread that finishes an operation is not always the one
/// that started it): single stripes drift, the sum stays right.
/// </summary>
/// <remarks>
/// Add is a full fence, and so is each read of <see cref="Sum"/> done after a thread's own Add. A reader that
/// sets a flag (with a full fence) and then sums sees every increment made by a thread that had not yet seen the
/// flag; this is what lets a slot wait for its users without a shared counter.
/// </remarks>
internal sealed class StripedCounter
{
    private const int Stride = 16;  // longs: 128 bytes, so the adjacent-line prefetcher does not pair two stripes
    private static readonly int s_stripes = (int)Math.Min(16, System.Numerics.BitOperations.RoundUpToPowerOf2(
        (uint)Math.Max(1, Environment.ProcessorCount)));
    private static int s_nextStripe;
    [ThreadStatic] private static int t_stripe;  // 1 + the thread's stripe; 0 until first use

    private readonly long[] _cells = new long[(s_stripes + 1) * Stride];  // stripe i at (i + 1) * Stride: clear of the header

    public void Add(long delta) => Interlocked.Add(ref _cells[(Stripe() + 1) * Stride], delta);

    public long Sum()
    {
        long sum = 0;
        for (int i = 1; i <= s_stripes; i++)
            sum += Volatile.Read(ref _cells[i * Stride]);
        return sum;
    }

    private static int Stripe()
    {
        int stripe = t_stripe;
        if (stripe == 0)
            t_stripe = stripe = 1 + (Interlocked.Increment(ref s_nextStripe) - 1) % s_stripes;
        return stripe - 1;
    }
}

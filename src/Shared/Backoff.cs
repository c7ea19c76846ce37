using System;

namespace RemoteCache;

/// <summary>
/// Waits between attempts to reach a manager or a cache server: from a first wait (100 ms unless given) doubling up to
/// a limit, with jitter so clients spread out. Compiled into each assembly that needs it (an internal unit, linked).
/// </summary>
internal struct Backoff
{
    private static readonly TimeSpan DefaultFirst = TimeSpan.FromMilliseconds(100);
    private readonly TimeSpan _first;
    private readonly TimeSpan _limit;
    private TimeSpan _next;

    public Backoff(TimeSpan limit)
        : this(DefaultFirst, limit)
    {
    }

    public Backoff(TimeSpan first, TimeSpan limit)
    {
        _first = first < limit ? first : limit;
        _limit = limit;
        _next = _first;
    }

    public TimeSpan Next()
    {
        // ±25 %, but never past the limit: the limit is the longest wait its callers promise.
        var wait = _next * (0.75 + 0.5 * Random.Shared.NextDouble());
        if (wait > _limit)
            wait = _limit;
        _next = _next * 2 < _limit ? _next * 2 : _limit;
        return wait;
    }

    /// <summary>The first wait again (with its jitter), without moving on to longer ones.</summary>
    public readonly TimeSpan First()
    {
        var wait = _first * (0.75 + 0.5 * Random.Shared.NextDouble());
        return wait > _limit ? _limit : wait;
    }

    public void Reset() => _next = _first;
}

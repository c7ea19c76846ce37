using System;

namespace RemoteCache;

/// <summary>Waits between attempts to reach the manager: 100 ms doubling up to a limit, with jitter so clients spread out.</summary>
internal struct Backoff
{
    private static readonly TimeSpan First = TimeSpan.FromMilliseconds(100);
    private readonly TimeSpan _limit;
    private TimeSpan _next;

    public Backoff(TimeSpan limit)
    {
        _limit = limit;
        _next = First;
    }

    public TimeSpan Next()
    {
        var wait = _next * (0.75 + 0.5 * Random.Shared.NextDouble());
        _next = _next * 2 < _limit ? _next * 2 : _limit;
        return wait;
    }

    public void Reset() => _next = First;
}

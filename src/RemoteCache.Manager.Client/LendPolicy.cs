using System;

namespace RemoteCache;

/// <summary>What a harvesting server does now: lend at most <see cref="Limit"/>; give <see cref="GiveBack"/> bytes back by <see cref="By"/>, or drop its cache at once.</summary>
internal sealed record LendDecision(long Limit, long GiveBack, DateTimeOffset? By, bool DropNow);

/// <summary>
/// Lending what the host does not use (Memtrade's producer side): the server may hold the host's headroom and what it
/// holds already, less a reserve kept for the host's own processes, in whole regions. When that falls below what is
/// lent, the difference is given back: by migration, with a deadline from how fast the headroom is falling (the time
/// until half the reserve is gone); or, once half the reserve is gone, by dropping the cache at once — a cache lost
/// rather than a host process killed.
/// </summary>
internal sealed class LendPolicy
{
    /// <summary>Bounds of the deadline a give-back asks for.</summary>
    public static readonly TimeSpan MinDeadline = TimeSpan.FromSeconds(1), MaxDeadline = TimeSpan.FromSeconds(60);

    // Weight of the newest reading in the headroom's falling rate (an exponential average over a few readings).
    private const double RateWeight = 0.3;

    private readonly long _reserve;
    private readonly long _region;
    private readonly long _cap;
    private (DateTimeOffset At, long Headroom)? _last;
    private double _fallingPerSecond;

    /// <param name="reserve">Bytes of the host never lent.</param>
    /// <param name="regionSize">Bytes per region: limits are whole regions.</param>
    /// <param name="cap">Bytes lent at most, whatever the host has.</param>
    public LendPolicy(long reserve, long regionSize, long cap)
    {
        _reserve = reserve;
        _region = regionSize;
        _cap = cap;
    }

    public LendDecision Decide(HostMemoryReading reading, long lent, DateTimeOffset now)
    {
        if (_last is { } last && now > last.At)
        {
            double rate = (last.Headroom - reading.Headroom) / (now - last.At).TotalSeconds;
            _fallingPerSecond = RateWeight * rate + (1 - RateWeight) * _fallingPerSecond;
        }
        _last = (now, reading.Headroom);
        long spare = Math.Max(0, reading.Headroom + reading.Held - _reserve);
        long limit = Math.Min(_cap, spare / _region * _region);
        if (lent <= limit)
            return new LendDecision(limit, 0, null, false);
        long giveBack = (lent - limit + _region - 1) / _region * _region;
        if (reading.Headroom < _reserve / 2)
            return new LendDecision(limit, giveBack, now, true);
        var left = _fallingPerSecond > 0 ? TimeSpan.FromSeconds((reading.Headroom - _reserve / 2) / _fallingPerSecond) : MaxDeadline;
        return new LendDecision(limit, giveBack, now + TimeSpan.FromTicks(Math.Clamp(left.Ticks, MinDeadline.Ticks, MaxDeadline.Ticks)), false);
    }
}

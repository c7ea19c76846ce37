using System;
using System.Globalization;

namespace RemoteCache.Slo;

/// <summary>
/// A cache's performance SLO (Redy §5.2): for one operation on records of one size, a bound on the mean latency and a
/// minimum throughput. A configuration meets it when its mean latency is at most <see cref="MaxMeanLatencyUs"/> and
/// its throughput at least <see cref="MinOpsPerSecond"/> (both bounds inclusive).
/// </summary>
public sealed record ServiceLevelObjective
{
    /// <summary>An SLO; every argument is checked.</summary>
    /// <param name="operation">Reads or writes.</param>
    /// <param name="maxMeanLatencyUs">The largest acceptable mean latency, µs: positive; <see cref="double.PositiveInfinity"/> = no bound.</param>
    /// <param name="minOpsPerSecond">The smallest acceptable throughput, operations per second: finite, 0 or more (0 = no bound).</param>
    /// <param name="recordSize">Bytes per operation: 1 or more (a model answers for one record size).</param>
    /// <exception cref="ArgumentException">An argument is out of range; the message names it and its value.</exception>
    public ServiceLevelObjective(SloOperation operation, double maxMeanLatencyUs, double minOpsPerSecond, int recordSize)
    {
        if (!Enum.IsDefined(operation))
            throw new ArgumentOutOfRangeException(nameof(operation), operation, "operation must be read or write");
        if (!(maxMeanLatencyUs > 0))
            throw new ArgumentOutOfRangeException(nameof(maxMeanLatencyUs), maxMeanLatencyUs, "the mean latency bound (µs) must be positive");
        if (!(minOpsPerSecond >= 0) || double.IsInfinity(minOpsPerSecond))
            throw new ArgumentOutOfRangeException(nameof(minOpsPerSecond), minOpsPerSecond, "the throughput bound (ops/s) must be finite and 0 or more");
        if (recordSize < 1)
            throw new ArgumentOutOfRangeException(nameof(recordSize), recordSize, "the record size (bytes) must be at least 1");
        Operation = operation;
        MaxMeanLatencyUs = maxMeanLatencyUs;
        MinOpsPerSecond = minOpsPerSecond;
        RecordSize = recordSize;
    }

    /// <summary>Reads or writes.</summary>
    public SloOperation Operation { get; }

    /// <summary>The largest acceptable mean latency, µs (inclusive).</summary>
    public double MaxMeanLatencyUs { get; }

    /// <summary>The smallest acceptable throughput, operations per second (inclusive).</summary>
    public double MinOpsPerSecond { get; }

    /// <summary>Bytes per operation.</summary>
    public int RecordSize { get; }

    /// <summary>Whether <paramref name="prediction"/> meets the SLO: mean latency ≤ the bound and throughput ≥ the bound.</summary>
    public bool IsMetBy(Prediction prediction) =>
        prediction.MeanUs <= MaxMeanLatencyUs && prediction.OpsPerSecond >= MinOpsPerSecond;

    /// <inheritdoc/>
    public override string ToString() => string.Create(CultureInfo.InvariantCulture,
        $"{SloPredictor.Name(Operation)}s of {RecordSize} B: mean latency ≤ {MaxMeanLatencyUs:G6} µs, throughput ≥ {MinOpsPerSecond:G6} ops/s");
}

/// <summary>
/// The order in which configurations are cheaper. <c>default</c> (<see cref="Redy"/>, both prices 0) is Redy's order:
/// the pre-order of the configuration tree of Fig. 10 with ascending children, that is fewest server threads, then
/// fewest client threads, then smallest batch, then smallest queue depth. With prices, the cheapest configuration is
/// the one with the lowest s · <see cref="ServerThreadPrice"/> + c · <see cref="ClientThreadPrice"/>, ties broken
/// in Redy's order (so a configuration's batch size and queue depth cost nothing but are still kept small).
/// </summary>
public readonly record struct SloCost
{
    /// <summary>Prices per server thread and per client thread (any unit: only their ratio matters).</summary>
    /// <exception cref="ArgumentOutOfRangeException">A price is negative, infinite or NaN.</exception>
    public SloCost(double serverThreadPrice, double clientThreadPrice)
    {
        if (!(serverThreadPrice >= 0) || double.IsInfinity(serverThreadPrice))
            throw new ArgumentOutOfRangeException(nameof(serverThreadPrice), serverThreadPrice, "a server thread's price must be finite and 0 or more");
        if (!(clientThreadPrice >= 0) || double.IsInfinity(clientThreadPrice))
            throw new ArgumentOutOfRangeException(nameof(clientThreadPrice), clientThreadPrice, "a client thread's price must be finite and 0 or more");
        ServerThreadPrice = serverThreadPrice;
        ClientThreadPrice = clientThreadPrice;
    }

    /// <summary>Redy's order: fewest s, then c, then b, then q.</summary>
    public static SloCost Redy => default;

    /// <summary>Price of a server thread.</summary>
    public double ServerThreadPrice { get; }

    /// <summary>Price of a client thread.</summary>
    public double ClientThreadPrice { get; }

    /// <summary>
    /// Whether this is Redy's order: no price for client threads (then the price orders by s alone, and ties fall to
    /// Redy's order).
    /// </summary>
    internal bool IsRedyOrder => ClientThreadPrice == 0;

    /// <summary>s · <see cref="ServerThreadPrice"/> + c · <see cref="ClientThreadPrice"/>.</summary>
    public double Price(CacheConfig config) => Price(config.ServerThreads, config.ClientThreads);

    internal double Price(int serverThreads, int clientThreads) =>
        serverThreads * ServerThreadPrice + clientThreads * ClientThreadPrice;

    /// <summary>Negative when <paramref name="a"/> is cheaper than <paramref name="b"/>, 0 when they are the same configuration: a total order.</summary>
    public int Compare(CacheConfig a, CacheConfig b)
    {
        int byPrice = Price(a).CompareTo(Price(b));
        if (byPrice != 0)
            return byPrice;
        int r = a.ServerThreads.CompareTo(b.ServerThreads);
        if (r != 0)
            return r;
        r = a.ClientThreads.CompareTo(b.ClientThreads);
        if (r != 0)
            return r;
        r = a.BatchSize.CompareTo(b.BatchSize);
        return r != 0 ? r : a.QueueDepth.CompareTo(b.QueueDepth);
    }

    /// <inheritdoc/>
    public override string ToString() => ServerThreadPrice == 0 && ClientThreadPrice == 0
        ? "Redy's order (fewest server threads, then client threads, batch size, queue depth)"
        : string.Create(CultureInfo.InvariantCulture,
            $"price s·{ServerThreadPrice:G6} + c·{ClientThreadPrice:G6} (ties in Redy's order)");
}

using System;
using System.Collections.Generic;
using System.Linq;

namespace RemoteCache.Slo;

/// <summary>What a cache achieved over one window: throughput per operation and the mean latency of a sample.</summary>
/// <param name="Duration">The window's length.</param>
/// <param name="ReadOpsPerSecond">Reads finished per second.</param>
/// <param name="WriteOpsPerSecond">Writes finished per second.</param>
/// <param name="ReadMeanUs">Mean latency of the sampled reads, µs; null when none was sampled.</param>
/// <param name="WriteMeanUs">Mean latency of the sampled writes, µs; null when none was sampled.</param>
public sealed record SloWindow(TimeSpan Duration, double ReadOpsPerSecond, double WriteOpsPerSecond, double? ReadMeanUs, double? WriteMeanUs)
{
    /// <summary>The throughput of <paramref name="operation"/>.</summary>
    public double OpsPerSecond(SloOperation operation) => operation == SloOperation.Read ? ReadOpsPerSecond : WriteOpsPerSecond;

    /// <summary>The mean latency of <paramref name="operation"/>, or null.</summary>
    public double? MeanUs(SloOperation operation) => operation == SloOperation.Read ? ReadMeanUs : WriteMeanUs;
}

/// <summary>One window judged against the SLO, and what the tuner did about it.</summary>
/// <param name="Config">The configuration the window ran with.</param>
/// <param name="Window">What was achieved.</param>
/// <param name="Judged">
/// Whether the window could be judged: some bounded operation was sampled and the load was within the SLO (no bounded
/// operation ran faster than the SLO's throughput, plus the tolerance: beyond that, a slower answer is the load's doing).
/// </param>
/// <param name="Conformant">Whether every sampled bounded operation's mean latency was within its bound plus the tolerance.</param>
/// <param name="MissingFor">How long the SLO has been missed under a load within it, up to and including this window.</param>
/// <param name="RetunedTo">The configuration the tuner switched to after this window, or null.</param>
/// <param name="Note">
/// When no configuration meets the corrected model: why, and whether the tuner moved to the corrected model's lowest
/// latency at the SLO's throughput (<paramref name="RetunedTo"/> set) or stayed; otherwise null.
/// </param>
public sealed record SloObservation(CacheConfig Config, SloWindow Window, bool Judged, bool Conformant, TimeSpan MissingFor,
                                    CacheConfig? RetunedTo, string? Note);

/// <summary>
/// The closed loop beyond Redy: judges each window a cache ran against its SLO and, when the SLO has been missed for
/// <see cref="RemoteCacheSlo.Patience"/> under a load within it, corrects the model with what it observed, searches the
/// corrected model again and names the configuration to switch to. Not thread-safe: one caller feeds it windows.
/// </summary>
/// <remarks>
/// The correction: each configuration the cache missed with is remembered with its error, observed / predicted mean
/// latency per operation; every measured point of the original model is then scaled by the error of the nearest
/// configuration tried (in log2 of each parameter). After one miss that scales the whole model; a model wrong by a
/// uniform factor is then right, and one retune reaches what a right model would have chosen. Uneven errors are learnt
/// one configuration at a time, and a configuration that missed is predicted as it ran.
/// </remarks>
public sealed class SloTuner
{
    private readonly RemoteCacheSlo _slo;
    private readonly SloCost _cost;
    private readonly IReadOnlyList<ServiceLevelObjective> _objectives;
    private readonly PerformanceModel _original;
    private readonly List<(CacheConfig Config, Dictionary<SloOperation, double> Error)> _misses = new();
    private SloPlanner _planner;
    private TimeSpan _missingFor;

    /// <summary>A tuner for a cache running <paramref name="config"/>, planned for <paramref name="slo"/> with <paramref name="model"/>.</summary>
    /// <exception cref="ArgumentException">The SLO is not valid or the model cannot answer it.</exception>
    public SloTuner(PerformanceModel model, RemoteCacheSlo slo, CacheConfig config, SloCost cost = default)
    {
        ArgumentNullException.ThrowIfNull(model);
        ArgumentNullException.ThrowIfNull(slo);
        _slo = slo;
        _cost = cost;
        _objectives = slo.Objectives();
        _original = model;
        _planner = new SloPlanner(model);
        foreach (var o in _objectives)
            _ = _planner.Search(o.Operation);  // an operation the model did not measure is refused here, not in a window
        Config = config;
    }

    /// <summary>The model as corrected so far.</summary>
    public PerformanceModel Model => _planner.Model;

    /// <summary>The configuration the cache runs (as far as the tuner knows).</summary>
    public CacheConfig Config { get; private set; }

    /// <summary>Configurations switched to so far.</summary>
    public int Retunes { get; private set; }

    /// <summary>Judges one window and decides whether to retune.</summary>
    public SloObservation Observe(SloWindow window)
    {
        ArgumentNullException.ThrowIfNull(window);
        double slack = 1 + _slo.Tolerance;
        var sampled = _objectives.Where(o => window.MeanUs(o.Operation) is not null).ToList();
        bool loadWithin = _slo.Throughput == 0 || sampled.All(o => window.OpsPerSecond(o.Operation) <= _slo.Throughput * slack);
        bool conformant = sampled.All(o => window.MeanUs(o.Operation)!.Value <= o.MaxMeanLatencyUs * slack);
        bool judged = sampled.Count > 0 && loadWithin;
        var ran = Config;
        if (!judged || conformant)
        {
            if (judged)
                _missingFor = TimeSpan.Zero;
            return new SloObservation(ran, window, judged, conformant, _missingFor, null, null);
        }
        _missingFor += window.Duration;
        if (!_slo.Retune || _missingFor < _slo.Patience)
            return new SloObservation(ran, window, judged, conformant, _missingFor, null, null);

        var missing = _missingFor;
        _missingFor = TimeSpan.Zero;  // judged afresh after a retune, or a patience later after a failed one
        var corrected = Corrected(window, sampled);
        if (corrected is null)
            return new SloObservation(ran, window, judged, conformant, missing, null,
                                      $"the model predicts nothing at {ran}, so it cannot be corrected");
        _planner = new SloPlanner(corrected);
        var plan = _planner.Plan(_slo, _cost);
        string? note = null;
        if (plan.Config is not { } next)
        {
            // Best effort: the corrected model's lowest latency at the SLO's throughput, if it is not where the cache is
            // (running there teaches the model more; staying would not).
            note = $"after correcting the model with what {ran} achieved: {plan.Describe()}";
            if (plan.Searches.FirstOrDefault(r => !r.Found)?.LowestLatencyReachingThroughput is not { } nearest || nearest.Config == ran)
                return new SloObservation(ran, window, judged, conformant, missing, null, note);
            next = nearest.Config;
        }
        if (next == ran)
            return new SloObservation(ran, window, judged, conformant, missing, null,
                                      $"the corrected model still predicts {ran} meets the SLO");
        Config = next;
        Retunes++;
        return new SloObservation(ran, window, judged, conformant, missing, next, note);
    }

    // The original model with each point scaled by the error of the nearest configuration that missed (this one included).
    private PerformanceModel? Corrected(SloWindow window, List<ServiceLevelObjective> sampled)
    {
        var error = new Dictionary<SloOperation, double>();
        foreach (var o in sampled)
        {
            if (!new SloPredictor(_original, o.Operation).TryPredict(Config, out var predicted))
                return null;
            error[o.Operation] = window.MeanUs(o.Operation)!.Value / predicted.MeanUs;
        }
        _misses.RemoveAll(m => m.Config == Config);
        _misses.Add((Config, error));
        return _original.WithOperations(_original.Operations.ToDictionary(
            e => e.Key,
            e => e.Value.Select(p => p with { MeanUs = p.MeanUs * NearestError(p.Config, e.Key) }).ToList()));
    }

    // The error of the closest configuration that missed and measured this operation (1: no such miss yet).
    private double NearestError(CacheConfig config, SloOperation operation)
    {
        double best = double.PositiveInfinity, error = 1;
        foreach (var (missed, errors) in _misses)
        {
            if (!errors.TryGetValue(operation, out var e))
                continue;
            double d = Distance(config, missed);
            if (d < best)
            {
                best = d;
                error = e;
            }
        }
        return error;
    }

    private static double Distance(CacheConfig a, CacheConfig b) =>
        Math.Abs(Math.Log2(1 + a.ClientThreads) - Math.Log2(1 + b.ClientThreads)) +
        Math.Abs(Math.Log2(1 + a.ServerThreads) - Math.Log2(1 + b.ServerThreads)) +
        Math.Abs(Math.Log2(a.BatchSize) - Math.Log2(b.BatchSize)) +
        Math.Abs(Math.Log2(a.QueueDepth) - Math.Log2(b.QueueDepth));
}

using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;

namespace RemoteCache.Slo;

/// <summary>What <see cref="SloPlanner.Plan"/> chose for an SLO, or why nothing meets it.</summary>
/// <param name="Slo">The SLO planned for.</param>
/// <param name="Cost">The cost order the configuration is cheapest in.</param>
/// <param name="Config">The cheapest configuration predicted to meet every objective of the SLO; null when none does.</param>
/// <param name="Predicted">For each bounded operation, what the model predicts at <paramref name="Config"/> (empty when none).</param>
/// <param name="Searches">The search of each objective on its own (the nearest alternatives when nothing meets the SLO).</param>
/// <param name="Model">The model planned with.</param>
public sealed record SloPlan(RemoteCacheSlo Slo, SloCost Cost, CacheConfig? Config,
                             IReadOnlyDictionary<SloOperation, Prediction> Predicted, IReadOnlyList<SloSearchResult> Searches,
                             PerformanceModel Model)
{
    /// <summary>Whether a configuration meets the SLO.</summary>
    public bool Found => Config is not null;

    /// <summary>One line: the configuration and its predictions, or why none meets the SLO and the nearest alternatives.</summary>
    public string Describe()
    {
        if (Config is { } config)
            return $"{config} ({string.Join(", ", Predicted.Select(p => Invariant($"{Name(p.Key)}s {p.Value.MeanUs:G4} µs at {p.Value.OpsPerSecond:G4} ops/s")))})";
        var failing = Searches.FirstOrDefault(s => !s.Found);
        if (failing is null)
            return "no configuration meets every objective at once, though each alone is met by some";
        string Alt(SloCandidate? c) => c is { } a ? Invariant($"{a.Config} ({a.Predicted.MeanUs:G4} µs, {a.Predicted.OpsPerSecond:G4} ops/s)") : "none";
        var o = failing.Objective;
        return Invariant($"no configuration is predicted to meet {o}; nearest: lowest latency at ≥ {o.MinOpsPerSecond:G4} ops/s ") +
               $"{Alt(failing.LowestLatencyReachingThroughput)}, " +
               Invariant($"highest throughput within {o.MaxMeanLatencyUs:G4} µs ") + Alt(failing.HighestThroughputWithinLatency);
    }

    private static string Name(SloOperation operation) => SloPredictor.Name(operation);

    private static string Invariant(FormattableString s) => s.ToString(CultureInfo.InvariantCulture);
}

/// <summary>
/// Turns an SLO into a configuration through a performance model: the cheapest configuration predicted to meet every
/// objective of a <see cref="RemoteCacheSlo"/> (its read bound and its write bound at once). Precomputes a
/// <see cref="SloSearch"/> per operation on first use; thread-safe.
/// </summary>
public sealed class SloPlanner
{
    private readonly Lazy<SloSearch>[] _searches;

    /// <summary>A planner over <paramref name="model"/>.</summary>
    /// <exception cref="FormatException">The model is not valid.</exception>
    public SloPlanner(PerformanceModel model)
    {
        ArgumentNullException.ThrowIfNull(model);
        model.Validate();
        Model = model;
        _searches = Enum.GetValues<SloOperation>()
            .Select(op => new Lazy<SloSearch>(() => new SloSearch(model, op)))
            .ToArray();
    }

    /// <summary>The model planned with.</summary>
    public PerformanceModel Model { get; }

    /// <summary>The search of one operation (precomputed on first use).</summary>
    /// <exception cref="ArgumentException">The model has no points for <paramref name="operation"/>.</exception>
    public SloSearch Search(SloOperation operation) => _searches[(int)operation].Value;

    /// <summary>
    /// The cheapest configuration (in <paramref name="cost"/>'s order) predicted to meet every objective of
    /// <paramref name="slo"/>. Exact: with one objective it is that objective's search; with two, the dearer of the two
    /// searches' answers is the answer when it meets both (anything cheaper fails the objective whose answer it is), and
    /// otherwise every configuration from there on is predicted, in cost order, until one meets both.
    /// </summary>
    /// <exception cref="ArgumentException">
    /// The SLO is not valid, its record size is not the model's, or it bounds an operation the model did not measure.
    /// </exception>
    public SloPlan Plan(RemoteCacheSlo slo, SloCost cost = default)
    {
        ArgumentNullException.ThrowIfNull(slo);
        var objectives = slo.Objectives();
        if (slo.RecordSize != Model.RecordSize)
            throw new ArgumentException($"the SLO is for {slo.RecordSize} B records but the model was measured with {Model.RecordSize} B records", nameof(slo));
        var searches = objectives.Select(o => Search(o.Operation).Search(o, cost)).ToList();
        var none = new Dictionary<SloOperation, Prediction>();
        if (searches.Any(s => !s.Found))
            return new SloPlan(slo, cost, null, none, searches, Model);
        var dearest = searches.Select(s => s.Cheapest!.Value.Config).Aggregate((a, b) => cost.Compare(a, b) >= 0 ? a : b);
        var chosen = MeetsAll(dearest, objectives, out var predicted) ? dearest : Scan(dearest, objectives, cost, out predicted);
        return new SloPlan(slo, cost, chosen, chosen is null ? none : predicted, searches, Model);
    }

    private bool MeetsAll(CacheConfig config, IReadOnlyList<ServiceLevelObjective> objectives, out Dictionary<SloOperation, Prediction> predicted)
    {
        predicted = new Dictionary<SloOperation, Prediction>();
        foreach (var o in objectives)
        {
            if (!Search(o.Operation).Predictor.TryPredict(config, out var p) || !o.IsMetBy(p))
                return false;
            predicted[o.Operation] = p;
        }
        return true;
    }

    // Every configuration not cheaper than `from`, the cheapest that meets every objective.
    private CacheConfig? Scan(CacheConfig from, IReadOnlyList<ServiceLevelObjective> objectives, SloCost cost,
                              out Dictionary<SloOperation, Prediction> predicted)
    {
        CacheConfig? best = null;
        predicted = new Dictionary<SloOperation, Prediction>();
        foreach (var config in SloReferenceSearch.Configurations(Model.Space))
        {
            if (cost.Compare(config, from) < 0 || (best is { } b && cost.Compare(config, b) >= 0))
                continue;
            if (MeetsAll(config, objectives, out var p))
            {
                best = config;
                predicted = p;
            }
        }
        return best;
    }
}

/// <summary>Opening a cache for an SLO was refused: the model predicts no configuration that meets it.</summary>
public sealed class SloNotMetException : InvalidOperationException
{
    /// <summary>The refusal of <paramref name="plan"/> for the cache <paramref name="cacheName"/>.</summary>
    public SloNotMetException(string cacheName, SloPlan plan)
        : base($"{cacheName}: the SLO ({plan?.Slo}) cannot be met: {plan?.Describe()}")
    {
        Plan = plan ?? throw new ArgumentNullException(nameof(plan));
    }

    /// <summary>The search's outcome, with the nearest alternatives.</summary>
    public SloPlan Plan { get; }
}

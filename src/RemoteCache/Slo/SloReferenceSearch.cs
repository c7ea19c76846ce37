using System;
using System.Collections.Generic;

namespace RemoteCache.Slo;

/// <summary>
/// The searches <see cref="SloSearch"/> is checked against, over the same interpolated model: an exhaustive scan of
/// every configuration, and Redy's Fig. 10 walk of the configuration tree. Both predict configurations one at a time
/// (<see cref="SloPredictor.TryPredict"/>): slow on a large space, meant for tests and comparisons.
/// </summary>
public static class SloReferenceSearch
{
    /// <summary>Every configuration of <paramref name="space"/> in Redy's order: s, then c, then b, then q, each ascending (b = 1 only when s = 0).</summary>
    public static IEnumerable<CacheConfig> Configurations(ConfigurationSpace space)
    {
        ArgumentNullException.ThrowIfNull(space);
        for (int s = space.MinServerThreads; s <= space.MaxServerThreads; s++)
        {
            for (int c = 0; c <= space.MaxClientThreads; c++)
            {
                int maxBatch = s == 0 ? 1 : space.MaxBatch;
                for (int b = 1; b <= maxBatch; b++)
                {
                    for (int q = 1; q <= space.MaxQueueDepth; q++)
                        yield return new CacheConfig(c, s, b, q);
                }
            }
        }
    }

    /// <summary>
    /// Predicts every configuration and keeps the cheapest that meets the SLO in <paramref name="cost"/>'s order, and
    /// the alternatives with the tie-breaks <see cref="SloSearchResult"/> documents. Exact by construction.
    /// </summary>
    public static SloSearchResult Exhaustive(SloPredictor predictor, ServiceLevelObjective objective, SloCost cost = default)
    {
        ArgumentNullException.ThrowIfNull(predictor);
        SloSearch.CheckObjective(predictor, objective);
        SloCandidate? cheapest = null, lowest = null, highest = null;
        foreach (var config in Configurations(predictor.Space))
        {
            if (!predictor.TryPredict(config, out var p))
                continue;
            var candidate = new SloCandidate(config, p);
            // Configurations come in Redy's order: on equal terms the first one seen stays.
            if (objective.IsMetBy(p) && (cheapest is null || cost.Compare(config, cheapest.Value.Config) < 0))
                cheapest = candidate;
            if (p.OpsPerSecond >= objective.MinOpsPerSecond && (lowest is not { } l
                    || p.MeanUs < l.Predicted.MeanUs
                    || (p.MeanUs == l.Predicted.MeanUs && p.OpsPerSecond > l.Predicted.OpsPerSecond)))
                lowest = candidate;
            if (p.MeanUs <= objective.MaxMeanLatencyUs && (highest is not { } h
                    || p.OpsPerSecond > h.Predicted.OpsPerSecond
                    || (p.OpsPerSecond == h.Predicted.OpsPerSecond && p.MeanUs < h.Predicted.MeanUs)))
                highest = candidate;
        }
        return new SloSearchResult(objective, cost, cheapest, lowest, highest);
    }

    /// <summary>Redy's Fig. 10 walk (see the other overload).</summary>
    public static SloCandidate? Figure10(SloPredictor predictor, ServiceLevelObjective objective) =>
        Figure10(predictor, objective, out _);

    /// <summary>
    /// Redy's online search (Fig. 10): a pre-order walk of the five-level tree s, c, b, q, leaf, children in
    /// ascending order, that returns the first leaf meeting the SLO and, when a child returns "invalid", prunes the
    /// child's remaining siblings. A leaf is invalid when its mean latency exceeds the SLO's, a success when it also
    /// reaches the throughput, "continue" otherwise; an internal node is invalid when its first child is (it returns
    /// "invalid" until a child has returned "continue"). Pruning assumes that raising any parameter never lowers the
    /// latency: on a model where it does, the walk can miss configurations that meet the SLO, or return a dearer one.
    /// </summary>
    /// <remarks>A leaf that is not in the model (a hole left by early termination) returns "continue": it neither meets the SLO nor prunes.</remarks>
    /// <param name="predictor">The interpolated model.</param>
    /// <param name="objective">The SLO.</param>
    /// <param name="leavesVisited">Leaves predicted during the walk.</param>
    /// <returns>The configuration found, or null.</returns>
    public static SloCandidate? Figure10(SloPredictor predictor, ServiceLevelObjective objective, out long leavesVisited)
    {
        ArgumentNullException.ThrowIfNull(predictor);
        SloSearch.CheckObjective(predictor, objective);
        var walk = new Walk(predictor, objective);
        var result = walk.Traverse(1);
        leavesVisited = walk.Leaves;
        return result == Status.Success ? walk.Found : null;
    }

    private enum Status
    {
        Invalid,
        Continue,
        Success,
    }

    private sealed class Walk
    {
        private readonly SloPredictor _predictor;
        private readonly ServiceLevelObjective _objective;
        private readonly ConfigurationSpace _space;
        private int _s, _c, _b, _q;

        public Walk(SloPredictor predictor, ServiceLevelObjective objective)
        {
            _predictor = predictor;
            _objective = objective;
            _space = predictor.Space;
        }

        public long Leaves { get; private set; }

        public SloCandidate? Found { get; private set; }

        // Fig. 10's Traverse: level 1 = s, 2 = c, 3 = b, 4 = q, 5 = leaf.
        public Status Traverse(int level)
        {
            if (level == 5)
            {
                Leaves++;
                var config = new CacheConfig(_c, _s, _b, _q);
                if (!_predictor.TryPredict(config, out var p))
                    return Status.Continue;
                if (p.MeanUs > _objective.MaxMeanLatencyUs)
                    return Status.Invalid;
                if (p.OpsPerSecond >= _objective.MinOpsPerSecond)
                {
                    Found = new SloCandidate(config, p);
                    return Status.Success;
                }
                return Status.Continue;
            }
            (int first, int last) = level switch
            {
                1 => (_space.MinServerThreads, _space.MaxServerThreads),
                2 => (0, _space.MaxClientThreads),
                3 => (1, _s == 0 ? 1 : _space.MaxBatch),
                _ => (1, _space.MaxQueueDepth),
            };
            var nodeResult = Status.Invalid;
            for (int value = first; value <= last; value++)
            {
                switch (level)
                {
                    case 1: _s = value; break;
                    case 2: _c = value; break;
                    case 3: _b = value; break;
                    default: _q = value; break;
                }
                var childResult = Traverse(level + 1);
                if (childResult == Status.Success)
                    return Status.Success;
                if (childResult == Status.Invalid)
                    return nodeResult;  // prune the remaining children
                nodeResult = Status.Continue;
            }
            return nodeResult;
        }
    }
}

using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using RemoteCache.Slo;

namespace RemoteCache.Manager.Slo;

/// <summary>A configuration chosen for a cache: on which transport, with what the model predicts.</summary>
public sealed record ConfigChoice(string Transport, CacheConfig Config, PerformanceModel Model, double PredictedLatencyUs, double PredictedThroughput);

/// <summary>
/// The performance models the manager plans with (remotecache-slo-model files, one per transport and record size),
/// and the SLO search over them: for a record size, the model of that size, or else of the next larger size (a larger
/// record is slower, so its prediction is on the safe side).
/// </summary>
public sealed class ModelLibrary
{
    private readonly Dictionary<(string Transport, int RecordSize), SloPlanner> _planners = new();

    public ModelLibrary(IEnumerable<PerformanceModel> models)
    {
        foreach (var model in models)
            _planners[(model.Transport, model.RecordSize)] = new SloPlanner(model);
    }

    /// <summary>Every <c>*.json</c> model in <paramref name="directory"/>.</summary>
    /// <exception cref="FormatException">A file is not a valid model (named).</exception>
    public static ModelLibrary Load(string directory)
    {
        if (!Directory.Exists(directory))
            throw new FormatException($"the models directory {directory} does not exist");
        var models = Directory.EnumerateFiles(directory, "*.json").OrderBy(f => f, StringComparer.Ordinal).Select(PerformanceModel.Load).ToList();
        if (models.Count == 0)
            throw new FormatException($"{directory} holds no performance model (*.json written by `remotecache slo model`)");
        return new ModelLibrary(models);
    }

    /// <summary>The transports that have a model.</summary>
    public IReadOnlyCollection<string> Transports => _planners.Keys.Select(k => k.Transport).Distinct().OrderBy(t => t, StringComparer.Ordinal).ToList();

    /// <summary>The (transport, record size) pairs that have a model.</summary>
    public IEnumerable<(string Transport, int RecordSize)> Keys => _planners.Keys;

    /// <summary>
    /// The cheapest configuration on <paramref name="transport"/> for <paramref name="slo"/> (Redy's cost order: fewest
    /// server threads first, which is also the cheapest in VMs, since fewer cores needed leaves more VM types to choose
    /// from). Null with the reason when the transport has no model for the size or nothing meets the SLO.
    /// </summary>
    public (ConfigChoice? Choice, string? Reason) Choose(string transport, RemoteCacheSlo slo)
    {
        var planner = _planners.Where(kv => kv.Key.Transport == transport && kv.Key.RecordSize >= slo.RecordSize)
                               .OrderBy(kv => kv.Key.RecordSize).Select(kv => kv.Value).FirstOrDefault();
        if (planner is null)
        {
            var sizes = _planners.Keys.Where(k => k.Transport == transport).Select(k => k.RecordSize).OrderBy(s => s).ToList();
            return (null, sizes.Count == 0
                ? $"there is no {transport} model"
                : $"the {transport} models are for records of {string.Join(", ", sizes)} B; none for {slo.RecordSize} B or larger");
        }
        var modelSlo = new RemoteCacheSlo
        {
            ReadLatency = slo.ReadLatency, WriteLatency = slo.WriteLatency, Throughput = slo.Throughput, RecordSize = planner.Model.RecordSize,
        };
        var plan = planner.Plan(modelSlo);
        if (plan.Config is not { } config)
            return (null, $"{transport}: {plan.Describe()}");
        var prediction = plan.Predicted.OrderBy(p => p.Key).First().Value;
        return (new ConfigChoice(transport, config, planner.Model, prediction.MeanUs, prediction.OpsPerSecond), null);
    }
}

using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using RemoteCache.Slo;

namespace RemoteCache.Cli.Slo;

/// <summary>Measures one configuration of the data path (remotecache-bench, or a fake in tests).</summary>
internal interface IPointMeasurer
{
    /// <summary>Runs <paramref name="operation"/> at <paramref name="config"/> and returns what it reached.</summary>
    /// <exception cref="MeasurementException">The configuration could not be measured.</exception>
    Task<ModelPoint> MeasureAsync(SloOperation operation, CacheConfig config, CancellationToken cancellationToken);
}

/// <summary>A configuration that could not be measured; the message names it and says why.</summary>
internal sealed class MeasurementException : Exception
{
    public MeasurementException(string message) : base(message)
    {
    }

    public MeasurementException(string message, Exception inner) : base(message, inner)
    {
    }
}

/// <summary>
/// Early termination along one parameter: a step that does not raise the throughput by at least
/// <see cref="MinGain"/> over the best so far along that parameter is a miss; after <see cref="Patience"/>
/// consecutive misses the larger values of the parameter are not measured.
/// </summary>
internal sealed record SweepRule(double MinGain, int Patience)
{
    /// <summary>3 % and two steps: one noisy step on a shared machine does not end a sweep.</summary>
    public static SweepRule Default { get; } = new(0.03, 2);

    /// <summary>Whether <paramref name="value"/> is a gain over <paramref name="best"/>.</summary>
    public bool Improves(double value, double best) => value > 0 && value >= best * (1 + MinGain);

    /// <inheritdoc/>
    public override string ToString() => string.Create(CultureInfo.InvariantCulture,
        $"stop along a parameter after {(Patience == 1 ? "a step that gains" : $"{Patience} consecutive steps that each gain")} less than {MinGain * 100:0.#} % over the best throughput so far along it");
}

/// <summary>
/// The grid of a configuration space: 0 (where the space has it) and the powers of two up to each limit, in the
/// order Redy's offline modeling visits them (a pre-order walk of the tree s → c → b → q).
/// </summary>
internal sealed class ModelGrid
{
    private readonly IReadOnlyList<int> _batches;

    public ModelGrid(ConfigurationSpace space)
    {
        Space = space;
        ServerThreads = Values(space.MinServerThreads, space.MaxServerThreads);
        ClientThreads = Values(0, space.MaxClientThreads);
        _batches = Values(1, space.MaxBatch);
        QueueDepths = Values(1, space.MaxQueueDepth);
    }

    public ConfigurationSpace Space { get; }

    /// <summary>s, fewest first.</summary>
    public IReadOnlyList<int> ServerThreads { get; }

    /// <summary>c, fewest first.</summary>
    public IReadOnlyList<int> ClientThreads { get; }

    /// <summary>q, smallest first.</summary>
    public IReadOnlyList<int> QueueDepths { get; }

    /// <summary>b for <paramref name="serverThreads"/>: only 1 without server threads (one-sided requests are not batched).</summary>
    public IReadOnlyList<int> Batches(int serverThreads) => serverThreads == 0 ? new[] { 1 } : _batches;

    /// <summary>Grid points with these server threads.</summary>
    public int PointsUnderServerThreads(int s) => ClientThreads.Count * PointsUnderClientThreads(s);

    /// <summary>Grid points with these server threads and any one number of client threads.</summary>
    public int PointsUnderClientThreads(int s) => Batches(s).Count * QueueDepths.Count;

    /// <summary>Grid points with one (c, s, b).</summary>
    public int PointsUnderBatch => QueueDepths.Count;

    /// <summary>Every grid point.</summary>
    public int Count => ServerThreads.Sum(PointsUnderServerThreads);

    /// <summary>Every grid point, in the order of the walk.</summary>
    public IEnumerable<CacheConfig> All()
    {
        foreach (int s in ServerThreads)
            foreach (int c in ClientThreads)
                foreach (int b in Batches(s))
                    foreach (int q in QueueDepths)
                        yield return new CacheConfig(c, s, b, q);
    }

    /// <summary>The grid of a parameter (<see cref="ConfigurationSpace.GridValues"/>): 0 when min is 0, the powers of two, and max.</summary>
    public static IReadOnlyList<int> Values(int min, int max) => ConfigurationSpace.GridValues(min, max);
}

/// <summary>Where early termination stopped a sweep along one parameter, and what it left out.</summary>
/// <param name="Operation">The operation swept.</param>
/// <param name="Parameter">"s", "c", "b" or "q".</param>
/// <param name="Fixed">The parameters above it, e.g. "c=0 s=1 b=16" for a sweep along q ("" along s).</param>
/// <param name="Misses">The values that each gained too little (the last <see cref="SweepRule.Patience"/>).</param>
/// <param name="Skipped">The larger values not measured.</param>
/// <param name="SkippedPoints">Grid points under them.</param>
internal sealed record SweepCut(SloOperation Operation, string Parameter, string Fixed, IReadOnlyList<int> Misses, IReadOnlyList<int> Skipped, int SkippedPoints)
{
    /// <inheritdoc/>
    public override string ToString()
    {
        string where = Fixed.Length == 0 ? "" : " " + Fixed;
        string points = SkippedPoints == 1 ? "1 point" : $"{SkippedPoints} points";
        return $"{Operation.ToString().ToLowerInvariant()}{where}: {Parameter} stops at {Misses[^1]} " +
               $"(too little gain at {Parameter}={string.Join(", ", Misses)}); not measured: {Parameter}={string.Join(", ", Skipped)} ({points})";
    }
}

/// <summary>What a sweep reports as it goes.</summary>
internal interface ISweepObserver
{
    /// <summary>A point was measured (<paramref name="resumed"/> false) or taken from the file being resumed.</summary>
    void OnPoint(SloOperation operation, ModelPoint point, bool resumed);

    /// <summary>Early termination stopped a sweep along one parameter.</summary>
    void OnCut(SweepCut cut);
}

/// <summary>
/// Redy's offline modeling (§5.2) over a <see cref="ModelGrid"/>: for each s (fewest first) and each c (fewest
/// first), b and then q are swept in increasing order, and along every parameter the sweep stops by
/// <see cref="SweepRule"/>. The throughput a level compares is the best of the points below it: along q a point's
/// own, along b the best over its q, along c the best over its b and q, along s the best over its c, b and q.
/// Points already known (a resumed model) are not measured again but count exactly as if they had been, so a resumed
/// sweep takes the same path.
/// </summary>
internal sealed class ModelSweep
{
    private readonly ModelGrid _grid;
    private readonly SweepRule _rule;
    private readonly IPointMeasurer _measurer;

    public ModelSweep(ModelGrid grid, SweepRule rule, IPointMeasurer measurer)
    {
        _grid = grid;
        _rule = rule;
        _measurer = measurer;
    }

    /// <summary>Sweeps <paramref name="operation"/>; returns the best throughput seen.</summary>
    public Task<double> RunAsync(SloOperation operation, IReadOnlyDictionary<CacheConfig, ModelPoint> known,
                                 ISweepObserver observer, CancellationToken cancellationToken)
    {
        var run = new Run(this, operation, known, observer, cancellationToken);
        return Along(run, "s", "", _grid.ServerThreads, _grid.PointsUnderServerThreads,
            s => Along(run, "c", $"s={s}", _grid.ClientThreads, _ => _grid.PointsUnderClientThreads(s),
                c => Along(run, "b", $"c={c} s={s}", _grid.Batches(s), _ => _grid.PointsUnderBatch,
                    b => Along(run, "q", $"c={c} s={s} b={b}", _grid.QueueDepths, _ => 1,
                        q => run.PointAsync(new CacheConfig(c, s, b, q))))));
    }

    private async Task<double> Along(Run run, string parameter, string fixedPart, IReadOnlyList<int> values,
                                     Func<int, int> pointsUnder, Func<int, Task<double>> visit)
    {
        double best = 0;
        var misses = new List<int>();
        for (int i = 0; i < values.Count; i++)
        {
            double value = await visit(values[i]).ConfigureAwait(false);
            if (_rule.Improves(value, best))
                misses.Clear();
            else
                misses.Add(values[i]);
            best = Math.Max(best, value);
            if (misses.Count >= _rule.Patience && i + 1 < values.Count)
            {
                var skipped = values.Skip(i + 1).ToArray();
                run.Observer.OnCut(new SweepCut(run.Operation, parameter, fixedPart, misses.ToArray(), skipped, skipped.Sum(pointsUnder)));
                break;
            }
        }
        return best;
    }

    private sealed class Run
    {
        private readonly ModelSweep _sweep;
        private readonly IReadOnlyDictionary<CacheConfig, ModelPoint> _known;
        private readonly CancellationToken _cancellationToken;

        public Run(ModelSweep sweep, SloOperation operation, IReadOnlyDictionary<CacheConfig, ModelPoint> known,
                   ISweepObserver observer, CancellationToken cancellationToken)
        {
            _sweep = sweep;
            Operation = operation;
            _known = known;
            Observer = observer;
            _cancellationToken = cancellationToken;
        }

        public SloOperation Operation { get; }

        public ISweepObserver Observer { get; }

        public async Task<double> PointAsync(CacheConfig config)
        {
            if (_known.TryGetValue(config, out var point))
            {
                Observer.OnPoint(Operation, point, resumed: true);
                return point.OpsPerSecond;
            }
            _cancellationToken.ThrowIfCancellationRequested();
            point = await _sweep._measurer.MeasureAsync(Operation, config, _cancellationToken).ConfigureAwait(false);
            Observer.OnPoint(Operation, point, resumed: false);
            return point.OpsPerSecond;
        }
    }
}

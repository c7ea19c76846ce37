using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Threading.Tasks;

namespace RemoteCache.Slo;

/// <summary>A configuration with what the model predicts for it.</summary>
/// <param name="Config">The configuration.</param>
/// <param name="Predicted">Its interpolated mean latency and throughput.</param>
public readonly record struct SloCandidate(CacheConfig Config, Prediction Predicted);

/// <summary>
/// What a search found: the cheapest configuration predicted to meet the SLO, or none; and, either way, the nearest
/// alternatives: the lowest mean latency among the configurations that reach the throughput, and the highest throughput
/// among those within the latency bound (each null when no configuration reaches the throughput, or none is within the
/// latency bound).
/// </summary>
/// <param name="Objective">The SLO searched for.</param>
/// <param name="Cost">The cost order the configuration is cheapest in.</param>
/// <param name="Cheapest">The cheapest configuration meeting the SLO, or null when none does.</param>
/// <param name="LowestLatencyReachingThroughput">
/// Among the configurations whose throughput is at least the SLO's: one with the lowest mean latency (ties: the
/// highest throughput, then the first in Redy's order); null when none reaches the throughput.
/// </param>
/// <param name="HighestThroughputWithinLatency">
/// Among the configurations whose mean latency is within the SLO's: one with the highest throughput (ties: the lowest
/// latency, then the first in Redy's order); null when none is within the latency bound.
/// </param>
public sealed record SloSearchResult(
    ServiceLevelObjective Objective,
    SloCost Cost,
    SloCandidate? Cheapest,
    SloCandidate? LowestLatencyReachingThroughput,
    SloCandidate? HighestThroughputWithinLatency)
{
    /// <summary>Whether a configuration meets the SLO (<see cref="Cheapest"/> is set).</summary>
    public bool Found => Cheapest is not null;
}

/// <summary>
/// The search for the cheapest configuration predicted to meet an SLO, exact on any model (no monotonicity assumed),
/// precomputed once per model and operation; then each search is a few binary searches and a scan of one level.
/// </summary>
/// <remarks>
/// <para>The configurations are grouped in <em>levels</em>, one per (s, c): every cost order (<see cref="SloCost"/>)
/// ranks levels by s and c alone and, within a level, ranks by (b, q). For each level the precomputation predicts every
/// configuration (<see cref="SloPredictor"/>) and keeps its latency–throughput frontier: the configurations sorted by
/// mean latency, each with the highest throughput of any configuration of the level at that latency or less (only the
/// steps are stored). A level has a configuration meeting (latency ≤ L, throughput ≥ T) exactly when the frontier's last
/// step at latency ≤ L has throughput ≥ T: one binary search, with no assumption on how latency or throughput vary with
/// the parameters. A search visits the levels in cost order, skipping a level at once when its least latency exceeds L or
/// its highest throughput is below T, and binary-searches the others' frontiers; in the first level that has one, it
/// returns the first (b, q) in order that meets the SLO (the level's rows of one batch size that cannot meet it are
/// skipped by their least latency and highest throughput). The same frontier over all configurations answers whether
/// any configuration meets the SLO (so a search that finds none visits no level) and gives the nearest alternatives.</para>
/// <para>Memory: per level, the frontier steps and the level's grid corners of b and q (interpolated over c and s), and per
/// (s, c, b) two numbers; the predictions themselves are not kept (a search recomputes those of the rows it scans, with
/// the operations <see cref="SloPredictor.TryPredict"/> uses). Immutable and thread-safe.</para>
/// </remarks>
public sealed class SloSearch
{
    private const int MaxCachedOrders = 64;

    private readonly SloPredictor _predictor;
    private readonly int _nc;        // client-thread values per s (0..MaxClientThreads)
    private readonly int _maxBatch;
    private readonly int _maxQueue;
    private readonly int _nbg;       // grid values of b
    private readonly int _nqg;       // grid values of q
    private readonly Bracket[] _bBrackets;  // by batch size
    private readonly Bracket[] _qBrackets;  // by queue depth

    // Per level (level = (s − MinServerThreads) · _nc + c; this numbering is Redy's order).
    private readonly double[] _planeLat;    // [level, bi, qi]: the corners of b and q, interpolated over c and s
    private readonly double[] _planeTp;
    private readonly int[] _rowStart;       // rows (one per batch size) of level: _rowStart[level] .. _rowStart[level + 1]
    private readonly double[] _rowMinLat;   // per row: least latency, highest throughput (+∞, −∞ when nothing is predicted)
    private readonly double[] _rowMaxTp;
    private readonly int[] _frontStart;     // frontier steps of level: _frontStart[level] .. _frontStart[level + 1]
    private readonly double[] _frontLat;    // strictly increasing within a level
    private readonly double[] _frontTp;     // strictly increasing within a level

    // Over all configurations.
    private readonly double[] _globalLat;
    private readonly double[] _globalTp;
    private readonly CacheConfig[] _globalConfig;

    private readonly LevelOrder _redyOrder;
    private readonly ConcurrentDictionary<SloCost, LevelOrder> _orders = new();

    /// <summary>Precomputes the search of <paramref name="model"/>'s <paramref name="operation"/>.</summary>
    /// <exception cref="ArgumentException">The model has no points for the operation.</exception>
    /// <exception cref="FormatException">The model is not valid.</exception>
    public SloSearch(PerformanceModel model, SloOperation operation)
        : this(new SloPredictor(model, operation))
    {
    }

    /// <summary>Precomputes the search of <paramref name="predictor"/>'s predictions.</summary>
    /// <param name="predictor">The interpolated model.</param>
    /// <param name="maxDegreeOfParallelism">Threads the precomputation may use (levels are independent); −1 = as many as there are cores.</param>
    public SloSearch(SloPredictor predictor, int maxDegreeOfParallelism = -1)
    {
        ArgumentNullException.ThrowIfNull(predictor);
        if (maxDegreeOfParallelism == 0 || maxDegreeOfParallelism < -1)
            throw new ArgumentOutOfRangeException(nameof(maxDegreeOfParallelism), maxDegreeOfParallelism, "must be positive or -1");
        _predictor = predictor;
        var space = predictor.Space;
        _nc = space.MaxClientThreads + 1;
        int levels = (space.MaxServerThreads - space.MinServerThreads + 1) * _nc;
        _maxBatch = space.MaxBatch;
        _maxQueue = space.MaxQueueDepth;
        _nbg = predictor.B.Count;
        _nqg = predictor.Q.Count;
        _bBrackets = new Bracket[_maxBatch + 1];
        for (int b = 1; b <= _maxBatch; b++)
            _bBrackets[b] = predictor.B.BracketOf(b);
        _qBrackets = new Bracket[_maxQueue + 1];
        for (int q = 1; q <= _maxQueue; q++)
            _qBrackets[q] = predictor.Q.BracketOf(q);

        int plane = _nbg * _nqg;
        _planeLat = new double[levels * plane];
        _planeTp = new double[levels * plane];
        _rowStart = new int[levels + 1];
        for (int level = 0; level < levels; level++)
            _rowStart[level + 1] = _rowStart[level] + Rows(level);
        _rowMinLat = new double[_rowStart[levels]];
        _rowMaxTp = new double[_rowStart[levels]];

        var fronts = new LevelFrontier[levels];
        var options = new ParallelOptions { MaxDegreeOfParallelism = maxDegreeOfParallelism };
        Parallel.For(0, levels, options,
            () => new Scratch(_maxBatch * _maxQueue),
            (level, _, scratch) =>
            {
                fronts[level] = BuildLevel(level, scratch);
                return scratch;
            },
            _ => { });

        _frontStart = new int[levels + 1];
        long configurations = 0;
        for (int level = 0; level < levels; level++)
        {
            _frontStart[level + 1] = _frontStart[level] + fronts[level].Lat.Length;
            configurations += fronts[level].Predicted;
        }
        ConfigurationCount = configurations;
        _frontLat = new double[_frontStart[levels]];
        _frontTp = new double[_frontStart[levels]];
        for (int level = 0; level < levels; level++)
        {
            fronts[level].Lat.CopyTo(_frontLat, _frontStart[level]);
            fronts[level].Tp.CopyTo(_frontTp, _frontStart[level]);
        }
        (_globalLat, _globalTp, _globalConfig) = BuildGlobalFrontier(fronts);
        _redyOrder = BuildOrder(SloCost.Redy);
    }

    /// <summary>The interpolated model searched.</summary>
    public SloPredictor Predictor => _predictor;

    /// <summary>Configurations of the space that the model predicts.</summary>
    public long ConfigurationCount { get; }

    /// <summary>(s, c) levels of the space (including those with no predicted configuration).</summary>
    public int LevelCount => _rowStart.Length - 1;

    /// <summary>Steps of the frontier over all configurations (diagnostic).</summary>
    public int FrontierSize => _globalLat.Length;

    /// <summary>Steps of all levels' frontiers together (diagnostic).</summary>
    public int LevelFrontierSteps => _frontLat.Length;

    /// <summary>
    /// The cheapest configuration (in <paramref name="cost"/>'s order; default: Redy's) predicted to meet
    /// <paramref name="objective"/>, and the nearest alternatives.
    /// </summary>
    /// <exception cref="ArgumentException">The SLO's operation or record size is not the model's; the message names both.</exception>
    public SloSearchResult Search(ServiceLevelObjective objective, SloCost cost = default)
    {
        CheckObjective(_predictor, objective);
        double maxLat = objective.MaxMeanLatencyUs;
        double minTp = objective.MinOpsPerSecond;
        var lowest = LowestLatencyReaching(minTp);
        var highest = HighestThroughputWithin(maxLat);
        SloCandidate? cheapest = null;
        if (highest is { } h && h.Predicted.OpsPerSecond >= minTp)
            cheapest = FindCheapest(Order(cost), maxLat, minTp);
        return new SloSearchResult(objective, cost, cheapest, lowest, highest);
    }

    internal static void CheckObjective(SloPredictor predictor, ServiceLevelObjective objective)
    {
        ArgumentNullException.ThrowIfNull(objective);
        if (objective.Operation != predictor.Operation)
            throw new ArgumentException(
                $"the SLO is for {SloPredictor.Name(objective.Operation)}s but the model searched predicts {SloPredictor.Name(predictor.Operation)}s",
                nameof(objective));
        if (objective.RecordSize != predictor.RecordSize)
            throw new ArgumentException(
                $"the SLO's record size is {objective.RecordSize} B but the model was measured with {predictor.RecordSize} B records",
                nameof(objective));
    }

    private SloCandidate FindCheapest(LevelOrder order, double maxLat, double minTp)
    {
        var minLat = order.MinLat;
        var maxTp = order.MaxTp;
        for (int k = 0; k < minLat.Length; k++)
        {
            if (minLat[k] > maxLat || maxTp[k] < minTp)
                continue;
            int level = order.Levels[k];
            if (LevelMeets(level, maxLat, minTp))
                return FirstInLevel(level, maxLat, minTp);
        }
        throw new InvalidOperationException("internal error: the global frontier has a configuration meeting the SLO but no level has");
    }

    private bool LevelMeets(int level, double maxLat, double minTp)
    {
        int i = LastAtMost(_frontLat, _frontStart[level], _frontStart[level + 1], maxLat);
        return i >= 0 && _frontTp[i] >= minTp;
    }

    private SloCandidate FirstInLevel(int level, double maxLat, double minTp)
    {
        int rows = _rowStart[level];
        int plane = level * _nbg * _nqg;
        int s = SOf(level), c = level % _nc;
        for (int b = 1; b <= _rowStart[level + 1] - rows; b++)
        {
            int row = rows + b - 1;
            if (_rowMinLat[row] > maxLat || _rowMaxTp[row] < minTp)
                continue;
            var bb = _bBrackets[b];
            if (!bb.Valid)
                continue;
            for (int q = 1; q <= _maxQueue; q++)
            {
                var qb = _qBrackets[q];
                if (!qb.Valid)
                    break;  // and every larger q
                double lat = Evaluate(_planeLat, plane, bb, qb);
                if (!(lat <= maxLat))
                    continue;  // also skips NaN (not predicted)
                double tp = Evaluate(_planeTp, plane, bb, qb);
                if (tp >= minTp)
                    return new SloCandidate(new CacheConfig(c, s, b, q), new Prediction(lat, tp));
            }
        }
        throw new InvalidOperationException("internal error: a level's frontier has a configuration meeting the SLO but its rows have none");
    }

    private SloCandidate? LowestLatencyReaching(double minTp)
    {
        // Throughput increases along the frontier: the first step reaching minTp has the lowest latency.
        int lo = 0, hi = _globalTp.Length;
        while (lo < hi)
        {
            int mid = (lo + hi) >>> 1;
            if (_globalTp[mid] >= minTp)
                hi = mid;
            else
                lo = mid + 1;
        }
        return lo < _globalTp.Length ? Global(lo) : null;
    }

    private SloCandidate? HighestThroughputWithin(double maxLat)
    {
        int i = LastAtMost(_globalLat, 0, _globalLat.Length, maxLat);
        return i >= 0 ? Global(i) : null;
    }

    private SloCandidate Global(int i) => new(_globalConfig[i], new Prediction(_globalLat[i], _globalTp[i]));

    /// <summary>The last index in [start, end) whose value is ≤ bound (values ascending), or −1.</summary>
    private static int LastAtMost(double[] values, int start, int end, double bound)
    {
        int lo = start, hi = end;
        while (lo < hi)
        {
            int mid = (lo + hi) >>> 1;
            if (values[mid] <= bound)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo > start ? lo - 1 : -1;
    }

    private double Evaluate(double[] planes, int plane, in Bracket b, in Bracket q) => SloPredictor.Bilinear(
        planes[plane + b.Lo * _nqg + q.Lo], planes[plane + b.Hi * _nqg + q.Lo],
        planes[plane + b.Lo * _nqg + q.Hi], planes[plane + b.Hi * _nqg + q.Hi], b.W, q.W);

    /// <summary>Predicts every configuration of a level: its corners, its rows' bounds and its frontier.</summary>
    private LevelFrontier BuildLevel(int level, Scratch scratch)
    {
        int s = SOf(level), c = level % _nc;
        int plane = level * _nbg * _nqg;
        int rowBase = _rowStart[level], rows = _rowStart[level + 1] - rowBase;
        var cb = _predictor.C.BracketOf(c);
        var sb = _predictor.S.BracketOf(s);
        for (int bi = 0; bi < _nbg; bi++)
        {
            for (int qi = 0; qi < _nqg; qi++)
            {
                bool valid = cb.Valid && sb.Valid;
                _planeLat[plane + bi * _nqg + qi] = valid ? _predictor.LatencyPlane(cb, sb, bi, qi) : double.NaN;
                _planeTp[plane + bi * _nqg + qi] = valid ? _predictor.ThroughputPlane(cb, sb, bi, qi) : double.NaN;
            }
        }

        int n = 0;
        for (int b = 1; b <= rows; b++)
        {
            double rowMinLat = double.PositiveInfinity, rowMaxTp = double.NegativeInfinity;
            var bb = _bBrackets[b];
            if (bb.Valid && cb.Valid && sb.Valid)
            {
                for (int q = 1; q <= _maxQueue; q++)
                {
                    var qb = _qBrackets[q];
                    if (!qb.Valid)
                        break;
                    double lat = Evaluate(_planeLat, plane, bb, qb);
                    double tp = Evaluate(_planeTp, plane, bb, qb);
                    if (double.IsNaN(lat) || double.IsNaN(tp))
                        continue;
                    scratch.Lat[n] = lat;
                    scratch.Tp[n] = tp;
                    scratch.Index[n] = (b - 1) * _maxQueue + (q - 1);
                    n++;
                    rowMinLat = Math.Min(rowMinLat, lat);
                    rowMaxTp = Math.Max(rowMaxTp, tp);
                }
            }
            _rowMinLat[rowBase + b - 1] = rowMinLat;
            _rowMaxTp[rowBase + b - 1] = rowMaxTp;
        }

        // Sort by latency; equal latencies by throughput descending, then (b, q): the first of equals is the one kept.
        var keys = scratch.Keys;
        var perm = scratch.Perm;
        Array.Copy(scratch.Lat, keys, n);
        for (int i = 0; i < n; i++)
            perm[i] = i;
        Array.Sort(keys, perm, 0, n);
        for (int i = 0; i < n;)
        {
            int j = i + 1;
            while (j < n && keys[j] == keys[i])
                j++;
            if (j - i > 1)
            {
                var tps = scratch.Tp;
                Array.Sort(perm, i, j - i, Comparer<int>.Create((x, y) =>
                {
                    int r = tps[y].CompareTo(tps[x]);
                    return r != 0 ? r : x.CompareTo(y);  // positions follow (b, q)
                }));
            }
            i = j;
        }
        var lats = new List<double>();
        var tpsKept = new List<double>();
        var indices = new List<int>();
        double max = double.NegativeInfinity;
        for (int k = 0; k < n; k++)
        {
            double tp = scratch.Tp[perm[k]];
            if (tp > max)
            {
                lats.Add(keys[k]);
                tpsKept.Add(tp);
                indices.Add(scratch.Index[perm[k]]);
                max = tp;
            }
        }
        return new LevelFrontier(lats.ToArray(), tpsKept.ToArray(), indices.ToArray(), n);
    }

    private (double[] Lat, double[] Tp, CacheConfig[] Config) BuildGlobalFrontier(LevelFrontier[] fronts)
    {
        var steps = new List<(double Lat, double Tp, int Level, int Index)>();
        for (int level = 0; level < fronts.Length; level++)
        {
            var f = fronts[level];
            for (int k = 0; k < f.Lat.Length; k++)
                steps.Add((f.Lat[k], f.Tp[k], level, f.Index[k]));
        }
        // Latency ascending; equal latencies by throughput descending, then in Redy's order (level, then (b, q)).
        steps.Sort((x, y) =>
        {
            int r = x.Lat.CompareTo(y.Lat);
            if (r != 0)
                return r;
            r = y.Tp.CompareTo(x.Tp);
            if (r != 0)
                return r;
            r = x.Level.CompareTo(y.Level);
            return r != 0 ? r : x.Index.CompareTo(y.Index);
        });
        var lat = new List<double>();
        var tp = new List<double>();
        var config = new List<CacheConfig>();
        double max = double.NegativeInfinity;
        foreach (var step in steps)
        {
            if (step.Tp > max)
            {
                lat.Add(step.Lat);
                tp.Add(step.Tp);
                config.Add(new CacheConfig(step.Level % _nc, SOf(step.Level), step.Index / _maxQueue + 1, step.Index % _maxQueue + 1));
                max = step.Tp;
            }
        }
        return (lat.ToArray(), tp.ToArray(), config.ToArray());
    }

    private LevelOrder Order(SloCost cost)
    {
        if (cost.IsRedyOrder)
            return _redyOrder;
        if (_orders.TryGetValue(cost, out var order))
            return order;
        order = BuildOrder(cost);
        if (_orders.Count < MaxCachedOrders)
            _orders.TryAdd(cost, order);
        return order;
    }

    /// <summary>The levels that predict something, cheapest first: by price, then in Redy's order (the level number).</summary>
    private LevelOrder BuildOrder(SloCost cost)
    {
        var levels = new List<int>();
        for (int level = 0; level < LevelCount; level++)
        {
            if (_frontStart[level + 1] > _frontStart[level])
                levels.Add(level);
        }
        if (!cost.IsRedyOrder)
        {
            levels.Sort((x, y) =>
            {
                int r = cost.Price(SOf(x), x % _nc).CompareTo(cost.Price(SOf(y), y % _nc));
                return r != 0 ? r : x.CompareTo(y);
            });
        }
        var ids = levels.ToArray();
        var minLat = new double[ids.Length];
        var maxTp = new double[ids.Length];
        for (int k = 0; k < ids.Length; k++)
        {
            minLat[k] = _frontLat[_frontStart[ids[k]]];
            maxTp[k] = _frontTp[_frontStart[ids[k] + 1] - 1];
        }
        return new LevelOrder(ids, minLat, maxTp);
    }

    private int SOf(int level) => _predictor.Space.MinServerThreads + level / _nc;

    /// <summary>Rows (batch sizes) of a level: 1 when s = 0 (one-sided access is not batched).</summary>
    private int Rows(int level) => SOf(level) == 0 ? 1 : _maxBatch;

    private sealed class Scratch
    {
        public Scratch(int size)
        {
            Lat = new double[size];
            Tp = new double[size];
            Index = new int[size];
            Keys = new double[size];
            Perm = new int[size];
        }

        public double[] Lat { get; }
        public double[] Tp { get; }
        public int[] Index { get; }
        public double[] Keys { get; }
        public int[] Perm { get; }
    }

    /// <summary>Levels in one cost order, with each one's least latency and highest throughput (for the quick skip).</summary>
    private sealed class LevelOrder
    {
        public LevelOrder(int[] levels, double[] minLat, double[] maxTp)
        {
            Levels = levels;
            MinLat = minLat;
            MaxTp = maxTp;
        }

        public int[] Levels { get; }
        public double[] MinLat { get; }
        public double[] MaxTp { get; }
    }

    private readonly struct LevelFrontier
    {
        public LevelFrontier(double[] lat, double[] tp, int[] index, long predicted)
        {
            Lat = lat;
            Tp = tp;
            Index = index;
            Predicted = predicted;
        }

        public double[] Lat { get; }
        public double[] Tp { get; }
        public int[] Index { get; }  // (b − 1) · MaxQueueDepth + (q − 1) of each step
        public long Predicted { get; }
    }
}

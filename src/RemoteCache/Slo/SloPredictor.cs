using System;
using System.Collections.Generic;

namespace RemoteCache.Slo;

/// <summary>What a model predicts for one configuration: mean latency and throughput.</summary>
/// <param name="MeanUs">Mean latency of an operation, µs.</param>
/// <param name="OpsPerSecond">Operations per second.</param>
public readonly record struct Prediction(double MeanUs, double OpsPerSecond);

/// <summary>
/// A performance model's predictions for one operation, interpolated as Redy's (§5.2): measured points lie on the grid
/// of each parameter (<see cref="ConfigurationSpace.GridValues"/>: 0, the powers of two and the maximum); any configuration of the space is predicted by multilinear
/// interpolation between the grid values that bracket each of its parameters (linear in the parameter's value; a
/// grid value brackets itself, so a measured point is predicted as measured). A configuration whose interpolation
/// needs a corner that was not measured (early termination leaves holes) is not in the model.
/// </summary>
/// <remarks>
/// The interpolation is evaluated in a fixed order (client threads, then server threads, then batch size, then
/// queue depth), and <see cref="SloSearch"/> evaluates it in exactly the same operations, so that every search
/// agrees with <see cref="TryPredict"/> to the last bit. Immutable and thread-safe.
/// </remarks>
public sealed class SloPredictor
{
    private readonly double[] _lat;  // measured mean latency per grid corner [c, s, b, q], NaN where not measured
    private readonly double[] _tp;   // measured throughput, same layout

    /// <summary>Interpolates the points <paramref name="model"/> measured for <paramref name="operation"/>.</summary>
    /// <exception cref="ArgumentNullException"><paramref name="model"/> is null.</exception>
    /// <exception cref="ArgumentException">The model has no points for <paramref name="operation"/>.</exception>
    /// <exception cref="FormatException">The model is not valid (<see cref="PerformanceModel.Validate"/>).</exception>
    public SloPredictor(PerformanceModel model, SloOperation operation)
    {
        ArgumentNullException.ThrowIfNull(model);
        if (!Enum.IsDefined(operation))
            throw new ArgumentOutOfRangeException(nameof(operation), operation, "operation must be read or write");
        model.Validate();
        var points = model.Points(operation);
        if (points.Count == 0)
            throw new ArgumentException($"the model has no measured points for {Name(operation)}s", nameof(operation));
        Model = model;
        Operation = operation;
        var space = model.Space;
        C = new GridAxis(0, space.MaxClientThreads);
        S = new GridAxis(space.MinServerThreads, space.MaxServerThreads);
        B = new GridAxis(1, space.MaxBatch);
        Q = new GridAxis(1, space.MaxQueueDepth);
        _lat = new double[C.Count * S.Count * B.Count * Q.Count];
        _tp = new double[_lat.Length];
        _lat.AsSpan().Fill(double.NaN);
        _tp.AsSpan().Fill(double.NaN);
        foreach (var p in points)
        {
            int i = Corner(C.IndexOf(p.C), S.IndexOf(p.S), B.IndexOf(p.B), Q.IndexOf(p.Q));
            _lat[i] = p.MeanUs;
            _tp[i] = p.OpsPerSecond;
        }
        MeasuredPoints = points.Count;
    }

    /// <summary>The model interpolated.</summary>
    public PerformanceModel Model { get; }

    /// <summary>The operation whose points are interpolated.</summary>
    public SloOperation Operation { get; }

    /// <summary>The model's configuration space.</summary>
    public ConfigurationSpace Space => Model.Space;

    /// <summary>The model's record size, bytes.</summary>
    public int RecordSize => Model.RecordSize;

    /// <summary>Points measured for <see cref="Operation"/>.</summary>
    public int MeasuredPoints { get; }

    internal GridAxis C { get; }
    internal GridAxis S { get; }
    internal GridAxis B { get; }
    internal GridAxis Q { get; }

    /// <summary>
    /// The interpolated mean latency and throughput of <paramref name="config"/>; false when it is outside the space
    /// or not in the model (a corner its interpolation needs was not measured).
    /// </summary>
    public bool TryPredict(CacheConfig config, out Prediction prediction)
    {
        prediction = default;
        if (!Space.Contains(config))
            return false;
        var c = C.BracketOf(config.ClientThreads);
        var s = S.BracketOf(config.ServerThreads);
        var b = B.BracketOf(config.BatchSize);
        var q = Q.BracketOf(config.QueueDepth);
        if (!c.Valid || !s.Valid || !b.Valid || !q.Valid)
            return false;
        double lat = Bilinear(
            PlaneValue(_lat, c, s, b.Lo, q.Lo), PlaneValue(_lat, c, s, b.Hi, q.Lo),
            PlaneValue(_lat, c, s, b.Lo, q.Hi), PlaneValue(_lat, c, s, b.Hi, q.Hi), b.W, q.W);
        if (double.IsNaN(lat))
            return false;
        double tp = Bilinear(
            PlaneValue(_tp, c, s, b.Lo, q.Lo), PlaneValue(_tp, c, s, b.Hi, q.Lo),
            PlaneValue(_tp, c, s, b.Lo, q.Hi), PlaneValue(_tp, c, s, b.Hi, q.Hi), b.W, q.W);
        if (double.IsNaN(tp))
            return false;
        prediction = new Prediction(lat, tp);
        return true;
    }

    /// <summary>The latency interpolated over c and s at the grid corner (<paramref name="bi"/>, <paramref name="qi"/>) of b and q (NaN if not measured).</summary>
    internal double LatencyPlane(in Bracket c, in Bracket s, int bi, int qi) => PlaneValue(_lat, c, s, bi, qi);

    /// <summary>The throughput interpolated over c and s at a grid corner of b and q (NaN if not measured).</summary>
    internal double ThroughputPlane(in Bracket c, in Bracket s, int bi, int qi) => PlaneValue(_tp, c, s, bi, qi);

    /// <summary>
    /// The value over b and q from the four grid corners that bracket them (already interpolated over c and s):
    /// the second half of the interpolation, shared by <see cref="TryPredict"/> and <see cref="SloSearch"/>.
    /// </summary>
    internal static double Bilinear(double b0q0, double b1q0, double b0q1, double b1q1, double wb, double wq) =>
        Lerp(Lerp(b0q0, b1q0, wb), Lerp(b0q1, b1q1, wb), wq);

    // a + (b − a)·w: exactly a when the bracket is a grid value (both ends the same corner, w = 0); NaN (a hole)
    // propagates from any corner used.
    private static double Lerp(double a, double b, double w) => a + (b - a) * w;

    private double PlaneValue(double[] values, in Bracket c, in Bracket s, int bi, int qi) =>
        Lerp(
            Lerp(values[Corner(c.Lo, s.Lo, bi, qi)], values[Corner(c.Hi, s.Lo, bi, qi)], c.W),
            Lerp(values[Corner(c.Lo, s.Hi, bi, qi)], values[Corner(c.Hi, s.Hi, bi, qi)], c.W),
            s.W);

    private int Corner(int ci, int si, int bi, int qi) => ((ci * S.Count + si) * B.Count + bi) * Q.Count + qi;

    internal static string Name(SloOperation operation) => operation == SloOperation.Read ? "read" : "write";
}

/// <summary>The grid values bracketing a parameter's value: indices of the lower and upper grid values and the weight of the upper one.</summary>
internal readonly struct Bracket
{
    public Bracket(int lo, int hi, double w)
    {
        Lo = lo;
        Hi = hi;
        W = w;
    }

    public int Lo { get; }
    public int Hi { get; }
    public double W { get; }

    /// <summary>False when the value is outside the axis or above its largest grid value.</summary>
    public bool Valid => Lo >= 0;

    public static Bracket None => new(-1, -1, 0);
}

/// <summary>One parameter's values min..max and its grid: 0 (when min is 0), the powers of two up to max, and max.</summary>
internal sealed class GridAxis
{
    private readonly int[] _grid;
    private readonly Bracket[] _byValue;  // indexed by value, 0..max

    public GridAxis(int min, int max)
    {
        Min = min;
        Max = max;
        _grid = ConfigurationSpace.GridValues(min, max);
        _byValue = new Bracket[max + 1];
        for (int v = 0; v <= max; v++)
        {
            if (v < min)
            {
                _byValue[v] = Bracket.None;
                continue;
            }
            int hi = Array.FindIndex(_grid, g => g >= v);
            if (hi < 0)
            {
                _byValue[v] = Bracket.None;  // above the largest grid value: no upper corner in the space
                continue;
            }
            _byValue[v] = _grid[hi] == v
                ? new Bracket(hi, hi, 0)
                : new Bracket(hi - 1, hi, (double)(v - _grid[hi - 1]) / (_grid[hi] - _grid[hi - 1]));
        }
    }

    public int Min { get; }
    public int Max { get; }

    /// <summary>Grid values on the axis.</summary>
    public int Count => _grid.Length;

    /// <summary>The largest grid value (values above it are not predicted).</summary>
    public int TopGridValue => _grid[^1];

    public int IndexOf(int gridValue) => Array.IndexOf(_grid, gridValue);

    public Bracket BracketOf(int value) => value >= 0 && value <= Max ? _byValue[value] : Bracket.None;
}

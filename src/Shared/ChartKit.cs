using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using ScottPlot;
using ScottPlot.TickGenerators;

namespace RemoteCache.Charts;

/// <summary>
/// What the repository's ScottPlot charts share (compiled into each project that draws: benchmarks/Ycsb and the
/// remotecache CLI): log axes, compact number and duration labels, a sans-serif font.
/// </summary>
internal static class ChartKit
{
    /// <summary>
    /// A log10 range that holds every value with a margin, at least one decade wide (so that the axis has labelled
    /// ticks: see <see cref="LogTicks"/>).
    /// </summary>
    internal static (double Lo, double Hi) LogRange(IEnumerable<double> values)
    {
        var logs = values.Where(v => v > 0).Select(Math.Log10).ToList();
        double min = logs.Min(), max = logs.Max(), margin = Math.Max(0.1, (max - min) * 0.05);
        double lo = min - margin, hi = max + margin, mid = (lo + hi) / 2;
        return hi - lo >= 1 ? (lo, hi) : (mid - 0.5, mid + 0.5);
    }

    /// <summary>
    /// Ticks of a log axis from <paramref name="lo"/> to <paramref name="hi"/> (log10 of the values: ScottPlot 5 has no
    /// log axis, so the charts plot log10 and label the ticks with the values): labelled ticks at the powers of ten,
    /// also at 2 and 5 times them when the axis spans at most 1.5 decades, minor ticks (and grid lines) at the
    /// other whole multiples. Manual rather than ScottPlot's NumericAutomatic with IntegerTicksOnly and a
    /// LogMinorTickGenerator, which leaves an axis of less than a decade with one labelled tick or none.
    /// </summary>
    internal static NumericManual LogTicks(double lo, double hi, Func<double, string> format)
    {
        var ticks = new NumericManual();
        bool fine = hi - lo <= 1.5;
        for (int decade = (int)Math.Floor(lo); decade <= (int)Math.Ceiling(hi); decade++)
        {
            for (int m = 1; m <= 9; m++)
            {
                double value = m * Math.Pow(10, decade), position = Math.Log10(value);
                if (position < lo - 1e-9 || position > hi + 1e-9)
                    continue;
                if (m == 1 || (fine && m is 2 or 5))
                    ticks.AddMajor(position, format(value));
                else
                    ticks.AddMinor(position);
            }
        }
        return ticks;
    }

    /// <summary>
    /// A bar of <paramref name="value"/> on a log axis (log10 of the values, as <see cref="LogTicks"/> labels them),
    /// standing on <paramref name="logBase"/> and labelled with the value.
    /// </summary>
    internal static Bar LogBar(double position, double value, double logBase, Color color) => new()
    {
        Position = position,
        Value = Math.Log10(value),
        ValueBase = logBase,
        Size = 0.85,
        FillColor = color,
        LineWidth = 0,
        Label = Si(value),
    };

    /// <summary>1.2K, 340K, 4.1M: a throughput in a few characters.</summary>
    internal static string Si(double v) =>
        v >= 1e9 ? Fixed(v / 1e9, "G") : v >= 1e6 ? Fixed(v / 1e6, "M") : v >= 1e3 ? Fixed(v / 1e3, "K") : Fixed(v, "");

    private static string Fixed(double v, string unit) =>
        (v >= 100 ? v.ToString("0", CultureInfo.InvariantCulture) : v >= 10 ? v.ToString("0.#", CultureInfo.InvariantCulture)
                                                                            : v.ToString("0.##", CultureInfo.InvariantCulture)) + unit;

    /// <summary>A latency given in microseconds: 100 ns, 10 µs, 1 ms, 1 s.</summary>
    internal static string Duration(double us) =>
        us >= 1e6 ? Fixed(us / 1e6, " s") : us >= 1e3 ? Fixed(us / 1e3, " ms") : us >= 1 ? Fixed(us, " µs") : Fixed(us * 1e3, " ns");

    internal static void UseSansSerif()
    {
        // SkiaSharp's default typeface (without fontconfig) can be a serif one; the first sans-serif family present wins.
        foreach (var family in new[] { "DejaVu Sans", "Liberation Sans", "Noto Sans", "Open Sans", "Arial", "Helvetica" })
        {
            if (Fonts.GetTypeface(family, false, false)?.FamilyName == family)
            {
                Fonts.Default = family;
                return;
            }
        }
    }
}

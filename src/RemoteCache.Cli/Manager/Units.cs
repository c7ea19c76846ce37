using System;
using System.Globalization;

using RemoteCache.Cli.Slo;

namespace RemoteCache.Cli.Manager;

/// <summary>Sizes ("1GiB", "512MiB", "4096") and durations ("90s", "30m", "2h", "7d", "45") on the command line and in output.</summary>
internal static class Units
{
    private static readonly (string Suffix, long Factor)[] Sizes =
    {
        ("TiB", 1L << 40), ("GiB", 1L << 30), ("MiB", 1L << 20), ("KiB", 1L << 10),
        ("T", 1L << 40), ("G", 1L << 30), ("M", 1L << 20), ("K", 1L << 10), ("B", 1),
    };

    /// <summary>Bytes: a whole number, optionally with a binary suffix (KiB, MiB, GiB, TiB; K, M, G, T mean the same).</summary>
    public static long ParseSize(string text, string option)
    {
        string t = text.Trim();
        long factor = 1;
        foreach (var (suffix, f) in Sizes)
        {
            if (t.EndsWith(suffix, StringComparison.OrdinalIgnoreCase))
            {
                t = t[..^suffix.Length].Trim();
                factor = f;
                break;
            }
        }
        if (!double.TryParse(t, NumberStyles.Float, CultureInfo.InvariantCulture, out double value) || !(value > 0) || value * factor > long.MaxValue / 2)
            throw new UsageException($"{option} '{text}' is not a size (bytes, or a number with KiB, MiB, GiB or TiB)");
        return (long)Math.Ceiling(value * factor);
    }

    /// <summary>A duration: seconds, or a number with s, m, h or d.</summary>
    public static TimeSpan ParseDuration(string text, string option)
    {
        string t = text.Trim();
        double unit = 1;
        if (t.Length > 0 && char.IsLetter(t[^1]))
        {
            unit = char.ToLowerInvariant(t[^1]) switch { 's' => 1, 'm' => 60, 'h' => 3600, 'd' => 86400, _ => double.NaN };
            t = t[..^1];
        }
        if (!double.TryParse(t, NumberStyles.Float, CultureInfo.InvariantCulture, out double value) || !(value * unit > 0) || value * unit > TimeSpan.MaxValue.TotalSeconds / 2)
            throw new UsageException($"{option} '{text}' is not a duration (seconds, or a number with s, m, h or d)");
        return TimeSpan.FromSeconds(value * unit);
    }

    public static string Size(long bytes) =>
        bytes >= 1L << 30 && bytes % (1L << 20) == 0 ? string.Create(CultureInfo.InvariantCulture, $"{bytes / (double)(1L << 30):0.##} GiB")
        : bytes >= 1L << 20 ? string.Create(CultureInfo.InvariantCulture, $"{bytes / (double)(1L << 20):0.##} MiB")
        : string.Create(CultureInfo.InvariantCulture, $"{bytes} B");
}

using System;
using System.Globalization;
using System.Text;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The bounds of what the manager computes with (the service layer holds every number from the wire to them,
/// <see cref="Services.WireInput"/>, so that checked arithmetic afterwards cannot wrap), and how a refusal quotes a
/// client's string (<see cref="Quote"/>). Strings and repeated fields are bounded before a request reaches a service
/// (<see cref="Services.InputBoundsInterceptor"/>).
/// </summary>
public static class Input
{
    /// <summary>Characters of a client's string that a refusal or a log line quotes.</summary>
    public const int QuotedChars = 32;

    /// <summary>The largest capacity asked of a cache: 1 PiB, beyond any catalogue, so sums of capacities stay far from overflow.</summary>
    public const long MaxCapacityBytes = 1L << 50;

    /// <summary>The largest record size an SLO may be for (the data path's largest single operation is far below).</summary>
    public const int MaxRecordSize = 1 << 30;

    /// <summary>The largest event sequence a manager issues (the store's integers are signed).</summary>
    public const long MaxSequence = long.MaxValue;

    /// <summary>A client's string as a refusal quotes it: at most <see cref="QuotedChars"/> characters, control characters replaced.</summary>
    public static string Quote(string value)
    {
        int length = Math.Min(value.Length, QuotedChars);
        if (length < value.Length && length > 0 && char.IsHighSurrogate(value[length - 1]))
            length--;
        var quoted = new StringBuilder(length + 32).Append('\'');
        foreach (char c in value.AsSpan(0, length))
            quoted.Append(char.IsControl(c) ? '?' : c);
        quoted.Append('\'');
        if (length < value.Length)
            quoted.Append(CultureInfo.InvariantCulture, $"… ({value.Length} characters)");
        return quoted.ToString();
    }
}

using System;
using System.Globalization;
using System.Text;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;

namespace RemoteCache.Manager.Core;

/// <summary>
/// Every number and duration that arrives from the wire goes through here before the manager computes with it: each is
/// bounded (checked arithmetic afterwards cannot wrap), zero means what the contract says it means, and a refusal names
/// the field and the value as it was sent. Strings and repeated fields are bounded before a request reaches the core
/// (<see cref="Services.InputBoundsInterceptor"/>); refusals quote any client string through <see cref="Quote"/>.
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

    /// <summary>A capacity in bytes: 1 to <see cref="MaxCapacityBytes"/>.</summary>
    public static long Capacity(ulong value, string field) =>
        value is >= 1 and <= MaxCapacityBytes
            ? (long)value
            : throw new ManagerException(StatusCode.InvalidArgument,
                value == 0 ? $"{field} must be at least 1 byte"
                           : $"{field} {value} is beyond any catalogue (at most {MaxCapacityBytes} bytes, 1 PiB)");

    /// <summary>Bytes per operation of an SLO: 0 means 8.</summary>
    public static int RecordSize(uint value, string field) =>
        value == 0 ? 8
        : value <= MaxRecordSize ? (int)value
        : throw new ManagerException(StatusCode.InvalidArgument, $"{field} {value} is more than {MaxRecordSize} bytes");

    /// <summary>An event sequence a watcher asks for: at most <see cref="MaxSequence"/>.</summary>
    public static long Sequence(ulong value, string field) =>
        value <= MaxSequence
            ? (long)value
            : throw new ManagerException(StatusCode.InvalidArgument, $"{field} {value} is beyond any sequence a manager issues (at most {MaxSequence})");

    /// <summary>
    /// A positive duration, exactly: a value between two ticks (100 ns) is rounded up to the next one, so no positive
    /// value becomes zero. Zero, a negative or a malformed duration is refused with the value as sent.
    /// </summary>
    public static TimeSpan Positive(Duration duration, string field) =>
        Exact(duration, field) is { } value && value > TimeSpan.Zero
            ? value
            : throw new ManagerException(StatusCode.InvalidArgument, $"{field} {Text(duration)} must be positive");

    /// <summary>A duration whose unset or zero value means <paramref name="otherwise"/>; else it must be positive.</summary>
    public static TimeSpan PositiveOr(Duration? duration, string field, TimeSpan otherwise) => PositiveOrDefault(duration, field) ?? otherwise;

    /// <summary>A duration whose unset or zero value means the default (null); else it must be positive.</summary>
    public static TimeSpan? PositiveOrDefault(Duration? duration, string field) =>
        duration is null || (duration.Seconds == 0 && duration.Nanos == 0) ? null : Positive(duration, field);

    /// <summary>A duration as the client sent it, in seconds (protobuf's JSON form): "-0.000000001s".</summary>
    public static string Text(Duration duration)
    {
        bool negative = duration.Seconds < 0 || duration.Nanos < 0;
        string seconds = duration.Seconds == long.MinValue ? "9223372036854775808" : Math.Abs(duration.Seconds).ToString(CultureInfo.InvariantCulture);
        string nanos = duration.Nanos == 0 ? "" : "." + Math.Abs((long)duration.Nanos).ToString("D9", CultureInfo.InvariantCulture).TrimEnd('0');
        return (negative ? "-" : "") + seconds + nanos + "s";
    }

    // Null for a value that is not a valid protobuf Duration (seconds beyond ±10,000 years, nanos out of range or of the other sign).
    private static TimeSpan? Exact(Duration d, string field)
    {
        if (d.Seconds is < -Duration.MaxSeconds or > Duration.MaxSeconds || d.Nanos is <= -Duration.NanosecondsPerSecond or >= Duration.NanosecondsPerSecond ||
            (d.Seconds < 0 && d.Nanos > 0) || (d.Seconds > 0 && d.Nanos < 0))
            throw new ManagerException(StatusCode.InvalidArgument,
                $"{field} is not a valid duration (seconds {d.Seconds}, nanos {d.Nanos}: at most ±{Duration.MaxSeconds} s, nanos of the seconds' sign and under 1 s)");
        if (d.Seconds < 0 || d.Nanos < 0)
            return null;
        const long nanosPerTick = 1_000_000_000 / TimeSpan.TicksPerSecond;
        return TimeSpan.FromTicks(d.Seconds * TimeSpan.TicksPerSecond + (d.Nanos + nanosPerTick - 1) / nanosPerTick);
    }
}

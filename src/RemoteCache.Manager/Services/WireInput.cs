using System;
using System.Globalization;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using RemoteCache.Manager.Core;

namespace RemoteCache.Manager.Services;

/// <summary>
/// Every number and duration that arrives from the wire goes through here before the manager computes with it: each is
/// bounded (<see cref="Input"/>: checked arithmetic afterwards cannot wrap), zero means what the contract says it means,
/// and a refusal (INVALID_ARGUMENT) names the field and the value as it was sent.
/// </summary>
public static class WireInput
{
    /// <summary>A capacity in bytes: 1 to <see cref="Input.MaxCapacityBytes"/>.</summary>
    public static long Capacity(ulong value, string field) =>
        value is >= 1 and <= Input.MaxCapacityBytes
            ? (long)value
            : throw Invalid(
                value == 0 ? $"{field} must be at least 1 byte"
                           : $"{field} {value} is beyond any catalogue (at most {Input.MaxCapacityBytes} bytes, 1 PiB)");

    /// <summary>Bytes per operation of an SLO: 0 means 8.</summary>
    public static int RecordSize(uint value, string field) =>
        value == 0 ? 8
        : value <= Input.MaxRecordSize ? (int)value
        : throw Invalid( $"{field} {value} is more than {Input.MaxRecordSize} bytes");

    /// <summary>An event sequence a watcher asks for: at most <see cref="Input.MaxSequence"/>.</summary>
    public static long Sequence(ulong value, string field) =>
        value <= Input.MaxSequence
            ? (long)value
            : throw Invalid( $"{field} {value} is beyond any sequence a manager issues (at most {Input.MaxSequence})");

    /// <summary>
    /// A positive duration, exactly: a value between two ticks (100 ns) is rounded up to the next one, so no positive
    /// value becomes zero. Zero, a negative or a malformed duration is refused with the value as sent.
    /// </summary>
    public static TimeSpan Positive(Duration duration, string field) =>
        Exact(duration, field) is { } value && value > TimeSpan.Zero
            ? value
            : throw Invalid( $"{field} {Text(duration)} must be positive");

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
            throw Invalid(
                $"{field} is not a valid duration (seconds {d.Seconds}, nanos {d.Nanos}: at most ±{Duration.MaxSeconds} s, nanos of the seconds' sign and under 1 s)");
        if (d.Seconds < 0 || d.Nanos < 0)
            return null;
        const long nanosPerTick = 1_000_000_000 / TimeSpan.TicksPerSecond;
        return TimeSpan.FromTicks(d.Seconds * TimeSpan.TicksPerSecond + (d.Nanos + nanosPerTick - 1) / nanosPerTick);
    }

    private static RpcException Invalid(string message) => new(new Status(StatusCode.InvalidArgument, message));
}

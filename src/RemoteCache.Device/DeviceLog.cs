using Microsoft.Extensions.Logging;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>The devices' log events (structured: every field is a named property). Event ids are stable.</summary>
internal static partial class DeviceLog
{
    [LoggerMessage(100, LogLevel.Information,
        "Device {Device}: cache {CacheName} was opened without a configuration; switched it to {Config} for FASTER's reads")]
    public static partial void Reconfigured(ILogger logger, string device, string cacheName, CacheConfig config);

    [LoggerMessage(101, LogLevel.Information, "Device {Device}: {Slots} segment slots of {SegmentSize} bytes over {Capacity} bytes")]
    public static partial void InitializedSegmented(ILogger logger, string device, int slots, long segmentSize, long capacity);

    [LoggerMessage(102, LogLevel.Information, "Device {Device}: an unsegmented log in a ring of {Capacity} bytes")]
    public static partial void InitializedUnsegmented(ILogger logger, string device, long capacity);

    [LoggerMessage(103, LogLevel.Warning,
        "Device {Device}: the cache refused an operation before sending it ({Status}); FASTER gets an I/O error (logged once per device)")]
    public static partial void OperationRefused(ILogger logger, string device, RemoteCacheStatus status);

    [LoggerMessage(104, LogLevel.Warning,
        "Device {Device}: no configuration of cache {CacheName}'s SLO model meets the device's SLO ({Slo}); it takes the fastest, {Config} (predicted mean read {MeanUs} µs)")]
    public static partial void SloNotMet(ILogger logger, string device, string cacheName, string slo, CacheConfig config, double meanUs);

    [LoggerMessage(110, LogLevel.Error,
        "Tier {Tier} ({Name}) failed a {What} (error 0x{Code:x}, {Status}); its reads go to the next tier from now on")]
    public static partial void TierTakenOut(ILogger logger, int tier, string name, string what, uint code, string status);

    [LoggerMessage(111, LogLevel.Warning, "Tier {Tier} ({Name}) failed a write of segment {Segment}: error 0x{Code:x}")]
    public static partial void TierWriteFailed(ILogger logger, int tier, string name, int segment, uint code);

    [LoggerMessage(105, LogLevel.Warning,
        "Device {Device}: the cache lost bytes [{Address}, +{Length}) ({Reason}); {Segments} segment(s) forgotten, read from the next tier until rewritten")]
    public static partial void ContentLost(ILogger logger, string device, long address, long length, int segments, string reason);

    [LoggerMessage(112, LogLevel.Information,
        "Tier {Tier} ({Name}) is back: its cache was replaced; {Forgotten} segment(s) it no longer holds are read from the next tier until rewritten or warmed")]
    public static partial void TierBack(ILogger logger, int tier, string name, int forgotten);

    [LoggerMessage(113, LogLevel.Information, "Tier {Tier} ({Name}) warmed: {Segments} segment(s), {Bytes} bytes from tier {From} in {ElapsedMs:0} ms")]
    public static partial void TierWarmed(ILogger logger, int tier, string name, int segments, long bytes, int from, double elapsedMs);

    [LoggerMessage(114, LogLevel.Warning, "Warming tier {Tier} ({Name}) stopped: {Reason}")]
    public static partial void WarmFailed(ILogger logger, int tier, string name, string reason);
}

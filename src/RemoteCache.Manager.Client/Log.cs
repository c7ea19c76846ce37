using System;
using Microsoft.Extensions.Logging;

namespace RemoteCache;

/// <summary>The managed client's log events (structured; ids stable, 100 and up beside the SDK's).</summary>
internal static partial class Log
{
    [LoggerMessage(100, LogLevel.Information, "Opened {CacheName} through the manager: {ServerCount} servers, {Capacity} bytes, config {Config}")]
    public static partial void ManagedCacheOpened(ILogger logger, string cacheName, int serverCount, long capacity, CacheConfig config);

    [LoggerMessage(101, LogLevel.Information, "Closed {CacheName}: {Reason}")]
    public static partial void ManagedCacheClosed(ILogger logger, string cacheName, string reason);

    [LoggerMessage(102, LogLevel.Information, "Reshaped {CacheName} from {OldServers} servers ({OldCapacity} bytes) to {NewServers} ({NewCapacity} bytes), config {Config}")]
    public static partial void Reshaped(ILogger logger, string cacheName, int oldServers, long oldCapacity, int newServers, long newCapacity, CacheConfig config);

    [LoggerMessage(103, LogLevel.Warning, "Reshaping {CacheName} failed after the manager granted it ({Reason}); asking the manager to undo it")]
    public static partial void ReshapeUndone(ILogger logger, string cacheName, string reason);

    [LoggerMessage(104, LogLevel.Warning, "Renewing the lease of {CacheName} (ends {LeaseExpires:O}) failed; next try in {DelayMs:0} ms: {Reason}")]
    public static partial void RenewFailed(ILogger logger, string cacheName, DateTimeOffset leaseExpires, double delayMs, string reason);

    [LoggerMessage(105, LogLevel.Information, "The event stream of {CacheName} from the manager at {Address} was interrupted ({Reason}); resuming from sequence {Next} at {NextAddress} in {DelayMs:0} ms")]
    public static partial void WatchInterrupted(ILogger logger, string cacheName, Uri address, string reason, long next, Uri nextAddress, double delayMs);

    [LoggerMessage(106, LogLevel.Warning, "Could not follow a change of {CacheName} made elsewhere: {Reason}")]
    public static partial void FollowFailed(ILogger logger, string cacheName, string reason);

    [LoggerMessage(118, LogLevel.Warning, "{CacheName}: events it had not seen were compacted away by the manager; following its current state and new events ({Reason})")]
    public static partial void EventsCompacted(ILogger logger, string cacheName, string reason);


    [LoggerMessage(108, LogLevel.Information, "Filled {CacheName} with {Bytes} bytes of {Path} in {ElapsedMs:0} ms")]
    public static partial void Populated(ILogger logger, string cacheName, string path, long bytes, double elapsedMs);

    [LoggerMessage(109, LogLevel.Warning, "Could not deallocate cache {CacheId}: {Reason}; it is freed when its lease ends")]
    public static partial void DeallocateFailed(ILogger logger, ulong cacheId, string reason);

    [LoggerMessage(110, LogLevel.Information, "{CacheName}: server {ServerId} replaced by {Replacement}, {Moved} of {Regions} regions moved, in {ElapsedMs:0} ms")]
    public static partial void ServerReplaced(ILogger logger, string cacheName, string serverId, string replacement, int moved, int regions, double elapsedMs);

    [LoggerMessage(111, LogLevel.Error, "{CacheName}: replacing server {ServerId} failed: {Reason}")]
    public static partial void ReplaceFailed(ILogger logger, string cacheName, string serverId, string reason);

    [LoggerMessage(115, LogLevel.Warning, "{CacheName}: no server can be rented to replace {ServerId} now ({Reason}); asking again in {DelayMs:0} ms")]
    public static partial void RentRetry(ILogger logger, string cacheName, string serverId, string reason, double delayMs);

    [LoggerMessage(112, LogLevel.Information, "{CacheName}: another client of the cache moves server {ServerId}'s regions; this one follows when it is done")]
    public static partial void MovedElsewhere(ILogger logger, string cacheName, string serverId);

    [LoggerMessage(113, LogLevel.Warning, "{CacheName}: regions {Region}..+{Regions} of server {ServerId} could not be copied: {Reason}")]
    public static partial void RegionNotCopied(ILogger logger, string cacheName, int region, int regions, string serverId, string reason);

    [LoggerMessage(116, LogLevel.Debug, "{CacheName}: regions {FirstRegion}..+{Regions} moved off {ServerId} in {ElapsedMs:0.00} ms: fence {FenceMs:0.00}, copy {CopyMs:0.00}, commits {CommitMs:0.00}")]
    public static partial void RegionsMoved(ILogger logger, string cacheName, int firstRegion, int regions, string serverId, double elapsedMs, double fenceMs, double copyMs,
                                            double commitMs);

    // Information when the next replica is tried at once, Warning when a round of them found none and the call waits.
    [LoggerMessage(EventId = 118, Message = "{Call}: the manager at {Address} is unavailable ({Reason}); trying {NextAddress} in {DelayMs:0} ms")]
    public static partial void CallRetried(ILogger logger, LogLevel level, string call, Uri address, string reason, Uri nextAddress, double delayMs);

    [LoggerMessage(114, LogLevel.Warning, "{CacheName}: regions {FirstRegion}..+{Regions} lost their content: {Reason}")]
    public static partial void RegionsLost(ILogger logger, string cacheName, int firstRegion, int regions, string reason);
}

using System;
using Microsoft.Extensions.Logging;

namespace RemoteCache;

/// <summary>The SDK's log events (structured: every field is a named property). Event ids are stable.</summary>
internal static partial class Log
{
    [LoggerMessage(1, LogLevel.Information,
        "Opened {CacheName} (id {CacheId}) on {Endpoints}: {Capacity} bytes, config {Config}, {Lanes} lanes, in {ElapsedMs} ms")]
    public static partial void CacheOpened(ILogger logger, string cacheName, ulong cacheId, string endpoints, long capacity,
                                           CacheConfig config, int lanes, long elapsedMs);

    [LoggerMessage(2, LogLevel.Warning, "Opening {CacheName} on {Endpoints} failed: {Status}")]
    public static partial void CacheOpenFailed(ILogger logger, string cacheName, string endpoints, RemoteCacheStatus status,
                                               Exception exception);

    [LoggerMessage(3, LogLevel.Information,
        "Opening {CacheName} on {Endpoints} was cancelled; a connect under way finishes in the background and is closed")]
    public static partial void CacheOpenCancelled(ILogger logger, string cacheName, string endpoints);

    [LoggerMessage(4, LogLevel.Information, "Closed {CacheName}")]
    public static partial void CacheClosed(ILogger logger, string cacheName);

    [LoggerMessage(5, LogLevel.Information, "Reconfigured {CacheName} from {OldConfig} to {NewConfig}")]
    public static partial void CacheReconfigured(ILogger logger, string cacheName, CacheConfig oldConfig, CacheConfig newConfig);

    [LoggerMessage(6, LogLevel.Information, "Renewed the lease of {CacheName} on its {ServerCount} servers")]
    public static partial void LeaseRenewed(ILogger logger, string cacheName, int serverCount);

    [LoggerMessage(14, LogLevel.Information, "Resized {CacheName} from {OldServers} servers ({OldCapacity} bytes) to {NewServers} ({NewCapacity} bytes)")]
    public static partial void CacheResized(ILogger logger, string cacheName, int oldServers, long oldCapacity, int newServers, long newCapacity);

    [LoggerMessage(15, LogLevel.Information, "{CacheName} connected {Endpoint} as holder {Holder}, lending {Regions} regions for migrations")]
    public static partial void HolderAdded(ILogger logger, string cacheName, string endpoint, int holder, int regions);

    [LoggerMessage(16, LogLevel.Information, "{CacheName} began moving region {Region}: its writes wait until the move ends")]
    public static partial void MigrationBegun(ILogger logger, string cacheName, int region);

    [LoggerMessage(17, LogLevel.Information, "{CacheName} moved region {Region} to region {HolderRegion} of holder {Holder}")]
    public static partial void MigrationCommitted(ILogger logger, string cacheName, int region, int holder, int holderRegion);

    [LoggerMessage(18, LogLevel.Warning, "{CacheName} aborted the move of region {Region}: it stays where it was")]
    public static partial void MigrationAborted(ILogger logger, string cacheName, int region);

    [LoggerMessage(19, LogLevel.Warning, "{CacheName} lost the content of bytes [{Address}, +{Length}): {Reason}")]
    public static partial void ContentLost(ILogger logger, string cacheName, long address, long length, string reason);

    [LoggerMessage(7, LogLevel.Warning,
        "Operations on {CacheName} fail with {Status}: {Reason} (logged once per status; the remotecache.client.errors metric counts them)")]
    public static partial void OperationsFailing(ILogger logger, string cacheName, RemoteCacheStatus status, string reason);

    [LoggerMessage(8, LogLevel.Information,
        "{CacheName} is configured for its SLO ({Slo}) with {Config}, predicted {Prediction}, by the model {ModelPath}")]
    public static partial void SloPlanned(ILogger logger, string cacheName, string slo, CacheConfig config, string prediction,
                                          string modelPath);

    [LoggerMessage(9, LogLevel.Information, "{CacheName} {Verdict} its SLO with {Config}: {Window}")]
    public static partial void SloConformance(ILogger logger, string cacheName, string verdict, CacheConfig config, string window);

    [LoggerMessage(10, LogLevel.Warning,
        "{CacheName} missed its SLO for {MissingSeconds} s under a load within it ({Window}); corrected its model and reconfigured from {OldConfig} to {NewConfig}")]
    public static partial void SloRetuned(ILogger logger, string cacheName, CacheConfig oldConfig, CacheConfig newConfig, double missingSeconds,
                                          string window);

    [LoggerMessage(11, LogLevel.Warning, "{CacheName} could not switch to {Config} for its SLO")]
    public static partial void SloRetuneFailed(ILogger logger, string cacheName, CacheConfig config, Exception exception);

    [LoggerMessage(12, LogLevel.Warning, "{CacheName} keeps missing its SLO and was not retuned: {Reason}")]
    public static partial void SloNotRetuned(ILogger logger, string cacheName, string reason);

    [LoggerMessage(13, LogLevel.Warning, "A handler of {CacheName}'s SloObserved event threw")]
    public static partial void SloHandlerFailed(ILogger logger, string cacheName, Exception exception);

    [LoggerMessage(23, LogLevel.Warning, "{CacheName}: server {Endpoint} is gone ({Status}); reconnecting with back-off: {Reason}")]
    public static partial void ReconnectFailing(ILogger logger, string cacheName, string endpoint, RemoteCacheStatus status, string reason);

    [LoggerMessage(24, LogLevel.Warning, "{CacheName}: server {Endpoint} is back; its {Regions} regions are served again, empty (holder {Holder})")]
    public static partial void ServerRecovered(ILogger logger, string cacheName, string endpoint, int regions, int holder);

    [LoggerMessage(25, LogLevel.Warning, "{CacheName}: recovering server {Endpoint}'s regions stopped at region {Region} ({Status}); the next attempt takes the rest")]
    public static partial void RecoveryStopped(ILogger logger, string cacheName, string endpoint, int region, RemoteCacheStatus status);

    [LoggerMessage(26, LogLevel.Error,
        "A handler of {CacheName}'s ContentLost event threw while server {Endpoint}'s regions were recovered; they are served again all the same")]
    public static partial void ContentLostHandlerFailed(ILogger logger, string cacheName, string endpoint, Exception exception);

    [LoggerMessage(27, LogLevel.Error, "{CacheName}: recovering its servers failed unexpectedly; trying again after a back-off")]
    public static partial void RecoveryFailed(ILogger logger, string cacheName, Exception exception);

    [LoggerMessage(20, LogLevel.Information,
        "Embedded server {ServerId} listening on {Endpoints}: regions of {RegionSize} bytes, at most {MemoryLimit} bytes, admission {Admission}")]
    public static partial void ServerStarted(ILogger logger, string serverId, string endpoints, long regionSize, long memoryLimit,
                                             string admission);

    [LoggerMessage(21, LogLevel.Warning, "Starting an embedded server on {Endpoints} failed: {Status}")]
    public static partial void ServerStartFailed(ILogger logger, string endpoints, RemoteCacheStatus status, Exception exception);

    [LoggerMessage(22, LogLevel.Information, "Embedded server {ServerId} stopped")]
    public static partial void ServerStopped(ILogger logger, string serverId);

    [LoggerMessage(28, LogLevel.Warning, "Embedded server {ServerId} dropped cache {CacheId}: its host needs the memory back")]
    public static partial void ServerDroppedCache(ILogger logger, string serverId, ulong cacheId);
}

namespace RemoteCache.Manager.Core;

/// <summary>What the stored events (the contract's <see cref="V1.CacheEvent"/>, the event log's format) carry of the manager's records.</summary>
public static class EventProtos
{
    public static V1.CacheConfig ToProto(RemoteCache.CacheConfig c) => new()
    {
        ClientThreads = (uint)c.ClientThreads, ServerThreads = (uint)c.ServerThreads, BatchSize = (uint)c.BatchSize, QueueDepth = (uint)c.QueueDepth,
    };
}

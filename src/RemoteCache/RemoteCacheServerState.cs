namespace RemoteCache;

/// <summary>One server of a cache and whether the client is connected to it (<see cref="RemoteCacheClient.CheckServers"/>).</summary>
/// <param name="Endpoint">The server, as the cache reaches it ("tcp:HOST:PORT", "shm:SOCKET_PATH", "verbs:HOST:PORT").</param>
/// <param name="Status"><see cref="RemoteCacheStatus.Ok"/> while connected; else why not (<see cref="RemoteCacheStatus.Disconnected"/>: it went away).</param>
public readonly record struct RemoteCacheServerState(string Endpoint, RemoteCacheStatus Status)
{
    /// <summary>Whether the client is connected to the server.</summary>
    public bool IsConnected => Status == RemoteCacheStatus.Ok;
}

using System;
using System.Collections.Generic;
using System.Linq;
using System.Runtime.InteropServices;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// A cache server embedded in this process: lends memory regions to caches over the given endpoints.
/// For tests, single-host use and the benchmarks' local default; production servers run
/// <c>remotecache-server</c>.
/// </summary>
public sealed unsafe class RemoteCacheServer : IDisposable
{
    private readonly ServerHandle _server;

    private RemoteCacheServer(ServerHandle server, IReadOnlyList<string> endpoints)
    {
        _server = server;
        Endpoints = endpoints;
    }

    /// <summary>Starts a server listening on <paramref name="listen"/> ("tcp:127.0.0.1:0" picks a port).</summary>
    /// <param name="listen">Endpoints to listen on.</param>
    /// <param name="regionSize">Bytes per region (a multiple of 4096); 0 = 1 GiB.</param>
    /// <param name="memoryLimit">Bytes lent in all at most; 0 = 4 GiB.</param>
    /// <param name="threads">Server threads at most; 0 = hardware threads.</param>
    /// <exception cref="ArgumentException">An endpoint is malformed or cannot be listened on.</exception>
    public static RemoteCacheServer Start(IEnumerable<string> listen, long regionSize = 0, long memoryLimit = 0, int threads = 0)
    {
        ArgumentNullException.ThrowIfNull(listen);
        using var strings = new Utf8StringArray(listen.ToArray());
        var options = new RcServerOptions
        {
            Listen = (IntPtr)strings.Pointers,
            ListenCount = (nuint)strings.Count,
            RegionSize = (ulong)regionSize,
            MemoryLimit = (ulong)memoryLimit,
            MaxThreads = (uint)threads,
        };
        var status = NativeMethods.ServerStart(&options, out var server);
        if (status != RcStatus.Ok)
        {
            server.Dispose();
            throw Errors.For(status, "embedded server", -1, 0);
        }
        var bound = new List<string>();
        for (nuint i = 0; NativeMethods.ServerEndpoint(server, i) is var p && p != IntPtr.Zero; i++)
            bound.Add(Marshal.PtrToStringUTF8(p)!);
        return new RemoteCacheServer(server, bound);
    }

    /// <summary>The endpoints as bound (a port of 0 resolved).</summary>
    public IReadOnlyList<string> Endpoints { get; }

    /// <summary>Bytes currently lent to caches.</summary>
    public long MemoryInUse => (long)NativeMethods.ServerMemoryInUse(_server);

    /// <summary>Closes every connection (clients see their operations fail) and stops the server.</summary>
    public void Dispose() => _server.Dispose();
}

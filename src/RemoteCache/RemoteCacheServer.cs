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

    private RemoteCacheServer(ServerHandle server, IReadOnlyList<string> endpoints, string serverId, bool admitsByCapability)
    {
        _server = server;
        Endpoints = endpoints;
        ServerId = serverId;
        AdmitsByCapability = admitsByCapability;
    }

    /// <summary>Starts a server listening on <paramref name="listen"/> ("tcp:127.0.0.1:0" picks a port).</summary>
    /// <param name="listen">Endpoints to listen on.</param>
    /// <param name="regionSize">Bytes per region (a multiple of 4096); 0 = 1 GiB (RC_DEFAULT_REGION_SIZE).</param>
    /// <param name="memoryLimit">Bytes lent in all at most; 0 = 4 GiB (RC_DEFAULT_MEMORY_LIMIT).</param>
    /// <param name="threads">Server threads at most; 0 = hardware threads.</param>
    /// <param name="admissionKey">
    /// Null (the default): open mode, any client that reaches the server may rent its memory. Otherwise the secret
    /// (at least <see cref="RemoteCacheCapability.MinAdmissionKeyBytes"/> bytes) that capabilities must be signed with
    /// (<see cref="RemoteCacheCapability.Mint"/>): a client without a valid one is refused with
    /// <see cref="RcStatus.Auth"/>. The server keeps its own copy.
    /// </param>
    /// <param name="serverId">The identity capabilities must name; null = the first endpoint as bound (<see cref="ServerId"/>).</param>
    /// <exception cref="ArgumentException">An endpoint is malformed or cannot be listened on, or the key is too short.</exception>
    public static RemoteCacheServer Start(IEnumerable<string> listen, long regionSize = 0, long memoryLimit = 0, int threads = 0,
                                          byte[]? admissionKey = null, string? serverId = null)
    {
        ArgumentNullException.ThrowIfNull(listen);
        if (admissionKey is not null && admissionKey.Length < RemoteCacheCapability.MinAdmissionKeyBytes)
            throw new ArgumentException(
                $"an admission key has at least {RemoteCacheCapability.MinAdmissionKeyBytes} bytes; this one has {admissionKey.Length}",
                nameof(admissionKey));
        if (serverId is { Length: 0 })
            throw new ArgumentException("the server id is empty (null picks the first endpoint)", nameof(serverId));
        using var strings = new Utf8StringArray(listen.ToArray());
        using var id = new Utf8StringArray(serverId is null ? Array.Empty<string>() : new[] { serverId });
        RcStatus status;
        ServerHandle server;
        fixed (byte* key = admissionKey)
        {
            var options = new RcServerOptions
            {
                Listen = (IntPtr)strings.Pointers,
                ListenCount = (nuint)strings.Count,
                RegionSize = (ulong)regionSize,
                MemoryLimit = (ulong)memoryLimit,
                MaxThreads = (uint)threads,
                AdmissionKey = (IntPtr)key,
                AdmissionKeyLength = (nuint)(admissionKey?.Length ?? 0),
                ServerId = id.Count > 0 ? id.Pointers[0] : IntPtr.Zero,
            };
            status = NativeMethods.ServerStart(&options, out server);
        }
        if (status != RcStatus.Ok)
        {
            server.Dispose();
            throw Errors.For(status, "embedded server", -1, 0);
        }
        var bound = new List<string>();
        for (nuint i = 0; NativeMethods.ServerEndpoint(server, i) is var p && p != IntPtr.Zero; i++)
            bound.Add(Marshal.PtrToStringUTF8(p)!);
        var boundId = Marshal.PtrToStringUTF8(NativeMethods.ServerId(server)) ?? "";
        return new RemoteCacheServer(server, bound, boundId, admissionKey is not null);
    }

    /// <summary>The identity capabilities for this server must name (<see cref="RemoteCacheCapability.Mint"/>).</summary>
    public string ServerId { get; }

    /// <summary>Whether the server was started with an admission key (false: open mode).</summary>
    public bool AdmitsByCapability { get; }

    /// <summary>The endpoints as bound (a port of 0 resolved).</summary>
    public IReadOnlyList<string> Endpoints { get; }

    /// <summary>Bytes currently lent to caches.</summary>
    public long MemoryInUse => (long)NativeMethods.ServerMemoryInUse(_server);

    /// <summary>Closes every connection (clients see their operations fail) and stops the server.</summary>
    public void Dispose() => _server.Dispose();
}

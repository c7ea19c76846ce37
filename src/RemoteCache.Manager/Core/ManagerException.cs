using System;
using Grpc.Core;

namespace RemoteCache.Manager.Core;

/// <summary>A refusal: the gRPC status it becomes and a message that names what was refused and why.</summary>
public sealed class ManagerException : Exception
{
    public ManagerException(StatusCode code, string message, string? refusal = null) : base(message)
    {
        Code = code;
        Refusal = refusal;
    }

    public StatusCode Code { get; }

    /// <summary>The refusal's kind (<see cref="V1.Refusals"/>), or null.</summary>
    public string? Refusal { get; }

    /// <summary>As the RPC's status.</summary>
    public RpcException ToRpc()
    {
        var trailers = new Metadata();
        if (Refusal is not null)
            trailers.Add(V1.Refusals.Trailer, Refusal);
        return new RpcException(new Status(Code, Message), trailers);
    }
}

using System;
using Grpc.Core;

namespace RemoteCache.Manager.Core;

/// <summary>A refusal: the gRPC status it becomes and a message that names what was refused and why.</summary>
public sealed class ManagerException : Exception
{
    public ManagerException(StatusCode code, string message) : base(message) => Code = code;

    public StatusCode Code { get; }

    /// <summary>As the RPC's status.</summary>
    public RpcException ToRpc() => new(new Status(Code, Message));
}

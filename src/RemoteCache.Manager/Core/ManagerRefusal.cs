using System;

namespace RemoteCache.Manager.Core;

/// <summary>What kind of refusal: the service layer answers each with the gRPC status of the same name.</summary>
public enum RefusalKind
{
    InvalidArgument,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    DeadlineExceeded,
    Unauthenticated,
}

/// <summary>A refusal by the manager's core: its kind, a message that names what was refused and why, and an optional tag.</summary>
public sealed class ManagerRefusal : Exception
{
    public ManagerRefusal(RefusalKind kind, string message, string? tag = null) : base(message)
    {
        Kind = kind;
        Tag = tag;
    }

    public RefusalKind Kind { get; }

    /// <summary>The refusal's tag for clients to act on (<see cref="V1.Refusals"/>), or null.</summary>
    public string? Tag { get; }
}

using System;
using System.Collections.Generic;
using System.Linq;
using Grpc.Core;
using RemoteCache.Manager.V1;

namespace RemoteCache;

/// <summary>The manager refused a call, or could not be reached; the message names the call and the reason.</summary>
public sealed class RemoteCacheManagerException : Exception
{
    /// <summary>Creates the exception.</summary>
    public RemoteCacheManagerException(StatusCode status, string message, bool migrationRequired = false, Exception? inner = null)
        : base(message, inner)
    {
        Status = status;
        MigrationRequired = migrationRequired;
    }

    private RemoteCacheManagerException(StatusCode status, string message, string? refusal, Exception inner)
        : this(status, message, refusal == Refusals.MigrationRequired, inner) => Refusal = refusal;

    /// <summary>
    /// The gRPC status: <see cref="StatusCode.InvalidArgument"/>, <see cref="StatusCode.NotFound"/>,
    /// <see cref="StatusCode.ResourceExhausted"/> (no capacity, quota), <see cref="StatusCode.FailedPrecondition"/> (no
    /// configuration meets the SLO), <see cref="StatusCode.Unauthenticated"/>, <see cref="StatusCode.PermissionDenied"/>,
    /// <see cref="StatusCode.Unavailable"/> and <see cref="StatusCode.DeadlineExceeded"/> (the manager did not answer).
    /// </summary>
    public StatusCode Status { get; }

    /// <summary>
    /// A reshape to an SLO the cache's servers cannot carry: it needs new servers and the content moved over, which
    /// the manager does not offer yet. The cache is unchanged.
    /// </summary>
    public bool MigrationRequired { get; }

    /// <summary>
    /// A watch from a sequence whose events the manager no longer keeps (status <see cref="StatusCode.OutOfRange"/>):
    /// they were compacted away. Read the cache's current state and watch again from 0 (new events only).
    /// </summary>
    public bool EventsCompacted => Refusal == Refusals.EventsCompacted;

    // The refusal's kind the manager named (manager.proto's `remotecache-refusal` trailer), or null.
    internal string? Refusal { get; }

    internal static RemoteCacheManagerException From(RpcException e, string call, Uri manager)
    {
        string? refusal = RefusalOf(e);
        string reason = e.StatusCode is StatusCode.Unavailable or StatusCode.DeadlineExceeded or StatusCode.Cancelled
            ? $"the manager at {manager} did not answer ({e.StatusCode}: {e.Status.Detail})"
            : $"{e.StatusCode}: {e.Status.Detail}";
        return new RemoteCacheManagerException(e.StatusCode, $"{call}: {reason}", refusal, e);
    }

    /// <summary>
    /// The call found no replica that carried it out before its deadline: the status of the last attempt, and each
    /// address tried with what it said last (as <paramref name="tried"/> describes it).
    /// </summary>
    internal static RemoteCacheManagerException NoAnswer(RpcException last, string call, IReadOnlyList<(Uri Address, string Said)> tried)
    {
        string reason = tried.Count == 1
            ? $"the manager at {tried[0].Address} did not answer ({tried[0].Said})"
            : $"no manager answered as the leader; tried {string.Join("; ", tried.Select(t => $"{t.Address} ({t.Said})"))}";
        return new RemoteCacheManagerException(last.StatusCode, $"{call}: {reason}", RefusalOf(last), last);
    }

    // The refusal's kind the manager named in the `remotecache-refusal` trailer, or null.
    internal static string? RefusalOf(RpcException e) => e.Trailers.FirstOrDefault(t => t.Key == Refusals.Trailer)?.Value;
}

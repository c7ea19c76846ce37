using System;
using RemoteCache.Slo;

namespace RemoteCache;

/// <summary>What <see cref="RemoteCacheManagerClient.CreateAsync(ManagedCacheRequest, System.Threading.CancellationToken)"/> asks for (Redy's Create).</summary>
public sealed class ManagedCacheRequest
{
    /// <summary>Bytes; the cache gets at least this much (whole regions on equal shares of its servers).</summary>
    public long Capacity { get; set; }

    /// <summary>What the cache must achieve; its <see cref="RemoteCacheSlo.RecordSize"/> picks the performance model. Null: the cheapest cache.</summary>
    public RemoteCacheSlo? Slo { get; set; }

    /// <summary>How long the cache is likely needed: a short one allows spot VMs. Null: until deleted (on-demand VMs only).</summary>
    public TimeSpan? Duration { get; set; }

    /// <summary>
    /// A file whose first <see cref="Capacity"/> bytes (or all of it, if shorter) are written to the cache at address 0
    /// before <c>CreateAsync</c> returns, or in the background with <see cref="PopulateInBackground"/>.
    /// </summary>
    public string? PopulateFrom { get; set; }

    /// <summary>
    /// Fill from <see cref="PopulateFrom"/> after <c>CreateAsync</c> returns: <see cref="ManagedCache.Populated"/>
    /// completes when it is done and <see cref="PopulateProgressEvent"/>s report progress. Until then, reads of the
    /// part not yet written return zeros.
    /// </summary>
    public bool PopulateInBackground { get; set; }

    /// <summary>A name for people (logs, listings); not unique.</summary>
    public string? Name { get; set; }

    /// <summary>How long until the lease must be renewed (the client renews it while the cache is open). Null: the manager's default.</summary>
    public TimeSpan? Lease { get; set; }

    /// <summary>
    /// Open the cache exclusively (<see cref="RemoteCacheOptions.Exclusive"/>): no other client can open it while this
    /// one has it open (what a FASTER device over the cache requires).
    /// </summary>
    public bool Exclusive { get; set; }

    /// <summary>"tcp", "shm" or "verbs"; null: the cheapest one the manager offers that meets the SLO.</summary>
    public string? Transport { get; set; }

    /// <summary>
    /// The idempotency key of this Create (AllocateRequest.request_id, at most
    /// <see cref="RemoteCache.Manager.V1.ContractLimits.MaxRequestIdLength"/> characters). Null: a fresh one per
    /// <c>CreateAsync</c> call, which is enough for its own retries; set one (a UUID) to make a Create that a process
    /// repeats after a crash return the cache it placed before, while that cache lives.
    /// </summary>
    public string? RequestId { get; set; }

    /// <summary>What is wrong with the request, or null.</summary>
    public string? Problem() =>
        Capacity < 1 ? $"has Capacity {Capacity}; it must be at least 1 byte"
        : Slo?.Problem() is { } slo ? $"has an SLO that {slo}"
        : Duration is { } d && d <= TimeSpan.Zero ? $"has Duration {d}; it must be positive"
        : Lease is { } l && l <= TimeSpan.Zero ? $"has Lease {l}; it must be positive"
        : PopulateInBackground && PopulateFrom is null ? "asks to populate in the background but names no PopulateFrom file"
        : PopulateFrom is { } path && !System.IO.File.Exists(path) ? $"has PopulateFrom '{path}', which is not a file"
        : RequestId is { } id && (id.Length == 0 || id.Length > RemoteCache.Manager.V1.ContractLimits.MaxRequestIdLength)
            ? $"has a RequestId of {id.Length} characters; it must have 1 to {RemoteCache.Manager.V1.ContractLimits.MaxRequestIdLength}"
        : null;
}

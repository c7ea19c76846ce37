using System;
using System.Collections.Generic;
using System.Linq;
using System.Security.Claims;
using System.Threading;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.AspNetCore.Authorization;
using Microsoft.Extensions.Hosting;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Services;

/// <summary>The tenants' service: caches of the caller's tenant only.</summary>
[Authorize(Policy = Roles.Tenant)]
public sealed class CacheManagerService : CacheManager.CacheManagerBase
{
    private readonly TenantCalls _tenants;
    private readonly Replacements _replacements;
    private readonly CacheViews _views;
    private readonly EventHub _events;
    private readonly IHostApplicationLifetime _lifetime;
    private readonly ILeadership _leadership;

    public CacheManagerService(TenantCalls tenants, Replacements replacements, CacheViews views, EventHub events, IHostApplicationLifetime lifetime,
                               ILeadership leadership)
    {
        _tenants = tenants;
        _replacements = replacements;
        _views = views;
        _events = events;
        _lifetime = lifetime;
        _leadership = leadership;
    }

    public override Task<AllocateResponse> Allocate(AllocateRequest request, ServerCallContext context) => Guard(async () =>
    {
        string tenant = Tenant(context);
        var clock = ManagerMetrics.Time();
        AllocateSpec spec;
        try
        {
            spec = ToSpec(request);
        }
        catch (RpcException e)
        {
            _tenants.RefusedAllocate(tenant, e.StatusCode.ToString(), e.Status.Detail, clock.Elapsed);
            throw;
        }
        catch (ManagerRefusal e)
        {
            _tenants.RefusedAllocate(tenant, e.Kind.ToString(), e.Message, clock.Elapsed);
            throw;
        }
        var (cache, sequence) = await _tenants.AllocateAsync(tenant, spec, context.CancellationToken).ConfigureAwait(false);
        return new AllocateResponse { Cache = Describe(cache), EventSequence = (ulong)sequence };
    });

    public override Task<ReallocateResponse> Reallocate(ReallocateRequest request, ServerCallContext context) => Guard(async () =>
    {
        // 0: the capacity stays; an unset SLO stays.
        var spec = new ReallocateSpec(request.CacheId, request.Capacity == 0 ? null : WireInput.Capacity(request.Capacity, "capacity"),
                                      request.Slo is null ? null : Protos.ToSpec(request.Slo));
        var (cache, changed, added, removed) = await _tenants.ReallocateAsync(Tenant(context), spec, context.CancellationToken).ConfigureAwait(false);
        var response = new ReallocateResponse { Cache = Describe(cache), ConfigChanged = changed };
        response.Added.AddRange(response.Cache.Servers.Where(s => added.Contains(s.ServerId)));
        response.Removed.AddRange(removed.Select(id => new CacheServer { ServerId = id }));
        return response;
    });

    public override Task<DeallocateResponse> Deallocate(DeallocateRequest request, ServerCallContext context) => Guard(async () =>
    {
        await _tenants.DeallocateAsync(Tenant(context), request.CacheId, context.CancellationToken).ConfigureAwait(false);
        return new DeallocateResponse();
    });

    public override Task<Cache> GetCache(GetCacheRequest request, ServerCallContext context) => Guard(() =>
    {
        var cache = _tenants.Get(Tenant(context), request.CacheId);
        return Task.FromResult(Describe(cache));
    });

    public override Task<ListCachesResponse> ListCaches(ListCachesRequest request, ServerCallContext context) => Guard(() =>
    {
        var response = new ListCachesResponse();
        response.Caches.AddRange(_tenants.List(Tenant(context)).Select(Describe));
        return Task.FromResult(response);
    });

    public override Task<RenewLeaseResponse> RenewLease(RenewLeaseRequest request, ServerCallContext context) => Guard(async () =>
    {
        TimeSpan? extendBy = WireInput.PositiveOrDefault(request.ExtendBy, "extend_by");
        var cache = await _tenants.RenewLeaseAsync(Tenant(context), request.CacheId, extendBy, context.CancellationToken).ConfigureAwait(false);
        var response = new RenewLeaseResponse { Lease = Protos.ToProto(cache, Array.Empty<CacheServer>()).Lease };
        response.Servers.AddRange(_views.ServersOf(cache).Select(Protos.ToProto));
        response.Replacements.AddRange(_views.ReplacementsOf(cache).Select(Protos.ToProto));
        return response;
    });

    public override Task<CacheServer> BeginReplacement(ReplacementRequest request, ServerCallContext context) => Guard(async () =>
    {
        CheckMover(request.Mover);
        var spec = ToSpec(request, request.Slo is null ? null : Protos.ToSpec(request.Slo));
        var (cache, _) = await _replacements.BeginReplacementAsync(Tenant(context), spec, context.CancellationToken).ConfigureAwait(false);
        return Protos.ToProto(_views.ReplacementsOf(cache).First(r => r.Replaces == request.ServerId).Server);
    });

    public override Task<MoveRegionResponse> MoveRegion(MoveRegionRequest request, ServerCallContext context) => Guard(async () =>
    {
        // The copy may take what is left of the call's deadline (none: the pull's default bound).
        TimeSpan? timeout = context.Deadline == DateTime.MaxValue ? null : context.Deadline - DateTime.UtcNow;
        if (timeout <= TimeSpan.Zero)
            throw new RpcException(new Status(StatusCode.DeadlineExceeded, "the call's deadline passed before the copy began"));
        CheckMover(request.Mover);
        var spec = new MoveRegionSpec(request.CacheId, request.ServerId, request.Mover, request.SourceRegion, request.TargetRegion, request.Regions, request.MaxMibPerS);
        var result = await _replacements.MoveRegionAsync(Tenant(context), spec, timeout, context.CancellationToken).ConfigureAwait(false);
        return new MoveRegionResponse { Bytes = (ulong)result.Bytes, Elapsed = Duration.FromTimeSpan(result.Elapsed), OneSided = result.OneSided };
    });

    public override Task<Cache> CompleteReplacement(ReplacementRequest request, ServerCallContext context) => Guard(async () =>
        Describe(await _replacements.CompleteReplacementAsync(Tenant(context), ToSpec(request, null), context.CancellationToken).ConfigureAwait(false)));

    public override Task<Cache> AbandonReplacement(ReplacementRequest request, ServerCallContext context) => Guard(async () =>
        Describe(await _replacements.AbandonReplacementAsync(Tenant(context), ToSpec(request, null), context.CancellationToken).ConfigureAwait(false)));

    public override Task WatchEvents(WatchEventsRequest request, IServerStreamWriter<CacheEvent> responseStream, ServerCallContext context) => Guard(async () =>
    {
        string tenant = Tenant(context);
        // A stopping manager ends its streams (watchers resume from their last sequence with the next manager) instead
        // of holding its shutdown until they go; so does a leader whose term ends (LeaderGateInterceptor says so).
        using var stopping = CancellationTokenSource.CreateLinkedTokenSource(context.CancellationToken, _lifetime.ApplicationStopping, _leadership.Term);
        var token = stopping.Token;
        // Subscribe before reading the backlog, so nothing committed in between is missed; duplicates are skipped by sequence.
        var subscription = _events.Subscribe(request.CacheId);
        try
        {
            long last = 0;
            long from = WireInput.Sequence(request.FromSequence, "from_sequence");
            if (from > 0)
            {
                var (backlog, live) = await _tenants.BacklogAsync(tenant, request.CacheId, from, token).ConfigureAwait(false);
                foreach (var stored in backlog)
                {
                    var e = CacheEvent.Parser.ParseFrom(stored.Payload);
                    await responseStream.WriteAsync(e, token).ConfigureAwait(false);
                    last = stored.Sequence;
                    if (e.KindCase == CacheEvent.KindOneofCase.CacheDeleted)
                        return true;
                }
                if (!live)
                    return true;  // deleted, and its CacheDeleted was before from_sequence: nothing more will come
            }
            else
            {
                _tenants.Get(tenant, request.CacheId);  // NotFound unless it is the tenant's
            }
            await foreach (var stored in subscription.Reader.ReadAllAsync(token).ConfigureAwait(false))
            {
                if (stored.Sequence <= last || stored.Tenant != tenant)
                    continue;
                var e = CacheEvent.Parser.ParseFrom(stored.Payload);
                await responseStream.WriteAsync(e, token).ConfigureAwait(false);
                last = stored.Sequence;
                if (e.KindCase == CacheEvent.KindOneofCase.CacheDeleted)
                    break;
            }
            return true;
        }
        catch (OperationCanceledException) when (_lifetime.ApplicationStopping.IsCancellationRequested && !context.CancellationToken.IsCancellationRequested)
        {
            return true;
        }
        finally
        {
            _events.Unsubscribe(request.CacheId, subscription);
        }
    });

    // The request as the core takes it: its numbers and durations bounded (WireInput), its defaults made explicit, and
    // the request itself as the cache keeps it to tell a retry from another request with the same request_id.
    private static AllocateSpec ToSpec(AllocateRequest request)
    {
        long capacity = WireInput.Capacity(request.Capacity, "capacity");
        int recordSize = WireInput.RecordSize(request.RecordSize, "record_size");
        var slo = Protos.ToSpec(request.Slo).For(recordSize);
        TimeSpan? duration = request.Duration is null ? null : WireInput.Positive(request.Duration, "duration");
        TimeSpan? lease = WireInput.PositiveOrDefault(request.Lease, "lease");
        return new AllocateSpec(capacity, slo, duration, lease, string.IsNullOrEmpty(request.Transport) ? null : request.Transport, request.Name,
                                request.RequestId.Length == 0 ? null : request.RequestId, new SentRequest(AsSent(request), stored => DifferingFields(stored, request)));
    }

    // The request as the cache keeps it for comparing retries: without its request_id, protobuf in base64.
    private static string AsSent(AllocateRequest request)
    {
        var sent = request.Clone();
        sent.RequestId = "";
        return Convert.ToBase64String(sent.ToByteArray());
    }

    // The fields (proto names) in which a retry differs from the request that placed the cache (compared as sent).
    private static List<string> DifferingFields(string? stored, AllocateRequest retry)
    {
        var first = stored is null ? new AllocateRequest() : AllocateRequest.Parser.ParseFrom(Convert.FromBase64String(stored));
        var asked = retry.Clone();
        asked.RequestId = "";
        return AllocateRequest.Descriptor.Fields.InFieldNumberOrder()
                              .Where(f => !Equals(f.Accessor.GetValue(first), f.Accessor.GetValue(asked)))
                              .Select(f => f.Name).ToList();
    }

    private static ReplacementSpec ToSpec(ReplacementRequest request, SloSpec? slo)
    {
        CheckMover(request.Mover);
        return new ReplacementSpec(request.CacheId, request.ServerId, request.Mover, slo, request.LostRegions);
    }

    private static void CheckMover(string mover)
    {
        if (string.IsNullOrEmpty(mover))
            throw new RpcException(new Status(StatusCode.InvalidArgument, $"mover must name the client moving the cache (1 to {ContractLimits.MaxMoverLength} characters)"));
    }

    /// <summary>The cache as the contract describes it: its servers and pending replacements, with capabilities for the current lease.</summary>
    private Cache Describe(CacheRecord cache)
    {
        var proto = Protos.ToProto(cache, _views.ServersOf(cache).Select(Protos.ToProto));
        proto.Replacements.AddRange(_views.ReplacementsOf(cache).Select(Protos.ToProto));
        return proto;
    }

    private static string Tenant(ServerCallContext context) =>
        context.GetHttpContext().User.FindFirstValue(ClaimTypes.Name) ?? throw new RpcException(new Status(StatusCode.Unauthenticated, "no tenant"));

    /// <summary>Runs <paramref name="call"/>, turning the manager's refusals into their gRPC status.</summary>
    internal static async Task<T> Guard<T>(Func<Task<T>> call)
    {
        try
        {
            return await call().ConfigureAwait(false);
        }
        catch (ManagerRefusal e)
        {
            throw ToRpc(e);
        }
        catch (StoreUnavailableException e)
        {
            throw new RpcException(new Status(StatusCode.Unavailable, $"the manager's store is unavailable; nothing was changed unless the message says otherwise: {e.Message}"));
        }
        catch (StoreConflictException e)
        {
            throw new RpcException(new Status(StatusCode.Aborted, e.Message));
        }
    }

    /// <summary>A refusal of the core as the RPC's status: the status of its kind, its message, its tag in the <see cref="Refusals.Trailer"/> trailer.</summary>
    internal static RpcException ToRpc(ManagerRefusal refusal)
    {
        var trailers = new Metadata();
        if (refusal.Tag is not null)
            trailers.Add(Refusals.Trailer, refusal.Tag);
        return new RpcException(new Status(StatusOf(refusal.Kind), refusal.Message), trailers);
    }

    internal static StatusCode StatusOf(RefusalKind kind) => kind switch
    {
        RefusalKind.InvalidArgument => StatusCode.InvalidArgument,
        RefusalKind.NotFound => StatusCode.NotFound,
        RefusalKind.AlreadyExists => StatusCode.AlreadyExists,
        RefusalKind.PermissionDenied => StatusCode.PermissionDenied,
        RefusalKind.ResourceExhausted => StatusCode.ResourceExhausted,
        RefusalKind.FailedPrecondition => StatusCode.FailedPrecondition,
        RefusalKind.Aborted => StatusCode.Aborted,
        RefusalKind.OutOfRange => StatusCode.OutOfRange,
        RefusalKind.DeadlineExceeded => StatusCode.DeadlineExceeded,
        RefusalKind.Unauthenticated => StatusCode.Unauthenticated,
        _ => throw new ArgumentOutOfRangeException(nameof(kind), kind, "a refusal kind without a status"),
    };
}

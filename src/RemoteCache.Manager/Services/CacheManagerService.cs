using System;
using System.Linq;
using System.Security.Claims;
using System.Threading;
using System.Threading.Tasks;
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
        var (cache, sequence) = await _tenants.AllocateAsync(Tenant(context), request, context.CancellationToken).ConfigureAwait(false);
        return new AllocateResponse { Cache = _views.Describe(cache), EventSequence = (ulong)sequence };
    });

    public override Task<ReallocateResponse> Reallocate(ReallocateRequest request, ServerCallContext context) => Guard(async () =>
    {
        var (cache, changed, added, removed) = await _tenants.ReallocateAsync(Tenant(context), request, context.CancellationToken).ConfigureAwait(false);
        var response = new ReallocateResponse { Cache = _views.Describe(cache), ConfigChanged = changed };
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
        return Task.FromResult(_views.Describe(cache));
    });

    public override Task<ListCachesResponse> ListCaches(ListCachesRequest request, ServerCallContext context) => Guard(() =>
    {
        var response = new ListCachesResponse();
        response.Caches.AddRange(_tenants.List(Tenant(context)).Select(_views.Describe));
        return Task.FromResult(response);
    });

    public override Task<RenewLeaseResponse> RenewLease(RenewLeaseRequest request, ServerCallContext context) => Guard(async () =>
    {
        var cache = await _tenants.RenewLeaseAsync(Tenant(context), request.CacheId, request.ExtendBy, context.CancellationToken).ConfigureAwait(false);
        var response = new RenewLeaseResponse { Lease = Protos.ToProto(cache, Array.Empty<CacheServer>()).Lease };
        response.Servers.AddRange(_views.ServersOf(cache));
        response.Replacements.AddRange(_views.ReplacementsOf(cache));
        return response;
    });

    public override Task<CacheServer> BeginReplacement(ReplacementRequest request, ServerCallContext context) => Guard(async () =>
    {
        var (cache, _) = await _replacements.BeginReplacementAsync(Tenant(context), request, context.CancellationToken).ConfigureAwait(false);
        return _views.ReplacementsOf(cache).First(r => r.Replaces == request.ServerId).Server;
    });

    public override Task<MoveRegionResponse> MoveRegion(MoveRegionRequest request, ServerCallContext context) => Guard(async () =>
    {
        // The copy may take what is left of the call's deadline (none: the pull's default bound).
        TimeSpan? timeout = context.Deadline == DateTime.MaxValue ? null : context.Deadline - DateTime.UtcNow;
        if (timeout <= TimeSpan.Zero)
            throw new RpcException(new Status(StatusCode.DeadlineExceeded, "the call's deadline passed before the copy began"));
        var result = await _replacements.MoveRegionAsync(Tenant(context), request, timeout, context.CancellationToken).ConfigureAwait(false);
        return new MoveRegionResponse { Bytes = (ulong)result.Bytes, Elapsed = Duration.FromTimeSpan(result.Elapsed), OneSided = result.OneSided };
    });

    public override Task<Cache> CompleteReplacement(ReplacementRequest request, ServerCallContext context) => Guard(async () =>
        _views.Describe(await _replacements.CompleteReplacementAsync(Tenant(context), request, context.CancellationToken).ConfigureAwait(false)));

    public override Task<Cache> AbandonReplacement(ReplacementRequest request, ServerCallContext context) => Guard(async () =>
        _views.Describe(await _replacements.AbandonReplacementAsync(Tenant(context), request, context.CancellationToken).ConfigureAwait(false)));

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
            long from = Input.Sequence(request.FromSequence, "from_sequence");
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

    private static string Tenant(ServerCallContext context) =>
        context.GetHttpContext().User.FindFirstValue(ClaimTypes.Name) ?? throw new RpcException(new Status(StatusCode.Unauthenticated, "no tenant"));

    /// <summary>Runs <paramref name="call"/>, turning the manager's refusals into their gRPC status.</summary>
    internal static async Task<T> Guard<T>(Func<Task<T>> call)
    {
        try
        {
            return await call().ConfigureAwait(false);
        }
        catch (ManagerException e)
        {
            throw e.ToRpc();
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
}

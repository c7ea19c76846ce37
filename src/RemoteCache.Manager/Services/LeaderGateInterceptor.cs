using System;
using System.Collections.Generic;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Core.Interceptors;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Services;

/// <summary>
/// Lets through to a replica what it may serve: the leader serves every call; a follower serves the reads (GetCache,
/// ListCaches, ListServers) from the state as the store holds it at the call, and refuses the rest UNAVAILABLE with the
/// <see cref="Refusals.NotLeader"/> refusal and the leader's address (<see cref="Refusals.LeaderTrailer"/>), having done
/// nothing, so that clients call the leader instead. A leader that loses its term mid-call refuses the same way.
/// </summary>
public sealed class LeaderGateInterceptor : Interceptor
{
    private static readonly string s_prefix = "/" + CacheManager.Descriptor.File.Package + ".";

    private static readonly HashSet<string> s_reads = new(StringComparer.Ordinal)
    {
        Method(CacheManager.Descriptor.FullName, nameof(CacheManager.CacheManagerBase.GetCache)),
        Method(CacheManager.Descriptor.FullName, nameof(CacheManager.CacheManagerBase.ListCaches)),
        Method(ServerPool.Descriptor.FullName, nameof(ServerPool.ServerPoolBase.ListServers)),
    };

    private readonly ILeadership _leadership;
    private readonly ManagerState _state;

    public LeaderGateInterceptor(ILeadership leadership, ManagerState state)
    {
        _leadership = leadership;
        _state = state;
    }

    public override async Task<TResponse> UnaryServerHandler<TRequest, TResponse>(TRequest request, ServerCallContext context,
                                                                                  UnaryServerMethod<TRequest, TResponse> continuation)
    {
        if (!context.Method.StartsWith(s_prefix, StringComparison.Ordinal))
            return await continuation(request, context).ConfigureAwait(false);  // the health service
        await AdmitAsync(context).ConfigureAwait(false);
        try
        {
            return await continuation(request, context).ConfigureAwait(false);
        }
        catch (StoreFencedException e)
        {
            throw NotLeader(e.Message);
        }
    }

    public override async Task ServerStreamingServerHandler<TRequest, TResponse>(TRequest request, IServerStreamWriter<TResponse> responseStream,
                                                                                ServerCallContext context, ServerStreamingServerMethod<TRequest, TResponse> continuation)
    {
        if (!context.Method.StartsWith(s_prefix, StringComparison.Ordinal))
        {
            await continuation(request, responseStream, context).ConfigureAwait(false);
            return;
        }
        await AdmitAsync(context).ConfigureAwait(false);
        try
        {
            await continuation(request, responseStream, context).ConfigureAwait(false);
        }
        catch (StoreFencedException e)
        {
            throw NotLeader(e.Message);
        }
        catch (OperationCanceledException) when (!context.CancellationToken.IsCancellationRequested && _leadership.Role != ManagerRole.Leader)
        {
            // The stream ended with the term: its watcher resumes on the new leader from its last sequence.
            throw NotLeader("this manager's term as leader ended");
        }
    }

    private async Task AdmitAsync(ServerCallContext context)
    {
        if (_leadership.Role == ManagerRole.Leader)
            return;
        if (!s_reads.Contains(context.Method))
            throw NotLeader("this manager is not the leader; only the leader serves this call");
        try
        {
            await _state.RefreshAsync(context.CancellationToken).ConfigureAwait(false);
        }
        catch (StoreUnavailableException e)
        {
            throw new RpcException(new Status(StatusCode.Unavailable, $"this manager follows the leader and reads the state from its store, which is unavailable: {e.Message}"));
        }
    }

    private RpcException NotLeader(string why)
    {
        string? leader = _leadership.LeaderAddress;
        var trailers = new Metadata { { Refusals.Trailer, Refusals.NotLeader } };
        if (leader is not null)
            trailers.Add(Refusals.LeaderTrailer, leader);
        string where = leader is null
            ? "no leader is known right now (an election takes up to the leadership lease); try another manager or again shortly"
            : $"call the leader at {leader}";
        return new RpcException(new Status(StatusCode.Unavailable, $"{why}: {where}; nothing was done"), trailers);
    }

    private static string Method(string service, string method) => $"/{service}/{method}";
}

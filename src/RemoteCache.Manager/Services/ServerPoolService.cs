using System;
using System.Linq;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.AspNetCore.Authorization;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Store;
using RemoteCache.Manager.V1;
using static RemoteCache.Manager.Services.CacheManagerService;

namespace RemoteCache.Manager.Services;

/// <summary>The operators' service: the pool of servers.</summary>
[Authorize(Policy = Roles.Operator)]
public sealed class ServerPoolService : ServerPool.ServerPoolBase
{
    private static readonly TimeSpan s_defaultNotice = TimeSpan.FromSeconds(30);

    private readonly Pool _pool;
    private readonly Membership _membership;
    private readonly VmCatalogue _catalogue;

    public ServerPoolService(Pool pool, Membership membership, VmCatalogue catalogue)
    {
        _pool = pool;
        _membership = membership;
        _catalogue = catalogue;
    }

    public override Task<ListServersResponse> ListServers(ListServersRequest request, ServerCallContext context)
    {
        var response = new ListServersResponse();
        response.Servers.AddRange(_pool.Servers().Select(ToProto));
        return Task.FromResult(response);
    }

    public override Task<V1.Server> AddServer(AddServerRequest request, ServerCallContext context) => Guard(async () =>
        ToProto(await _pool.AddServerAsync(request.Endpoints, request.VmType, request.Spot, context.CancellationToken).ConfigureAwait(false)));

    public override Task<RemoveServerResponse> RemoveServer(RemoveServerRequest request, ServerCallContext context) => Guard(async () =>
    {
        await _pool.RemoveServerAsync(request.ServerId, context.CancellationToken).ConfigureAwait(false);
        return new RemoveServerResponse();
    });

    public override Task<V1.Server> DrainServer(DrainServerRequest request, ServerCallContext context) => Guard(async () =>
        ToProto(await _pool.DrainServerAsync(request.ServerId, context.CancellationToken).ConfigureAwait(false)));

    public override Task<ReclaimServerResponse> ReclaimServer(ReclaimServerRequest request, ServerCallContext context) => Guard(async () =>
    {
        TimeSpan notice = WireInput.PositiveOr(request.Notice, "notice", s_defaultNotice);
        var deadline = await _pool.ReclaimServerAsync(request.ServerId, notice, context.CancellationToken).ConfigureAwait(false);
        return new ReclaimServerResponse { Deadline = Timestamp.FromDateTimeOffset(deadline) };
    });

    public override Task<IssueJoinTokenResponse> IssueJoinToken(IssueJoinTokenRequest request, ServerCallContext context) => Guard(async () =>
    {
        TimeSpan ttl = WireInput.PositiveOr(request.Ttl, "ttl", Membership.DefaultTokenTtl);
        var (token, text) = await _membership.IssueTokenAsync(ttl, request.Description, context.CancellationToken).ConfigureAwait(false);
        return new IssueJoinTokenResponse { Token = Protos.ToProto(token), Secret = text };
    });

    public override Task<ListJoinTokensResponse> ListJoinTokens(ListJoinTokensRequest request, ServerCallContext context) => Guard(async () =>
    {
        var response = new ListJoinTokensResponse();
        response.Tokens.AddRange((await _membership.TokensAsync(context.CancellationToken).ConfigureAwait(false)).Select(Protos.ToProto));
        return response;
    });

    public override Task<JoinToken> RevokeJoinToken(RevokeJoinTokenRequest request, ServerCallContext context) => Guard(async () =>
        Protos.ToProto(await _membership.RevokeTokenAsync(request.TokenId, context.CancellationToken).ConfigureAwait(false)));

    private V1.Server ToProto(ServerRecord server)
    {
        var proto = Protos.ToProto(server);
        if (_catalogue.Find(server.VmType) is { } type)
        {
            proto.Memory = (ulong)(_catalogue.RegionsOf(type) * _catalogue.RegionBytes);
            proto.Cores = (uint)type.Cores;
        }
        return proto;
    }
}

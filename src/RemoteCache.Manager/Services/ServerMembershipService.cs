using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading.Tasks;
using Google.Protobuf;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.AspNetCore.Authorization;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.V1;
using static RemoteCache.Manager.Services.CacheManagerService;

namespace RemoteCache.Manager.Services;

/// <summary>
/// Servers joining by themselves. No API key: Join is authorized by a join token (checked by <see cref="Membership"/>),
/// Heartbeat by its MAC; the API-key scheme lets these calls through unauthenticated and nothing else.
/// </summary>
[AllowAnonymous]
public sealed class ServerMembershipService : ServerMembership.ServerMembershipBase
{
    private const string Bearer = "Bearer ";

    private readonly Membership _membership;

    public ServerMembershipService(Membership membership) => _membership = membership;

    public override Task<JoinResponse> Join(JoinRequest request, ServerCallContext context) => Guard(async () =>
    {
        string? header = context.RequestHeaders.GetValue("authorization");
        string? token = header is not null && header.StartsWith(Bearer, StringComparison.OrdinalIgnoreCase) ? header[Bearer.Length..].Trim() : header;
        if (request.Memory > long.MaxValue || request.RegionBytes > long.MaxValue)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"memory {request.Memory} or region_bytes {request.RegionBytes} is beyond any server");
        var spec = new JoinSpec(request.Name, request.VmType, request.Labels, (int)Math.Min(request.Cores, int.MaxValue), (long)request.Memory, (long)request.RegionBytes, request.Spot);
        var grant = await _membership.JoinAsync(token, spec, context.Peer, context.CancellationToken).ConfigureAwait(false);
        return new JoinResponse
        {
            ServerId = grant.ServerId, AdmissionKey = ByteString.CopyFrom(grant.AdmissionKey), VmType = grant.VmType,
            HeartbeatInterval = Duration.FromTimeSpan(grant.HeartbeatInterval), HeartbeatTtl = Duration.FromTimeSpan(grant.HeartbeatTtl),
        };
    });

    public override Task<HeartbeatResponse> Heartbeat(HeartbeatRequest request, ServerCallContext context) => Guard(async () =>
    {
        var (server, left) = await _membership.HeartbeatAsync(request.ServerId, request.Body.Memory, request.Mac.Memory, Parse, context.Peer, context.CancellationToken)
                                              .ConfigureAwait(false);
        return new HeartbeatResponse { State = (ServerState)(int)server.Status, CacheId = server.CacheId, Left = left };
    });

    private static HeartbeatReport Parse(ReadOnlyMemory<byte> bytes)
    {
        HeartbeatBody body;
        try
        {
            body = HeartbeatBody.Parser.ParseFrom(bytes.Span);
        }
        catch (InvalidProtocolBufferException e)
        {
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the heartbeat's body is not a HeartbeatBody: {e.Message}");
        }
        if (body.Sent is null)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, "the heartbeat's body has no sent time");
        if (body.Endpoints.Count > 8)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the heartbeat names {body.Endpoints.Count} endpoints; at most 8");
        foreach (var (transport, endpoint) in body.Endpoints)
            if (transport.Length > 16 || endpoint.Length > 128)
                throw new ManagerRefusal(RefusalKind.InvalidArgument, $"endpoint {Input.Quote(transport)} = {Input.Quote(endpoint)}: a transport has at most 16 characters, an endpoint 128");
        DateTimeOffset sent;
        try
        {
            sent = body.Sent.ToDateTimeOffset();
        }
        catch (InvalidOperationException e)
        {
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the heartbeat's sent time is not a time: {e.Message}");
        }
        if (body.Dropped.Count > 16)
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the heartbeat names {body.Dropped.Count} dropped caches; at most 16");
        DateTimeOffset? by = null;
        try
        {
            by = body.GiveBackBy?.ToDateTimeOffset();
        }
        catch (InvalidOperationException e)
        {
            throw new ManagerRefusal(RefusalKind.InvalidArgument, $"the heartbeat's give_back_by is not a time: {e.Message}");
        }
        return new HeartbeatReport(body.Sequence, sent, new Dictionary<string, string>(body.Endpoints), (long)Math.Min(body.MemoryLimit, long.MaxValue),
                                   (long)Math.Min(body.MemoryLent, long.MaxValue))
        {
            GiveBack = (long)Math.Min(body.GiveBack, long.MaxValue), GiveBackBy = by, Dropped = body.Dropped.ToList(), Leaving = body.Leaving,
        };
    }
}

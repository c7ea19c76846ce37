using System;
using System.Collections.Concurrent;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Net.Client;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// A stand-in for one replica of a replicated manager, served by Kestrel on 127.0.0.1 in the test process. Without a
/// <see cref="Target"/> it refuses every call as a follower does (UNAVAILABLE, <c>remotecache-refusal: not-leader</c>,
/// <c>remotecache-leader</c> naming <see cref="Leader"/> if set). With one it forwards every call to that real manager
/// (the caller's API key included), like a leader: then <see cref="CutWatchAfter"/> ends a forwarded event stream after
/// that many events with the refusal of a leader deposed, and <see cref="LoseAnswers"/> carries calls out but answers
/// UNAVAILABLE (the answer lost with the connection). <see cref="KillAsync"/> takes it away.
/// </summary>
public sealed class FakeReplica : IAsyncDisposable
{
    private readonly CancellationTokenSource _killed = new();
    private WebApplication? _app;
    private GrpcChannel? _targetChannel;
    private TestManager? _target;
    private int _calls;

    private FakeReplica()
    {
    }

    public Uri Address { get; private set; } = null!;

    /// <summary>The leader a refusal names (null: none known).</summary>
    public Uri? Leader { get; set; }

    /// <summary>The manager calls are forwarded to (null: every call refused as not the leader).</summary>
    public TestManager? Target
    {
        get => _target;
        set
        {
            _target = value;
            _targetChannel?.Dispose();
            _targetChannel = value is null ? null : GrpcChannel.ForAddress(value.Address!);
        }
    }

    public int CutWatchAfter { get; set; } = int.MaxValue;

    public bool LoseAnswers { get; set; }

    /// <summary>
    /// How many of the next forwarded unary calls are refused ABORTED (the manager's store conflict: nothing done) without
    /// reaching the target.
    /// </summary>
    public int AbortNext;

    /// <summary>Calls received, stream openings included.</summary>
    public int Calls => Volatile.Read(ref _calls);

    /// <summary>The methods called, in order (e.g. "Allocate").</summary>
    public ConcurrentQueue<string> Received { get; } = new();

    /// <summary>The from_sequence of each WatchEvents received.</summary>
    public ConcurrentQueue<ulong> WatchedFrom { get; } = new();

    /// <summary>Events forwarded on event streams.</summary>
    public int EventsForwarded;

    /// <param name="port">Where it listens (0: a port the system picks).</param>
    public static async Task<FakeReplica> StartAsync(Uri? leader = null, TestManager? target = null, int port = 0)
    {
        var replica = new FakeReplica { Leader = leader, Target = target };
        var builder = WebApplication.CreateSlimBuilder();
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        builder.WebHost.ConfigureKestrel(k => k.Listen(IPAddress.Loopback, port, l => l.Protocols = HttpProtocols.Http2));
        builder.Services.AddGrpc();
        builder.Services.AddSingleton(replica);
        // A replica killed does not wait for its streams: they are cut (KillAsync cancels the forwards first).
        builder.Services.Configure<HostOptions>(o => o.ShutdownTimeout = TimeSpan.FromSeconds(1));
        replica._app = builder.Build();
        replica._app.MapGrpcService<Service>();
        await replica._app.StartAsync();
        replica.Address = Program.ListenAddress(replica._app);
        return replica;
    }

    /// <summary>An address where nothing listens (a port that was free a moment ago).</summary>
    public static Uri DeadAddress()
    {
        var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        int port = ((IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        return new Uri($"http://127.0.0.1:{port}");
    }

    /// <summary>Cuts the forwarded calls and stops listening, as a replica whose process died.</summary>
    public async Task KillAsync()
    {
        _killed.Cancel();
        if (_app is { } app)
        {
            _app = null;
            await app.StopAsync();
            await app.DisposeAsync();
        }
    }

    public async ValueTask DisposeAsync()
    {
        await KillAsync();
        _targetChannel?.Dispose();
    }

    private RpcException NotLeader()
    {
        var trailers = new Metadata { { Refusals.Trailer, Refusals.NotLeader } };
        if (Leader is { } leader)
            trailers.Add(Refusals.LeaderTrailer, leader.ToString());
        return new RpcException(new Status(StatusCode.Unavailable, "this replica is not the leader (test)"), trailers);
    }

    private static RpcException Gone() => new(new Status(StatusCode.Unavailable, "the replica went away (test)"));

    // Counts the call; the target's client and call options carrying the caller's key and deadline, or a refusal.
    private (CacheManager.CacheManagerClient Client, CallOptions Options) Begin(ServerCallContext context, CancellationToken token)
    {
        Interlocked.Increment(ref _calls);
        Received.Enqueue(context.Method.Split('/').Last());
        if (_targetChannel is not { } channel)
            throw NotLeader();
        var headers = new Metadata();
        if (context.RequestHeaders.GetValue("authorization") is { } key)
            headers.Add("authorization", key);
        return (new CacheManager.CacheManagerClient(channel), new CallOptions(headers, context.Deadline, token));
    }

    private async Task<T> ForwardAsync<T>(ServerCallContext context, Func<CacheManager.CacheManagerClient, CallOptions, AsyncUnaryCall<T>> call)
    {
        using var token = CancellationTokenSource.CreateLinkedTokenSource(context.CancellationToken, _killed.Token);
        var (client, options) = Begin(context, token.Token);
        if (Interlocked.Decrement(ref AbortNext) >= 0)
            throw new RpcException(new Status(StatusCode.Aborted, "the state changed since it was read (another manager wrote it); the change was not made (test)"));
        T answer;
        try
        {
            answer = await call(client, options);
        }
        catch (RpcException) when (_killed.IsCancellationRequested)
        {
            throw Gone();
        }
        if (LoseAnswers)
            throw new RpcException(new Status(StatusCode.Unavailable, "the connection was reset (test)"));
        return answer;
    }

    private async Task WatchAsync(WatchEventsRequest request, IServerStreamWriter<CacheEvent> writer, ServerCallContext context)
    {
        using var token = CancellationTokenSource.CreateLinkedTokenSource(context.CancellationToken, _killed.Token);
        WatchedFrom.Enqueue(request.FromSequence);
        var (client, options) = Begin(context, token.Token);
        try
        {
            using var call = client.WatchEvents(request, options);
            int sent = 0;
            while (await call.ResponseStream.MoveNext(token.Token))
            {
                await writer.WriteAsync(call.ResponseStream.Current, token.Token);
                Interlocked.Increment(ref EventsForwarded);
                if (++sent == CutWatchAfter)
                    throw NotLeader();  // deposed: the open stream ends with the refusal
            }
        }
        catch (Exception e) when (e is RpcException or OperationCanceledException && _killed.IsCancellationRequested)
        {
            throw Gone();
        }
    }

    // The replica's CacheManager service: every call forwarded or refused.
    private sealed class Service : CacheManager.CacheManagerBase
    {
        private readonly FakeReplica _replica;

        public Service(FakeReplica replica) => _replica = replica;

        public override Task<AllocateResponse> Allocate(AllocateRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.AllocateAsync(request, o));

        public override Task<ReallocateResponse> Reallocate(ReallocateRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.ReallocateAsync(request, o));

        public override Task<DeallocateResponse> Deallocate(DeallocateRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.DeallocateAsync(request, o));

        public override Task<Cache> GetCache(GetCacheRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.GetCacheAsync(request, o));

        public override Task<ListCachesResponse> ListCaches(ListCachesRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.ListCachesAsync(request, o));

        public override Task<RenewLeaseResponse> RenewLease(RenewLeaseRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.RenewLeaseAsync(request, o));

        public override Task WatchEvents(WatchEventsRequest request, IServerStreamWriter<CacheEvent> responseStream, ServerCallContext context) =>
            _replica.WatchAsync(request, responseStream, context);

        public override Task<CacheServer> BeginReplacement(ReplacementRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.BeginReplacementAsync(request, o));

        public override Task<MoveRegionResponse> MoveRegion(MoveRegionRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.MoveRegionAsync(request, o));

        public override Task<Cache> CompleteReplacement(ReplacementRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.CompleteReplacementAsync(request, o));

        public override Task<Cache> AbandonReplacement(ReplacementRequest request, ServerCallContext context) =>
            _replica.ForwardAsync(context, (c, o) => c.AbandonReplacementAsync(request, o));
    }
}

using System;
using System.Diagnostics;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Etcdserverpb;
using Google.Protobuf;
using Grpc.Core;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Cluster;

/// <summary>
/// The election among the managers that share an etcd prefix. Each holds an etcd lease it keeps alive; the leader is the
/// one whose record is the leader key (<c>meta/leader</c>, written with its lease if no other is there), so when the
/// leader dies its lease ends, etcd deletes its key, and a follower (each tries every <see cref="Poll"/>) takes the key
/// and the lead. Every change the leader commits compares that key's create revision (<see cref="EtcdManagerStore.Fence"/>):
/// a deposed leader commits nothing. A leader that has had no keep-alive answered for three quarters of its lease steps
/// down before etcd could end the lease and let another take over, so it never runs duties beside a successor.
/// </summary>
public sealed class EtcdLeadership : BackgroundService, ILeadership
{
    /// <summary>How often a follower looks for the leader (and tries to become it when there is none).</summary>
    public static readonly TimeSpan Poll = TimeSpan.FromMilliseconds(100);

    // Keep-alives per lease period: a lost one or two do not end the lease.
    private const int KeepAlivesPerLease = 5;

    // The share of the lease after its last answered keep-alive at which a leader steps down; the rest is the margin
    // for its own work in flight and for the clocks' rates.
    private const double StepDownShare = 0.75;

    // The share of the lease after its last answered keep-alive within which a leader is sure it still leads without
    // asking etcd: its key lives with its lease, which no other manager can end, and which etcd ends no sooner than a TTL
    // after that keep-alive was sent.
    private const double ConfirmedShare = 0.5;

    private readonly EtcdManagerStore _store;
    private readonly Func<string?> _address;
    private readonly string _allocator;
    private readonly TimeSpan _leaseAsked;
    private readonly ILogger<EtcdLeadership> _logger;
    private readonly object _gate = new();

    // The lease (0: none yet, or it ended), its TTL as granted, and when the last keep-alive that etcd answered was sent
    // (Stopwatch ticks): the lease lives at least until then plus its TTL.
    private long _lease;
    private TimeSpan _ttl;
    private long _answeredSentAt;

    // The term (null: not elected), whether it serves (the state is taken over), and the leader as last seen.
    private CancellationTokenSource? _term;
    private bool _serving;
    private TaskCompletionSource<CancellationToken> _elected = NewElection();
    private long _leaderRevision;
    private string? _leaderAddress;
    private long _leaderSeenAt;

    // Set when the manager begins to stop: it campaigns no more, and its resignation (one) is under way.
    private bool _stopping;
    private Task? _resigned;

    /// <param name="address">The address this manager advertises to clients (null until it is known: it listens on a port the system picks).</param>
    /// <param name="allocator">This manager's allocator: replicas need a shared pool, so a local one leads alone.</param>
    /// <param name="lifetime">The host's: when it begins to stop, the leader resigns at once, before the server drains its calls.</param>
    public EtcdLeadership(EtcdManagerStore store, Func<string?> address, string allocator, TimeSpan lease, ILogger<EtcdLeadership> logger,
                          IHostApplicationLifetime? lifetime = null)
    {
        _store = store;
        _address = address;
        _allocator = allocator;
        _leaseAsked = lease;
        _logger = logger;
        store.Fence(null);  // from now on only a term commits
        lifetime?.ApplicationStopping.Register(() => _ = ResignAsync());
    }

    /// <summary>The leader's record in etcd.</summary>
    internal sealed record LeaderRecord(string Address, long Lease, string Allocator);

    public ManagerRole Role
    {
        get
        {
            lock (_gate)
            {
                if (_serving)
                    return ManagerRole.Leader;
                return LeaderAddressLocked() is null || _term is not null ? ManagerRole.NoLeader : ManagerRole.Follower;
            }
        }
    }

    public string? LeaderAddress
    {
        get
        {
            lock (_gate)
                return _serving ? _address() : LeaderAddressLocked();
        }
    }

    // The leader as last seen, if seen within a lease period (an older sighting is no knowledge).
    private string? LeaderAddressLocked() =>
        _leaderAddress is not null && Stopwatch.GetElapsedTime(_leaderSeenAt) < _leaseAsked ? _leaderAddress : null;

    public CancellationToken Term
    {
        get
        {
            lock (_gate)
                return _serving && _term is not null ? _term.Token : new CancellationToken(canceled: true);
        }
    }

    public Task<CancellationToken> ElectedAsync(CancellationToken cancellationToken)
    {
        lock (_gate)
            return _elected.Task.WaitAsync(cancellationToken);
    }

    public void Serve(CancellationToken term)
    {
        lock (_gate)
        {
            if (_term is null || _term.Token != term)
                return;
            _serving = true;
        }
        _logger.LogInformation("Leading the managers on etcd {Endpoints} as {Address}", _store.Endpoints, _address());
    }

    public void StepDown(string reason) => EndTerm(reason);

    // By the lease when it is fresh (no round trip: the drop of a Deallocate is taken under the state lock); a key deleted
    // by hand is the exception, which the leader's own check of its key (CheckKeyAsync, every poll) finds within a poll.
    public Task<bool> ConfirmAsync(CancellationToken cancellationToken)
    {
        lock (_gate)
        {
            if (_term is null)
                return Task.FromResult(false);
            if (Stopwatch.GetElapsedTime(_answeredSentAt) < _ttl * ConfirmedShare)
                return Task.FromResult(true);
        }
        return CheckKeyAsync(cancellationToken);
    }

    // Whether the leader key is still this term's, read from etcd; the term ends if it is not.
    private async Task<bool> CheckKeyAsync(CancellationToken cancellationToken)
    {
        long revision;
        lock (_gate)
        {
            if (_term is null)
                return false;
            revision = _leaderRevision;
        }
        RangeResponse response;
        try
        {
            response = await _store.Client.GetAsync(new RangeRequest { Key = _store.KeyOf(EtcdManagerStore.LeaderKey) }, null,
                                                    DateTime.UtcNow + EtcdManagerStore.CallTimeout, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RpcException or OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            return false;  // unconfirmed: the watchdog decides whether the term ends
        }
        if (response.Kvs.Count == 1 && response.Kvs[0].CreateRevision == revision)
            return true;
        lock (_gate)
        {
            if (_leaderRevision != revision)
                return false;  // a later term already
        }
        EndTerm("its leader key in etcd was deleted or is another's");
        return false;
    }

    /// <summary>
    /// Refuses to join when replicas would share this prefix with a local allocator (its servers are processes of one
    /// host, which no other manager could reach or recover): a manager with the local allocator starts only where no
    /// other leads, and no manager starts where one with the local allocator leads.
    /// </summary>
    /// <exception cref="InvalidOperationException">Why it may not join.</exception>
    public async Task CheckJoinAsync(CancellationToken cancellationToken)
    {
        // A leader that died (this manager's own last run, say) holds its key until its lease ends: that one is waited out.
        var until = Stopwatch.GetTimestamp() + (long)((_leaseAsked + Poll).TotalSeconds * Stopwatch.Frequency);
        while (true)
        {
            var response = await _store.Client.GetAsync(new RangeRequest { Key = _store.KeyOf(EtcdManagerStore.LeaderKey) }, null,
                                                         DateTime.UtcNow + EtcdManagerStore.CallTimeout, cancellationToken).ConfigureAwait(false);
            if (response.Kvs.Count == 0)
                return;
            var leader = Parse(response.Kvs[0].Value);
            if (leader.Allocator != LocalAllocator && _allocator != LocalAllocator)
                return;
            if (Stopwatch.GetTimestamp() >= until)
                throw new InvalidOperationException(leader.Allocator == LocalAllocator
                    ? $"the manager at {leader.Address} leads on this etcd prefix with the local allocator, a single-manager mode: replicas need --allocator static"
                    : $"the manager at {leader.Address} leads on this etcd prefix: the local allocator is a single-manager mode, replicas need --allocator static");
            await Task.Delay(Poll, cancellationToken).ConfigureAwait(false);
        }
    }

    private const string LocalAllocator = Allocators.LocalProcessAllocator.AllocatorName;

    protected override Task ExecuteAsync(CancellationToken stoppingToken) =>
        Task.WhenAll(Loop(KeepAliveAsync, _leaseAsked / KeepAlivesPerLease, stoppingToken),
                     Loop(CampaignAsync, Poll, stoppingToken),
                     Loop(WatchdogAsync, Poll / 2, stoppingToken));

    public override async Task StopAsync(CancellationToken cancellationToken)
    {
        await base.StopAsync(cancellationToken).ConfigureAwait(false);
        await ResignAsync().ConfigureAwait(false);
        long lease;
        lock (_gate)
            lease = _lease;
        try
        {
            if (lease != 0)
                await _store.Client.LeaseRevokeAsync(new LeaseRevokeRequest { ID = lease }, null, DateTime.UtcNow + TimeSpan.FromSeconds(1), cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RpcException or OperationCanceledException)
        {
            _logger.LogWarning("Could not revoke the etcd lease ({Reason}); it ends with its TTL", e.Message);
        }
    }

    // Once, when the manager begins to stop: it campaigns no more and, leading, hands the lead over at once (a follower
    // takes it within a poll) rather than when its lease ends. Calls still in flight here are refused as a follower's
    // (the store fences their commits), so their clients go to the new leader.
    private Task ResignAsync()
    {
        lock (_gate)
        {
            _stopping = true;
            return _resigned ??= ResignCoreAsync();
        }
    }

    private async Task ResignCoreAsync()
    {
        await Task.Yield();  // not under the gate, nor on the host's stopping thread
        long revision;
        lock (_gate)
            revision = _term is null ? 0 : _leaderRevision;
        EndTerm("the manager is stopping");
        if (revision == 0)
            return;
        try
        {
            var key = _store.KeyOf(EtcdManagerStore.LeaderKey);
            var resign = new TxnRequest();
            resign.Compare.Add(new Compare { Key = key, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = revision });
            resign.Success.Add(new RequestOp { RequestDeleteRange = new DeleteRangeRequest { Key = key } });
            await _store.Client.TransactionAsync(resign, null, DateTime.UtcNow + TimeSpan.FromSeconds(1)).ConfigureAwait(false);
        }
        catch (Exception e) when (e is RpcException or OperationCanceledException)
        {
            _logger.LogWarning("Could not resign the lead ({Reason}); another manager takes it when this one's lease ends", e.Message);
        }
    }

    // Grants the lease, then keeps it alive; a lease that etcd ended (TTL 0) ends the term and a new one is granted.
    private async Task KeepAliveAsync(CancellationToken stoppingToken)
    {
        long lease;
        lock (_gate)
            lease = _lease;
        long sent = Stopwatch.GetTimestamp();
        using var call = CancellationTokenSource.CreateLinkedTokenSource(stoppingToken);
        call.CancelAfter(_leaseAsked / KeepAlivesPerLease * 2);
        if (lease == 0)
        {
            var granted = await _store.Client.LeaseGrantAsync(new LeaseGrantRequest { TTL = (long)Math.Ceiling(_leaseAsked.TotalSeconds) }, null,
                                                              DateTime.UtcNow + EtcdManagerStore.CallTimeout, call.Token).ConfigureAwait(false);
            lock (_gate)
                (_lease, _ttl, _answeredSentAt) = (granted.ID, TimeSpan.FromSeconds(granted.TTL), sent);
            return;
        }
        long ttl = -1;
        await _store.Client.LeaseKeepAlive(new LeaseKeepAliveRequest { ID = lease }, r => ttl = r.TTL, call.Token, null).ConfigureAwait(false);
        if (ttl > 0)
        {
            lock (_gate)
                (_ttl, _answeredSentAt) = (TimeSpan.FromSeconds(ttl), sent);
            return;
        }
        if (ttl == 0)
        {
            lock (_gate)
                _lease = 0;
            EndTerm("its etcd lease ended");
        }
    }

    // A leader whose lease may be about to end steps down; it leads again if its lease lives on after all.
    private Task WatchdogAsync(CancellationToken stoppingToken)
    {
        TimeSpan silent;
        lock (_gate)
        {
            if (_term is null)
                return Task.CompletedTask;
            silent = Stopwatch.GetElapsedTime(_answeredSentAt);
            if (silent < _ttl * StepDownShare)
                return Task.CompletedTask;
        }
        EndTerm($"no keep-alive of its etcd lease answered for {silent.TotalSeconds:0.0} s (the lease is {_ttl.TotalSeconds:0} s)");
        return Task.CompletedTask;
    }

    // Takes the leader key if nobody holds it (or takes it back: it is this manager's own, from a term that ended while
    // its lease lived on); otherwise notes who leads.
    private async Task CampaignAsync(CancellationToken stoppingToken)
    {
        long lease;
        bool fresh;
        lock (_gate)
        {
            if (_term is not null)
            {
                // A leader checks that the key is still its own (one deleted by hand, say): if not, it steps down within a poll.
                _ = CheckKeyAsync(stoppingToken);
                return;
            }
            lease = _lease;
            fresh = lease != 0 && !_stopping && Stopwatch.GetElapsedTime(_answeredSentAt) < _ttl * StepDownShare;
        }
        // It looks first (a read, which etcd answers without a write to its log), and campaigns only when nobody leads.
        var key = _store.KeyOf(EtcdManagerStore.LeaderKey);
        var deadline = DateTime.UtcNow + EtcdManagerStore.CallTimeout;
        var held = (await _store.Client.GetAsync(new RangeRequest { Key = key }, null, deadline, stoppingToken).ConfigureAwait(false)).Kvs;
        if (held.Count == 0 && fresh && _address() is { } advertised)
        {
            var txn = new TxnRequest();
            txn.Compare.Add(new Compare { Key = key, Target = Compare.Types.CompareTarget.Create, Result = Compare.Types.CompareResult.Equal, CreateRevision = 0 });
            txn.Success.Add(new RequestOp
            {
                RequestPut = new PutRequest
                {
                    Key = key, Lease = lease,
                    Value = ByteString.CopyFrom(JsonSerializer.SerializeToUtf8Bytes(new LeaderRecord(advertised, lease, _allocator), RecordJson.Options)),
                },
            });
            txn.Failure.Add(new RequestOp { RequestRange = new RangeRequest { Key = key } });
            var response = await _store.Client.TransactionAsync(txn, null, deadline, stoppingToken).ConfigureAwait(false);
            if (response.Succeeded)
            {
                Elected(response.Header.Revision, lease);
                return;
            }
            held = response.Responses[0].ResponseRange.Kvs;  // another took it first
        }
        if (held.Count == 0)
        {
            // Nobody leads (this one could not campaign): clients are not sent to a leader that is gone.
            lock (_gate)
                _leaderAddress = null;
            return;
        }
        var leader = Parse(held[0].Value);
        if (fresh && leader.Lease == lease)
        {
            Elected(held[0].CreateRevision, lease);
            return;
        }
        lock (_gate)
        {
            if (_leaderAddress != leader.Address)
                _logger.LogInformation("Following the leader at {Address}", leader.Address);
            (_leaderAddress, _leaderSeenAt) = (leader.Address, Stopwatch.GetTimestamp());
        }
    }

    private void Elected(long revision, long lease)
    {
        lock (_gate)
        {
            if (_term is not null || _lease != lease)
                return;
            _leaderRevision = revision;
            _store.Fence(revision);
            _term = new CancellationTokenSource();
            _leaderAddress = null;
            _elected.TrySetResult(_term.Token);
        }
        _logger.LogInformation("Elected leader of the managers on etcd {Endpoints} (lease {Lease:x}); taking the state over", _store.Endpoints, lease);
    }

    private void EndTerm(string reason)
    {
        CancellationTokenSource? term;
        lock (_gate)
        {
            term = _term;
            if (term is null)
                return;
            _term = null;
            _serving = false;
            _store.Fence(null);
            _elected = NewElection();
        }
        _logger.LogWarning("Stepped down as leader: {Reason}", reason);
        // Not disposed: tokens of the term may still be linked to by calls that started in it.
        term.Cancel();
    }

    private async Task Loop(Func<CancellationToken, Task> step, TimeSpan period, CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(period);
        string? lastProblem = null;
        try
        {
            do
            {
                try
                {
                    await step(stoppingToken).ConfigureAwait(false);
                }
                catch (Exception e) when (e is RpcException or OperationCanceledException or JsonException && !stoppingToken.IsCancellationRequested)
                {
                    // etcd unreachable: the watchdog steps a leader down in time; the problem is logged once, not every poll.
                    string problem = e is RpcException rpc ? $"{rpc.StatusCode} {rpc.Status.Detail}" : e.Message;
                    if (problem != lastProblem)
                        _logger.LogWarning("etcd {Endpoints}: {Problem}", _store.Endpoints, problem);
                    lastProblem = problem;
                    continue;
                }
                lastProblem = null;
            }
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false));
        }
        catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
        {
        }
    }

    private static LeaderRecord Parse(ByteString value) =>
        JsonSerializer.Deserialize<LeaderRecord>(value.Span, RecordJson.Options) ?? throw new JsonException("the leader key holds null");

    private static TaskCompletionSource<CancellationToken> NewElection() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}

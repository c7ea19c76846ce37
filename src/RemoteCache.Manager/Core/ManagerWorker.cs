using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The leader's clockwork: in each term of this manager as leader, takes the state over, then probes every server each
/// probe period, ends and warns leases, retires reclaimed servers and fails joined servers whose heartbeats stopped every
/// quarter second, and compacts the event log and forgets ended join tokens every minute, until the term ends.
/// A follower runs none of it.
/// </summary>
public sealed class ManagerWorker : BackgroundService
{
    private static readonly TimeSpan s_tick = TimeSpan.FromMilliseconds(250);

    private readonly Duties _duties;
    private readonly TenantCalls _calls;
    private readonly Pool _pool;
    private readonly Membership _membership;
    private readonly ILeadership _leadership;
    private readonly ManagerOptions _options;
    private readonly ILogger<ManagerWorker> _logger;

    public ManagerWorker(Duties duties, Pool pool, Membership membership, TenantCalls calls, ILeadership leadership, IOptions<ManagerOptions> options, ILogger<ManagerWorker> logger)
    {
        _calls = calls;
        _duties = duties;
        _pool = pool;
        _membership = membership;
        _leadership = leadership;
        _options = options.Value;
        _logger = logger;
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        try
        {
            await WarmAsync(stoppingToken).ConfigureAwait(false);
            while (true)
            {
                stoppingToken.ThrowIfCancellationRequested();  // a term that outlives the stop is not served again
                var term = await _leadership.ElectedAsync(stoppingToken).ConfigureAwait(false);
                using var duty = CancellationTokenSource.CreateLinkedTokenSource(term, stoppingToken);
                if (_leadership.Role != ManagerRole.Leader && !await TakeOverAsync(term, duty.Token).ConfigureAwait(false))
                    continue;
                await Task.WhenAll(Loop(_options.ProbePeriod, _pool.ProbeAllAsync, "probing servers", duty.Token),
                                   Loop(s_tick, _duties.TickAsync, "leases and reclaims", duty.Token),
                                   Loop(s_tick, _membership.ExpireAsync, "heartbeats", duty.Token),
                                   Loop(Duties.CompactionPeriod, _membership.ForgetEndedTokensAsync, "forgetting ended join tokens", duty.Token),
                                   Loop(Duties.CompactionPeriod, _duties.CompactEventsAsync, "compacting the event log", duty.Token)).ConfigureAwait(false);
            }
        }
        catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
        {
        }
    }

    // Before the first election: what a leader runs first is compiled while nobody waits for it.
    private async Task WarmAsync(CancellationToken stoppingToken)
    {
        try
        {
            await _calls.WarmAsync(stoppingToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is not OperationCanceledException)
        {
            _logger.LogWarning("Warming the write path failed ({Reason}); the first Allocate compiles it", e.Message);
        }
    }

    // The state as the store holds it becomes this leader's; a takeover that fails ends the term (it is tried again if
    // this manager is elected again).
    private async Task<bool> TakeOverAsync(CancellationToken term, CancellationToken duty)
    {
        try
        {
            await _duties.TakeOverAsync(duty).ConfigureAwait(false);
            _leadership.Serve(term);
            return true;
        }
        catch (Exception e) when (!duty.IsCancellationRequested || term.IsCancellationRequested)
        {
            if (e is not (StoreUnavailableException or StoreConflictException or StoreFencedException or OperationCanceledException))
                _logger.LogError(e, "Taking the state over failed");
            _leadership.StepDown($"it could not take the state over: {e.Message}");
            return false;
        }
    }

    private async Task Loop(TimeSpan period, Func<CancellationToken, Task> step, string what, CancellationToken duty)
    {
        using var timer = new PeriodicTimer(period);
        try
        {
            do
            {
                try
                {
                    await step(duty).ConfigureAwait(false);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    _logger.LogError(e, "Failed {What}; trying again in {Period}", what, period);
                }
            }
            while (await timer.WaitForNextTickAsync(duty).ConfigureAwait(false));
        }
        catch (OperationCanceledException) when (duty.IsCancellationRequested)
        {
        }
    }
}

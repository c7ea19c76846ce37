using System;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace RemoteCache.Manager.Core;

/// <summary>
/// The manager's clockwork: probes every server each probe period; ends and warns leases and retires reclaimed servers
/// every quarter second; compacts the event log every minute.
/// </summary>
public sealed class ManagerWorker : BackgroundService
{
    private static readonly TimeSpan s_tick = TimeSpan.FromMilliseconds(250);

    private readonly ManagerCore _core;
    private readonly ManagerOptions _options;
    private readonly ILogger<ManagerWorker> _logger;

    public ManagerWorker(ManagerCore core, IOptions<ManagerOptions> options, ILogger<ManagerWorker> logger)
    {
        _core = core;
        _options = options.Value;
        _logger = logger;
    }

    protected override Task ExecuteAsync(CancellationToken stoppingToken) =>
        Task.WhenAll(Loop(_options.ProbePeriod, _core.ProbeAllAsync, "probing servers", stoppingToken),
                     Loop(s_tick, _core.TickAsync, "leases and reclaims", stoppingToken),
                     Loop(ManagerCore.CompactionPeriod, _core.CompactEventsAsync, "compacting the event log", stoppingToken));

    private async Task Loop(TimeSpan period, Func<CancellationToken, Task> step, string what, CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(period);
        try
        {
            do
            {
                try
                {
                    await step(stoppingToken).ConfigureAwait(false);
                }
                catch (Exception e) when (e is not OperationCanceledException)
                {
                    _logger.LogError(e, "Failed {What}; trying again in {Period}", what, period);
                }
            }
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false));
        }
        catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
        {
        }
    }
}

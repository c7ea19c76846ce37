using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Cluster;

/// <summary>One manager on its own store (SQLite): it leads from its start to its end, in one term that never ends.</summary>
public sealed class SoleLeadership : ILeadership
{
    private int _elected;
    private bool _serving;

    public ManagerRole Role => Volatile.Read(ref _serving) ? ManagerRole.Leader : ManagerRole.NoLeader;

    public string? LeaderAddress => null;

    public CancellationToken Term => Volatile.Read(ref _serving) ? CancellationToken.None : new CancellationToken(canceled: true);

    public async Task<CancellationToken> ElectedAsync(CancellationToken cancellationToken)
    {
        if (Interlocked.Exchange(ref _elected, 1) == 1)
            await Task.Delay(Timeout.Infinite, cancellationToken).ConfigureAwait(false);  // its one term never ends
        return CancellationToken.None;
    }

    public void Serve(CancellationToken term) => Volatile.Write(ref _serving, true);

    public Task<bool> ConfirmAsync(CancellationToken cancellationToken) => Task.FromResult(true);

    // Nobody else could lead: the manager goes on.
    public void StepDown(string reason)
    {
    }
}

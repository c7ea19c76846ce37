using System;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// The bed's client program (<c>tests/RemoteCache.BedClient</c>) on a client host of its own: a managed cache created,
/// renewed and followed through every manager's address, under a <see cref="VerifiedLoad"/>: the data path, the
/// failover and the renewals exercised from another host than the test process, over the bed's links. Its counts come
/// from its output ("progress OPS FAILED MISMATCHED" every 200 ms, "error TEXT" as errors happen).
/// </summary>
public sealed class BedClient : IAsyncDisposable
{
    private readonly BedProcess _process;

    private BedClient(BedProcess process, ulong cacheId)
    {
        _process = process;
        CacheId = cacheId;
    }

    public ulong CacheId { get; }

    public BedHost Host => _process.Host;

    /// <summary>Whether the program is still running (it holds its cache's lease while it does).</summary>
    public bool Running => !_process.HasExited;

    public long Operations => Counts().Operations;

    public long Failures => Counts().Failures;

    public long Mismatches => Counts().Mismatches;

    public string Summary
    {
        get
        {
            var (ops, failed, mismatched) = Counts();
            var errors = _process.Lines("error ");
            return string.Create(CultureInfo.InvariantCulture,
                $"{Host.Name}'s cache {CacheId}: {ops} ops, {failed} failed, {mismatched} mismatched{(errors.Count > 0 ? "; first errors: " + string.Join(" | ", errors) : "")}{(Running ? "" : "; exited:\n" + _process.Tail())}");
        }
    }

    /// <summary>Starts the program on <paramref name="host"/> as the tenant of <paramref name="apiKey"/> and waits for its cache.</summary>
    public static async Task<BedClient> StartAsync(ClusterBed bed, BedHost host, string apiKey, TimeSpan lease)
    {
        var process = host.Start("client", ProgramPath, new[]
        {
            "--managers", string.Join(",", bed.ManagerAddresses), "--api-key", apiKey,
            "--lease", lease.TotalSeconds.ToString(CultureInfo.InvariantCulture), "--name", host.Name,
        });
        await process.WaitForOutputAsync("created ", TimeSpan.FromSeconds(60)).ConfigureAwait(false);
        return new BedClient(process, ulong.Parse(process.LastLine("created ")!, CultureInfo.InvariantCulture));
    }

    // The program's own output directory, beside this project's (tests/PROJECT/bin/CONFIGURATION/FRAMEWORK/).
    private static string ProgramPath
    {
        get
        {
            var output = new DirectoryInfo(AppContext.BaseDirectory.TrimEnd(Path.DirectorySeparatorChar));
            string framework = output.Name, configuration = output.Parent!.Name;
            string tests = output.Parent.Parent!.Parent!.Parent!.FullName;
            return Path.Combine(tests, "RemoteCache.BedClient", "bin", configuration, framework, "RemoteCache.BedClient");
        }
    }

    /// <summary>Waits until <paramref name="more"/> operations beyond the count now have completed.</summary>
    public async Task WaitForOperationsAsync(long more, TimeSpan timeout)
    {
        long target = Operations + more;
        var waited = System.Diagnostics.Stopwatch.StartNew();
        while (Operations < target)
        {
            if (waited.Elapsed > timeout || !Running)
                throw new TimeoutException($"the load on {Host.Name} made no progress to {target} ops within {timeout.TotalSeconds} s: {Summary}");
            await Task.Delay(50).ConfigureAwait(false);
        }
    }

    private (long Operations, long Failures, long Mismatches) Counts()
    {
        string? line = _process.LastLine("final ") ?? _process.LastLine("progress ");
        if (line is null)
            return (0, 0, 0);
        var parts = line.Split(' ').Select(p => long.Parse(p, CultureInfo.InvariantCulture)).ToArray();
        return (parts[0], parts[1], parts[2]);
    }

    /// <summary>Stops the load (stdin closed): the program deletes its cache and exits.</summary>
    public async ValueTask DisposeAsync()
    {
        _process.CloseInput();
        await Task.WhenAny(_process.Exited, Task.Delay(TimeSpan.FromSeconds(20))).ConfigureAwait(false);
    }
}

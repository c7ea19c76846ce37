using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging.Abstractions;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Store;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// What the local allocator's recovery does with the processes and logs a manager left: stand-in processes (a shell
/// that waits) carry a server's argv and log variable, so that each case is set up exactly.
/// </summary>
public sealed class LocalRecoveryTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("manager-recovery-").FullName;
    private readonly List<Process> _processes = new();

    private string Logs => Path.Combine(_dir, "state", "local");

    private string KeyFile => Path.Combine(_dir, "state", "admission.key");

    // A process whose argv and environment are those of a local server of `logDirectory` (the shell stays; its
    // `sleep` child goes with it on SIGTERM).
    private Process StandIn(string serverId, string logDirectory)
    {
        var start = new ProcessStartInfo("sh") { UseShellExecute = false };
        foreach (string a in new[] { "-c", "trap 'kill $! 2>/dev/null; exit 0' TERM; sleep 600 & wait", "remotecache-server",
                                     "--listen", "tcp:127.0.0.1:0", "--admission-key", KeyFile, "--server-id", serverId })
            start.ArgumentList.Add(a);
        start.Environment["RC_SERVER_LOG"] = Path.Combine(logDirectory, serverId + ".log");
        var process = Process.Start(start)!;
        _processes.Add(process);
        return process;
    }

    private static ServerRecord Record(string serverId, int pid, ulong cacheId = 0) =>
        new(serverId, new Dictionary<string, string> { ["tcp"] = "tcp:127.0.0.1:1" }, "small", false, LocalProcessAllocator.AllocatorName)
        {
            ProcessId = pid, CacheId = cacheId,
        };

    [Fact]
    public async Task RecoveryStopsWhatNoRecordNamesAdoptsTheRestAndKeepsTheLogsOfServersThatEndedOnTheirOwn()
    {
        Directory.CreateDirectory(Logs);
        string otherStateLogs = Path.Combine(_dir, "other-state", "local");
        var allocator = new LocalProcessAllocator(TestManager.Catalogue, new LocalServerSettings("/nonexistent", Logs, KeyFile, 0, false, null),
                                                  NullLogger.Instance);
        var unrecorded = StandIn("local-0000aaaa", Logs);              // started, then the manager died before recording it
        var otherManagers = StandIn("local-0000bbbb", otherStateLogs);  // same key file, another state directory
        var adopted = StandIn("local-0000cccc", Logs);
        foreach (string id in new[] { "local-0000aaaa", "local-0000cccc", "local-0000dddd", "local-0000eeee", "local-0000ffff" })
            File.WriteAllText(Path.Combine(Logs, id + ".log"), "ready\n");
        await ManagedClientKit.EventuallyAsync(() => allocator.RunningServers().Count == 2, "the stand-ins run");

        var recovered = await allocator.RecoverAsync(new[]
        {
            Record("local-0000cccc", adopted.Id),
            Record("local-0000dddd", 999_999_999),                 // free, its process gone: dropped
            Record("local-0000eeee", 999_999_999, cacheId: 7),     // holding a cache, its process gone: failed
        }, CancellationToken.None);

        Assert.True(unrecorded.WaitForExit(5000), "the server no record names still runs");
        Assert.False(otherManagers.HasExited, "another state directory's server was stopped");
        Assert.False(adopted.HasExited, "the adopted server was stopped");
        Assert.Equal(new[] { "local-0000cccc", "local-0000eeee" }, recovered.Select(s => s.ServerId).Order());
        Assert.Equal(ServerStatus.Failed, recovered.Single(s => s.ServerId == "local-0000eeee").Status);
        Assert.Equal(new[] { ("local-0000cccc", adopted.Id) }, allocator.RunningServers().Select(p => (p.ServerId, p.Pid)));

        // Logs: the known servers' stay, the stopped one's goes, those of servers that ended on their own are kept as evidence.
        Assert.Equal(new[] { "local-0000cccc.log", "local-0000dddd.ended.log", "local-0000eeee.log", "local-0000ffff.ended.log" },
                     Directory.GetFiles(Logs).Select(Path.GetFileName).Order());
    }

    public void Dispose()
    {
        foreach (var process in _processes)
        {
            if (!process.HasExited)
                ServerProcesses.Signal(process.Id, "TERM");
            process.WaitForExit(5000);
            process.Dispose();
        }
        Directory.Delete(_dir, recursive: true);
    }
}

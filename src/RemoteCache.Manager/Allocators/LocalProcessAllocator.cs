using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Placement;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager.Allocators;

/// <summary>How the local allocator runs its servers.</summary>
/// <param name="ServerPath">The remotecache-server to start.</param>
/// <param name="Directory">Where the servers' log files go.</param>
/// <param name="AdmissionKeyFile">The manager's admission key, which the servers admit by.</param>
/// <param name="Warm">Idle servers kept running per VM type.</param>
/// <param name="CommitMemory">The servers commit memory ahead for new caches.</param>
/// <param name="VerbsAddress">An RDMA device's IPv4 address: the servers listen for verbs there too; null: tcp and shm only.</param>
public sealed record LocalServerSettings(string ServerPath, string Directory, string AdmissionKeyFile, int Warm, bool CommitMemory, string? VerbsAddress);

/// <summary>
/// "VMs" that are remotecache-server processes on this host, shaped by their VM type (memory limit, threads), with the
/// manager's admission key. Each listens on loopback tcp, on an abstract shm socket and, given an RDMA device's address,
/// on verbs there (so that verbs caches can be placed on it and regions move over RDMA READ). A server runs in its own
/// session with its output in a log file, so it outlives the manager: caches keep serving while the manager restarts,
/// and the next manager adopts the processes again.
/// <para>
/// Crash consistency: a server is started before the change that records it is committed, so a manager killed in
/// between (kill -9, power loss) leaves a process no record names. Rather than a write-ahead record, recovery finds such
/// processes: every process whose argv has <c>--admission-key</c> with this manager's key file and a
/// <c>--server-id local-…</c>, and whose environment sends its output to this allocator's log directory (so a manager
/// with another state directory, even one sharing the key file, is never touched), is one this state directory started,
/// at any stage of its start (setsid, the shell, the server). <see cref="RecoverAsync"/> adopts the recorded ones that
/// still run and stops every other one (SIGTERM, SIGKILL after a grace), before the manager serves: whatever instant
/// the last manager died at, nothing it started is left running unrecorded. A recorded server whose process is gone is
/// marked failed while it holds a cache (its cache's watchers are told) and dropped otherwise.
/// </para>
/// <para>
/// Logs: <c>DIR/&lt;server-id&gt;.log</c> while the manager knows the server. A server the manager stops (released,
/// retired, stopped at shutdown, or swept at recovery because no record named it) has its log deleted: it ended because
/// it was told to. A server that ended on its own keeps its log as evidence, renamed <c>&lt;server-id&gt;.ended.log</c>
/// at the next recovery once no record names it (an operator deletes those). So after a recovery the <c>*.log</c>
/// files other than <c>*.ended.log</c> are exactly those of the servers the manager knows.
/// </para>
/// </summary>
public sealed partial class LocalProcessAllocator : IServerAllocator
{
    public const string AllocatorName = "local";

    private const int SigKill = 9, SigTerm = 15;
    private static readonly TimeSpan s_startTimeout = TimeSpan.FromSeconds(15);
    private static readonly TimeSpan s_stopGrace = TimeSpan.FromSeconds(3);

    private readonly VmCatalogue _catalogue;
    private readonly LocalServerSettings _settings;
    private readonly ILogger _logger;
    private readonly ConcurrentDictionary<string, Process> _children = new();

    public LocalProcessAllocator(VmCatalogue catalogue, LocalServerSettings settings, ILogger logger)
    {
        _catalogue = catalogue;
        // Absolute, so that the paths in a server's argv and environment, by which a restarted manager finds the
        // servers of its state directory, do not depend on the directory it was started from.
        _settings = settings with { Directory = Path.GetFullPath(settings.Directory), AdmissionKeyFile = Path.GetFullPath(settings.AdmissionKeyFile) };
        _logger = logger;
        Directory.CreateDirectory(_settings.Directory);
    }

    /// <summary>Raised (on a thread-pool thread) when a server process this manager started ends.</summary>
    public event Action<string>? ServerExited;

    public string Name => AllocatorName;

    public IReadOnlyList<VmOffer> Offers(IReadOnlyCollection<ServerRecord> servers)
    {
        var offers = new List<VmOffer>();
        foreach (var type in _catalogue.VmTypes)
            foreach (bool spot in new[] { false, true })
            {
                int busy = servers.Count(s => s.Allocator == AllocatorName && s.VmType == type.Name && s.Spot == spot &&
                                              (s.CacheId != 0 || s.Status != ServerStatus.Ready));
                int free = type.Count(spot) - busy;
                if (free > 0)
                    offers.Add(new VmOffer(type, spot, free));
            }
        return offers;
    }

    public async Task<ServerRecord> AcquireAsync(VmType type, bool spot, IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken)
    {
        var idle = servers.FirstOrDefault(s => s.Allocator == AllocatorName && s.VmType == type.Name && s.Spot == spot &&
                                               s.CacheId == 0 && s.Status == ServerStatus.Ready);
        return idle ?? await StartAsync(type, spot, cancellationToken).ConfigureAwait(false);
    }

    public async Task<ServerRecord?> ReleaseAsync(ServerRecord server, IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken)
    {
        int idle = servers.Count(s => s.Allocator == AllocatorName && s.VmType == server.VmType && s.Spot == server.Spot && s.CacheId == 0 &&
                                      s.Status == ServerStatus.Ready && s.ServerId != server.ServerId);
        if (server.Status == ServerStatus.Ready && idle < _settings.Warm)
            return server with { CacheId = 0 };
        await StopAsync(server, SigTerm).ConfigureAwait(false);
        return null;
    }

    public Task RetireAsync(ServerRecord server, CancellationToken cancellationToken) => StopAsync(server, SigKill);

    public async Task<IReadOnlyList<ServerRecord>> RecoverAsync(IReadOnlyList<ServerRecord> stored, CancellationToken cancellationToken)
    {
        var recovered = new List<ServerRecord>();
        var adopted = new HashSet<string>(StringComparer.Ordinal);
        foreach (var server in stored)
        {
            if (server.Allocator != AllocatorName)
            {
                recovered.Add(server);
                continue;
            }
            if (IsOurs(server))
            {
                _logger.LogInformation("Adopted local server {ServerId} (pid {Pid})", server.ServerId, server.ProcessId);
                recovered.Add(server);
                adopted.Add(server.ServerId);
            }
            else if (server.CacheId != 0)
            {
                recovered.Add(server with { Status = ServerStatus.Failed, FailureReason = $"its process (pid {server.ProcessId}) ended while the manager was down" });
            }
        }
        // Processes of this state directory that no adopted record names: started by a manager that died before it
        // recorded them (or after it dropped their record). None holds a cache the store knows, so they are stopped.
        var stopped = new HashSet<string>(StringComparer.Ordinal);
        foreach (var (pid, serverId) in RunningServers().Where(p => !adopted.Contains(p.ServerId)))
        {
            _logger.LogWarning("Stopping local server {ServerId} (pid {Pid}): no record names it (the last manager ended before it recorded the server)", serverId, pid);
            await StopProcessAsync(pid, serverId, SigTerm).ConfigureAwait(false);
            stopped.Add(serverId);
        }
        var known = recovered.Where(s => s.Allocator == AllocatorName).Select(s => s.ServerId).ToHashSet(StringComparer.Ordinal);
        foreach (string log in Directory.GetFiles(_settings.Directory, "local-*.log"))
        {
            string serverId = Path.GetFileName(log)[..^".log".Length];
            if (serverId.EndsWith(".ended", StringComparison.Ordinal) || known.Contains(serverId))
                continue;
            if (stopped.Contains(serverId))
                DeleteQuietly(log);
            else
                MoveQuietly(log, Path.Combine(_settings.Directory, serverId + ".ended.log"));  // it ended on its own: evidence
        }
        return recovered;
    }

    public async Task ShutdownAsync(IReadOnlyCollection<ServerRecord> servers, CancellationToken cancellationToken)
    {
        foreach (var server in servers.Where(s => s.Allocator == AllocatorName && s.CacheId == 0))
            await StopAsync(server, SigTerm).ConfigureAwait(false);
    }

    /// <summary>The log file of a server.</summary>
    public string LogPath(string serverId) => Path.Combine(_settings.Directory, serverId + ".log");

    private async Task<ServerRecord> StartAsync(VmType type, bool spot, CancellationToken cancellationToken)
    {
        string serverId = "local-" + Convert.ToHexString(RandomNumberGenerator.GetBytes(4)).ToLowerInvariant();
        string log = LogPath(serverId);
        long memory = _catalogue.RegionsOf(type) * _catalogue.RegionBytes;
        var start = new ProcessStartInfo("setsid") { UseShellExecute = false };
        // setsid: a session of its own, so a Ctrl+C aimed at the manager does not stop the servers; the shell only
        // redirects the output to the log (a pipe would break, and the server with it, when the manager exits).
        foreach (string a in new[] { "sh", "-c", "exec \"$0\" \"$@\" >>\"$RC_SERVER_LOG\" 2>&1", _settings.ServerPath,
                                     "--listen", "tcp:127.0.0.1:0", "--listen", $"shm:@remotecache-{serverId}",
                                     "--memory-limit", memory.ToString(CultureInfo.InvariantCulture),
                                     "--region-size", _catalogue.RegionBytes.ToString(CultureInfo.InvariantCulture),
                                     "--threads", type.Cores.ToString(CultureInfo.InvariantCulture),
                                     "--admission-key", _settings.AdmissionKeyFile, "--server-id", serverId })
            start.ArgumentList.Add(a);
        if (_settings.VerbsAddress is { } verbs)
        {
            start.ArgumentList.Add("--listen");
            start.ArgumentList.Add($"verbs:{verbs}:0");
        }
        if (_settings.CommitMemory)
            start.ArgumentList.Add("--commit-memory");
        start.Environment["RC_SERVER_LOG"] = log;
        Process process;
        try
        {
            process = Process.Start(start) ?? throw new AllocatorException($"could not start {_settings.ServerPath}");
        }
        catch (System.ComponentModel.Win32Exception e)
        {
            throw new AllocatorException($"could not start {_settings.ServerPath}: {e.Message}", e);
        }
        var endpoints = new Dictionary<string, string>();
        var deadline = Stopwatch.StartNew();
        while (true)
        {
            var lines = await LogLinesAsync(log, cancellationToken).ConfigureAwait(false);
            if (lines.Contains("ready"))
            {
                foreach (string line in lines.Where(l => l.StartsWith("listening ", StringComparison.Ordinal)))
                {
                    string endpoint = line["listening ".Length..];
                    endpoints[endpoint[..endpoint.IndexOf(':', StringComparison.Ordinal)]] = endpoint;
                }
                break;
            }
            bool exited = process.HasExited;
            if (exited || deadline.Elapsed > s_startTimeout || cancellationToken.IsCancellationRequested)
            {
                if (!exited)
                    Kill(process.Id, SigKill);
                else
                    lines = await LogLinesAsync(log, CancellationToken.None).ConfigureAwait(false);  // with what it wrote as it exited
                string tail = string.Join("\n", lines.TakeLast(5));
                process.Dispose();
                cancellationToken.ThrowIfCancellationRequested();
                throw new AllocatorException($"the local server {serverId} ({type.Name}) did not start: " +
                                             (exited ? "it exited" : $"not ready within {s_startTimeout.TotalSeconds:0} s") + (tail.Length > 0 ? $": {tail}" : ""));
            }
            await Task.Delay(10, cancellationToken).ConfigureAwait(false);
        }
        process.EnableRaisingEvents = true;
        process.Exited += (_, _) =>
        {
            if (_children.TryRemove(serverId, out _))
                ServerExited?.Invoke(serverId);
        };
        _children[serverId] = process;
        if (process.HasExited && _children.TryRemove(serverId, out _))
            ServerExited?.Invoke(serverId);
        _logger.LogInformation("Started local server {ServerId} ({VmType}{Spot}, pid {Pid}) on {Endpoints}", serverId, type.Name, spot ? ", spot" : "",
                               process.Id, string.Join(" ", endpoints.Values));
        return new ServerRecord(serverId, endpoints, type.Name, spot, AllocatorName) { ProcessId = process.Id };
    }

    private static async Task<string[]> LogLinesAsync(string log, CancellationToken cancellationToken) =>
        (File.Exists(log) ? await File.ReadAllTextAsync(log, cancellationToken).ConfigureAwait(false) : "")
            .Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);

    private async Task StopAsync(ServerRecord server, int signal)
    {
        if (server.ProcessId <= 0 || !IsOurs(server))
            return;
        _children.TryRemove(server.ServerId, out var child);
        await StopProcessAsync(server.ProcessId, server.ServerId, signal).ConfigureAwait(false);
        if (child is not null)
        {
            await child.WaitForExitAsync().ConfigureAwait(false);
            child.Dispose();
        }
        DeleteQuietly(LogPath(server.ServerId));  // stopped on purpose: its log tells nothing
        _logger.LogInformation("Stopped local server {ServerId} (pid {Pid})", server.ServerId, server.ProcessId);
    }

    // Signals the process, and kills it if it is still the server after the grace (a pid may be reused once it is gone).
    private static async Task StopProcessAsync(int pid, string serverId, int signal)
    {
        Kill(pid, signal);
        var waited = Stopwatch.StartNew();
        while (IsServer(pid, serverId) && waited.Elapsed < s_stopGrace)
            await Task.Delay(20).ConfigureAwait(false);
        if (IsServer(pid, serverId))
            Kill(pid, SigKill);
    }

    /// <summary>
    /// The processes this allocator's state directory started, at any stage of their start (the class comment): argv
    /// with <c>--admission-key</c> naming this manager's key file and <c>--server-id local-…</c>, and the log variable
    /// naming that server's log in this directory.
    /// </summary>
    internal IReadOnlyList<(int Pid, string ServerId)> RunningServers()
    {
        var found = new List<(int, string)>();
        foreach (string dir in Directory.GetDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), NumberStyles.None, CultureInfo.InvariantCulture, out int pid) || pid == Environment.ProcessId)
                continue;
            try
            {
                var argv = File.ReadAllText(Path.Combine(dir, "cmdline")).Split('\0');
                int key = Array.IndexOf(argv, "--admission-key"), id = Array.IndexOf(argv, "--server-id");
                if (key < 0 || id < 0 || key + 1 >= argv.Length || id + 1 >= argv.Length || argv[key + 1] != _settings.AdmissionKeyFile ||
                    !argv[id + 1].StartsWith("local-", StringComparison.Ordinal))
                    continue;
                string serverId = argv[id + 1];
                if (File.ReadAllText(Path.Combine(dir, "environ")).Split('\0').Contains("RC_SERVER_LOG=" + LogPath(serverId)))
                    found.Add((pid, serverId));
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
                // Gone meanwhile, or not ours to read.
            }
        }
        return found;
    }

    private void DeleteQuietly(string path)
    {
        try
        {
            File.Delete(path);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _logger.LogWarning("Could not delete {Log}: {Reason}", path, e.Message);
        }
    }

    private void MoveQuietly(string from, string to)
    {
        try
        {
            File.Move(from, to, overwrite: true);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            _logger.LogWarning("Could not rename {Log}: {Reason}", from, e.Message);
        }
    }

    // The process is still the server it was started as (a pid may be reused once it is gone).
    private static bool IsOurs(ServerRecord server) => IsServer(server.ProcessId, server.ServerId);

    private static bool IsServer(int pid, string serverId)
    {
        try
        {
            string cmdline = File.ReadAllText($"/proc/{pid}/cmdline");
            return cmdline.Split('\0').Contains(serverId) && !File.ReadAllText($"/proc/{pid}/stat").Contains(") Z ", StringComparison.Ordinal);
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException)
        {
            return false;
        }
    }

    private static void Kill(int pid, int signal) => _ = NativeKill(pid, signal);

    [LibraryImport("libc", EntryPoint = "kill")]
    private static partial int NativeKill(int pid, int signal);
}

using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using System.Text.Json;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using RemoteCache.Manager.V1;
using static RemoteCache.Benchmarks.Manager.Program;

namespace RemoteCache.Benchmarks.Manager;

/// <summary>
/// What harvesting costs the host that lends (Memtrade's producer impact): a producer service (producer.py, a request
/// loop timing every request) grows its working set in steps inside a memory cgroup, alone, and beside
/// <c>remotecache serve --lend auto</c> lending the cgroup's headroom to a cache under load that has to leave when the
/// producer needs the memory. Rounds alternate the two arms; the figure is the producer's request p99 with the lender
/// over without it, and every give-back is checked against the deadline the host set. The producer runs alone on CPU 1
/// and everything else on CPU 0, so that what is compared is the memory, not two processes sharing a core.
/// </summary>
internal static class HarvestBench
{
    private const string CgroupRoot = "/sys/fs/cgroup/memory";
    private const long CacheBytes = 128L << 20;

    public static Command Command()
    {
        var rounds = new Option<int>("--rounds") { Description = "Pairs of runs (producer alone, producer beside the lender), order alternating", DefaultValueFactory = _ => 5 };
        var steps = new Option<string>("--steps") { Description = "The producer's working set, MiB per step", DefaultValueFactory = _ => "128,256,384,512,640" };
        var seconds = new Option<double>("--step-seconds") { Description = "Requests timed after each step", DefaultValueFactory = _ => 3 };
        var limit = new Option<int>("--host-mib") { Description = "The host: a memory cgroup of this many MiB", DefaultValueFactory = _ => 1024 };
        var reserve = new Option<string>("--reserve") { Description = "remotecache serve --reserve", DefaultValueFactory = _ => "384M" };
        var json = new Option<string?>("--json") { Description = "Where the figures go (JSON) [default: artifacts/manager-harvest.json]" };
        var command = new Command("harvest", "A producer's request latency while its host lends memory it does not use (remotecache serve --lend auto) and takes it back, against the same producer alone; needs root and the cgroup v1 memory controller")
        {
            rounds, steps, seconds, limit, reserve, json,
        };
        command.SetAction(async (parse, ct) =>
        {
            if (!File.Exists(Path.Combine(CgroupRoot, "memory.limit_in_bytes")) || Environment.UserName != "root")
            {
                Console.Error.WriteLine($"harvest needs root and the cgroup v1 memory controller at {CgroupRoot}: the producer's host is a memory cgroup");
                return 2;
            }
            string dir = Directory.CreateTempSubdirectory("harvest-").FullName;
            try
            {
                var options = new Settings(parse.GetValue(rounds), parse.GetValue(steps)!, parse.GetValue(seconds), (long)parse.GetValue(limit) << 20, parse.GetValue(reserve)!);
                var result = await RunAsync(dir, options, ct);
                string path = parse.GetValue(json) ?? Path.Combine("artifacts", "manager-harvest.json");
                Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
                await File.WriteAllTextAsync(path, JsonSerializer.Serialize(result, new JsonSerializerOptions { WriteIndented = true }), ct);
                Console.WriteLine($"figures: {path}");
                return result.LatencyTargetMet && result.GiveBacksInTime == result.GiveBacks && result.OomKills == 0 ? 0 : 1;
            }
            finally
            {
                Directory.Delete(dir, recursive: true);
            }
        });
        return command;
    }

    private sealed record Settings(int Rounds, string Steps, double StepSeconds, long HostBytes, string Reserve);

    private sealed record Step(int Mib, double P50Us, double P99Us);

    private sealed record Run(string Arm, int Round, double P50Us, double P99Us, double MaxUs, long Requests, IReadOnlyList<Step> Steps,
                              IReadOnlyList<string> GiveBacks, int OomKills, string CacheEndedOn);

    private sealed record Result(string Date, Settings Settings, bool Pinned, double AloneP99Us, double LendingP99Us, double P99Ratio, IReadOnlyList<double> P99RatioByRound, bool LatencyTargetMet,
                                 double AloneP50Us, double LendingP50Us, int GiveBacks, int GiveBacksInTime, int CachesDropped, int OomKills, IReadOnlyList<Run> Runs);

    private static async Task<Result> RunAsync(string dir, Settings settings, CancellationToken ct)
    {
        // The producer alone on the last CPU, the rest of us (manager, lender, cache clients) on the others.
        int cpus = Environment.ProcessorCount;
        bool pinned = cpus >= 2;
        if (pinned)
            PinProcess((1UL << (cpus - 1)) - 1);
        else
            Console.WriteLine("one CPU: the producer shares it with the lender, so the comparison includes CPU, not only memory");

        await using var manager = await Program.Manager.StartAsync(dir, HalfGiBCatalogue, warm: 0, configure: o =>
        {
            o.Allocator = "static";
            o.HeartbeatTtl = TimeSpan.FromSeconds(3);
            o.HeartbeatInterval = TimeSpan.FromSeconds(0.25);
        });
        var ops = manager.Operator;
        string tokenFile = Path.Combine(dir, "join.token");
        await File.WriteAllTextAsync(tokenFile, (await ops.IssueJoinTokenAsync(new IssueJoinTokenRequest { Description = "harvest bench" }, cancellationToken: ct)).Secret + "\n", ct);
        File.SetUnixFileMode(tokenFile, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        await using var managed = manager.ManagedClient();

        var runs = new List<Run>();
        for (int round = 1; round <= settings.Rounds; round++)
        {
            foreach (bool lending in round % 2 == 1 ? new[] { false, true } : new[] { true, false })
            {
                var run = await RunArmAsync(dir, settings, round, lending, manager, tokenFile, managed, pinned ? $"{cpus - 1}" : null, pinned ? $"0-{cpus - 2}" : null, ct);
                // The arm's servers are gone; the next arm's caches must not be placed on them before the TTL fails them.
                var settle = Stopwatch.StartNew();
                while ((await ops.ListServersAsync(new ListServersRequest(), cancellationToken: ct)).Servers.Any(s => s.State == ServerState.Ready))
                {
                    if (settle.Elapsed > TimeSpan.FromSeconds(30))
                        throw new TimeoutException("the manager still lists a stopped server as ready after 30 s");
                    await Task.Delay(200, ct);
                }
                runs.Add(run);
                Console.WriteLine(Invariant($"round {round} {run.Arm,-7}: p50 {run.P50Us:0.00} µs, p99 {run.P99Us:0.00} µs, max {run.MaxUs:0} µs over {run.Requests} requests; ") +
                                  string.Join(" ", run.Steps.Select(s => Invariant($"{s.Mib} MiB p99 {s.P99Us:0.00}"))) +
                                  $"; cache ended on {run.CacheEndedOn}" + (lending ? "; " + (run.GiveBacks.Count == 0 ? "no give-back" : string.Join("; ", run.GiveBacks)) : ""));
            }
        }

        double Median(IEnumerable<double> values)
        {
            var sorted = values.OrderBy(v => v).ToArray();
            return sorted.Length % 2 == 1 ? sorted[sorted.Length / 2] : (sorted[sorted.Length / 2 - 1] + sorted[sorted.Length / 2]) / 2;
        }
        var alone = runs.Where(r => r.Arm == "alone").ToList();
        var lent = runs.Where(r => r.Arm == "lending").ToList();
        var givebacks = lent.SelectMany(r => r.GiveBacks).ToList();
        double aloneP99 = Median(alone.Select(r => r.P99Us)), lendingP99 = Median(lent.Select(r => r.P99Us));
        // The verdict is the median of the per-round ratios: the two arms of a round ran seconds apart, rounds minutes.
        var ratios = lent.Select(l => l.P99Us / alone.Single(a => a.Round == l.Round).P99Us).ToList();
        double ratio = Median(ratios);
        var result = new Result(DateTime.UtcNow.ToString("yyyy-MM-dd", CultureInfo.InvariantCulture), settings, pinned, aloneP99, lendingP99, ratio, ratios,
                                ratio <= 1.05, Median(alone.Select(r => r.P50Us)), Median(lent.Select(r => r.P50Us)),
                                givebacks.Count(g => g.StartsWith("gave", StringComparison.Ordinal)), givebacks.Count(g => g.StartsWith("gave", StringComparison.Ordinal) && g.Contains("before", StringComparison.Ordinal)),
                                givebacks.Count(g => g.StartsWith("dropped", StringComparison.Ordinal)), runs.Sum(r => r.OomKills), runs);
        Console.WriteLine(Invariant($"producer request p99 (medians of {settings.Rounds} rounds): alone {aloneP99:0.00} µs, beside the lender {lendingP99:0.00} µs; lending / alone, median of the rounds' ratios: {result.P99Ratio:0.000}× (target ≤ 1.05: {(result.LatencyTargetMet ? "met" : "MISSED")}; by round {string.Join(" ", ratios.Select(r => r.ToString("0.00", CultureInfo.InvariantCulture)))}); p50 {result.AloneP50Us:0.00} / {result.LendingP50Us:0.00} µs"));
        Console.WriteLine(Invariant($"memory given back: {result.GiveBacksInTime} of {result.GiveBacks} give-backs before the host's deadline; {result.CachesDropped} cache(s) dropped; {result.OomKills} process(es) OOM-killed"));
        return result;
    }

    private static async Task<Run> RunArmAsync(string dir, Settings settings, int round, bool lending, Program.Manager manager, string tokenFile,
                                               RemoteCacheManagerClient managed, string? producerCpu, string? lenderCpus, CancellationToken ct)
    {
        string cgroup = Path.Combine(CgroupRoot, $"remotecache-harvest-{Environment.ProcessId}-{round}-{(lending ? "lending" : "alone")}");
        Directory.CreateDirectory(cgroup);
        File.WriteAllText(Path.Combine(cgroup, "memory.limit_in_bytes"), settings.HostBytes.ToString(CultureInfo.InvariantCulture));
        // Every process of the host starts in its cgroup before it allocates (cgroup v1 does not move charges).
        string InHost(string command) => $"echo $$ > {cgroup}/cgroup.procs && exec {command}";
        Child? serve = null, producer = null;
        JoinedServer? destination = null;
        ManagedCache? cache = null;
        using var stopLoad = CancellationTokenSource.CreateLinkedTokenSource(ct);
        Task load = Task.CompletedTask;
        try
        {
            if (lending)
            {
                string cli = Path.Combine(AppContext.BaseDirectory, "RemoteCache.Cli.dll");
                serve = Child.Start("serve", InHost($"{Pin(lenderCpus)}dotnet {cli} serve --join {manager.Address.ToString().TrimEnd('/')} --join-token {tokenFile} --listen tcp:127.0.0.1:0 " +
                                                  $"--lend auto --reserve {settings.Reserve} --threads 1 --name producer-host --commit-memory --verbose"));
                await serve.WaitForAsync("ready", TimeSpan.FromSeconds(60), ct);
                // The only server: the cache goes to the producer's host.
                cache = await managed.CreateAsync(new ManagedCacheRequest { Capacity = CacheBytes, Duration = TimeSpan.FromHours(1) }, ct);
            }
            // Both arms run the same tenant: a server elsewhere and a cache under load (alone: on that server from the start;
            // lending: moved there when the producer's host needs its memory), so that the one difference is the lending.
            destination = await JoinedServer.JoinAsync(new JoinedServerOptions
            {
                Managers = { manager.Address }, JoinToken = (await File.ReadAllTextAsync(tokenFile, ct)).Trim(), Name = "elsewhere", Listen = { "tcp:127.0.0.1:0" },
                RegionSize = 64L << 20, MemoryLimit = 512L << 20, MaxThreads = 1,
            }, ct);
            cache ??= await managed.CreateAsync(new ManagedCacheRequest { Capacity = CacheBytes, Duration = TimeSpan.FromHours(1) }, ct);
            var block = new byte[1 << 20];
            for (long at = 0; at < CacheBytes; at += block.Length)
                await cache.Client.WriteAsync(at, block);
            var loaded = cache;
            load = Task.Run(() => CacheLoadAsync(loaded, stopLoad.Token), CancellationToken.None);
            string script = Path.Combine(AppContext.BaseDirectory, "producer.py");
            producer = Child.Start("producer", InHost($"{Pin(producerCpu)}python3 -u {script} {settings.Steps} {settings.StepSeconds.ToString(CultureInfo.InvariantCulture)}"));
            var done = await producer.WaitForAsync("done ", TimeSpan.FromSeconds(60 + settings.Steps.Split(',').Length * (settings.StepSeconds + 10)), ct);
            var steps = producer.Lines.Where(l => l.StartsWith("step ", StringComparison.Ordinal)).Select(l =>
            {
                var f = Fields(l);
                return new Step(int.Parse(l.Split(' ')[1], CultureInfo.InvariantCulture), f["p50_us"], f["p99_us"]);
            }).ToList();
            var all = Fields(done);
            int oom = int.Parse(Regex.Match(File.ReadAllText(Path.Combine(cgroup, "memory.oom_control")), @"oom_kill (\d+)").Groups[1].Value, CultureInfo.InvariantCulture);
            var giveBacks = new List<string>();
            if (serve is not null)
            {
                foreach (string line in serve.Lines)
                {
                    var gave = Regex.Match(line, @"Gave the host its memory back ([0-9.]+) s after it asked, ([0-9.]+) s (before|after) the deadline");
                    if (gave.Success)
                        giveBacks.Add($"gave back in {gave.Groups[1].Value} s, {gave.Groups[2].Value} s {gave.Groups[3].Value} the deadline");
                    else if (line.Contains("dropped it", StringComparison.Ordinal))
                        giveBacks.Add("dropped the cache: " + line.Trim());
                }
            }
            string endedOn = string.Join(",", cache.Info.Servers.Select(s => s.ServerId));
            return new Run(lending ? "lending" : "alone", round, all["p50_us"], all["p99_us"], all["max_us"], (long)all["requests"], steps, giveBacks, oom, endedOn);
        }
        finally
        {
            stopLoad.Cancel();
            await load.ContinueWith(_ => { }, TaskScheduler.Default);
            producer?.Dispose();
            if (cache is not null)
            {
                await cache.DeleteAsync(CancellationToken.None);
                await cache.DisposeAsync();
            }
            if (destination is not null)
                await destination.DisposeAsync();
            serve?.Dispose();
            // The cgroup goes once its processes have.
            for (int i = 0; i < 100 && Directory.Exists(cgroup); i++)
            {
                try
                {
                    Directory.Delete(cgroup);
                }
                catch (IOException)
                {
                    await Task.Delay(100, CancellationToken.None);
                }
            }
        }
    }

    private static string Pin(string? cpus) => cpus is null ? "" : $"taskset -c {cpus} ";

    /// <summary>
    /// Pins every thread of this process to <paramref name="mask"/> (threads made later inherit it from their maker):
    /// Process.ProcessorAffinity sets the main thread's alone on Linux.
    /// </summary>
    private static void PinProcess(ulong mask)
    {
        foreach (string task in Directory.GetDirectories("/proc/self/task"))
        {
            if (sched_setaffinity(int.Parse(Path.GetFileName(task), CultureInfo.InvariantCulture), sizeof(ulong), ref mask) != 0)
                throw new InvalidOperationException($"sched_setaffinity of thread {Path.GetFileName(task)}: errno {Marshal.GetLastPInvokeError()}");
        }
    }

    [DllImport("libc", SetLastError = true)]
    private static extern int sched_setaffinity(int pid, nint cpusetsize, ref ulong mask);

    // 4 KiB reads and writes at random over the cache until stopped: the lent memory is in use, as a tenant's would be.
    private static async Task CacheLoadAsync(ManagedCache cache, CancellationToken ct)
    {
        var buffer = new byte[4096];
        var random = new Random(1);
        while (!ct.IsCancellationRequested)
        {
            long at = random.NextInt64(CacheBytes / buffer.Length) * buffer.Length;
            try
            {
                if (random.Next(2) == 0)
                    await cache.Client.ReadAsync(at, buffer);
                else
                    await cache.Client.WriteAsync(at, buffer);
            }
            catch (RemoteCacheException)
            {
                await Task.Delay(10, CancellationToken.None);  // moving, or reported lost: the tenant retries
            }
        }
    }

    private static Dictionary<string, double> Fields(string line) =>
        line.Split(' ').Where(p => p.Contains('=')).ToDictionary(p => p[..p.IndexOf('=')], p => double.Parse(p[(p.IndexOf('=') + 1)..], CultureInfo.InvariantCulture));

    /// <summary>A process started through <c>sh -c</c>, its stdout and stderr lines kept.</summary>
    private sealed class Child : IDisposable
    {
        private readonly Process _process;
        private readonly List<string> _lines = new();
        private readonly string _name;

        private Child(string name, Process process)
        {
            _name = name;
            _process = process;
        }

        public IReadOnlyList<string> Lines
        {
            get
            {
                lock (_lines)
                    return _lines.ToList();
            }
        }

        public static Child Start(string name, string command)
        {
            var start = new ProcessStartInfo("sh") { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
            start.ArgumentList.Add("-c");
            start.ArgumentList.Add(command);
            start.Environment["DOTNET_NOLOGO"] = "1";
            var child = new Child(name, new Process { StartInfo = start });
            child._process.OutputDataReceived += (_, e) => child.Add(e.Data);
            child._process.ErrorDataReceived += (_, e) => child.Add(e.Data);
            child._process.Start();
            child._process.BeginOutputReadLine();
            child._process.BeginErrorReadLine();
            return child;
        }

        private void Add(string? line)
        {
            if (line is not null)
                lock (_lines)
                    _lines.Add(line);
        }

        /// <summary>The first line starting with <paramref name="prefix"/>, once it has been printed.</summary>
        public async Task<string> WaitForAsync(string prefix, TimeSpan timeout, CancellationToken ct)
        {
            var waited = Stopwatch.StartNew();
            while (true)
            {
                string? line = Lines.FirstOrDefault(l => l.StartsWith(prefix, StringComparison.Ordinal));
                if (line is not null)
                    return line;
                if (_process.HasExited || waited.Elapsed > timeout)
                    throw new InvalidOperationException($"{_name} {(_process.HasExited ? $"exited ({_process.ExitCode})" : $"printed no \"{prefix}\" within {timeout.TotalSeconds:0} s")}: {string.Join(" | ", Lines.TakeLast(8))}");
                await Task.Delay(50, ct);
            }
        }

        public void Dispose()
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
                _process.WaitForExit(10_000);
            }
            _process.Dispose();
        }
    }
}

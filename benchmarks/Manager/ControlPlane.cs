using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Http;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Threading;
using System.Threading.Tasks;
using dotnet_etcd;
using Etcdserverpb;
using Google.Protobuf;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Health.V1;
using Grpc.Net.Client;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Services;
using RemoteCache.Manager.V1;

namespace RemoteCache.Benchmarks.Manager;

/// <summary>
/// A control plane made of real processes on loopback (distinct ports, no namespaces): <c>remotecache-manager</c>
/// replicas with <c>--allocator static</c>, on SQLite (one manager) or on a 3-member etcd cluster, and a pool of
/// <c>remotecache-server</c> processes registered with the leader. The same allocate path for both stores, so their
/// figures compare.
/// </summary>
internal sealed class ControlPlane : IAsyncDisposable
{
    public const string TenantKey = "bench-tenant-0123456789";
    public const string OperatorKey = "bench-operator-0123456789";

    // The manager's leader key under the default prefix (EtcdManagerStore.DefaultPrefix + its internal LeaderKey):
    // watched to tell when a dead leader's lease ended.
    public const string LeaderKey = "/remotecache/meta/leader";

    // One VM type the size of a bench server: a cache of RegionBytes takes one whole server.
    public const long ServerBytes = 256L << 20;
    public const long RegionBytes = 64L << 20;

    private readonly string _dir;
    private readonly List<ServerProcess> _servers = new();
    private EtcdMembers? _etcd;

    private ControlPlane(string dir, string store)
    {
        _dir = dir;
        Store = store;
    }

    public string Store { get; }

    public IReadOnlyList<ManagerProcess> Managers { get; private set; } = Array.Empty<ManagerProcess>();

    public IReadOnlyList<Uri> Addresses => Managers.Select(m => m.Address).ToList();

    /// <summary>The etcd members' client URLs, comma-separated (null on SQLite).</summary>
    public string? EtcdEndpoints => _etcd?.Endpoints;

    /// <summary>
    /// Starts etcd (3 members) for <paramref name="store"/> etcd, <paramref name="servers"/> servers and
    /// <paramref name="replicas"/> managers (1 on SQLite), waits for one leader, and registers the servers with it.
    /// </summary>
    public static async Task<ControlPlane> StartAsync(string dir, string store, int replicas, int servers, double leaderLease = 2)
    {
        if (store is not ("sqlite" or "etcd"))
            throw new ArgumentException($"--store is '{store}': sqlite or etcd");
        if (store == "sqlite" && replicas != 1)
            throw new ArgumentException("SQLite is one manager's store: replicas need --store etcd");
        Directory.CreateDirectory(dir);
        var plane = new ControlPlane(dir, store);
        try
        {
            string keys = Path.Combine(dir, "keys.json"), catalogue = Path.Combine(dir, "catalogue.json"), admission = Path.Combine(dir, "admission.key");
            Program.WriteKeys(keys, ("bench", TenantKey, "tenant"), ("ops", OperatorKey, "operator"));
            await File.WriteAllTextAsync(catalogue, new VmCatalogue
            {
                RegionBytes = RegionBytes, VmTypes = new[] { new VmType("small", ServerBytes, 1, 0.02, null, servers, 0) },
            }.ToJson());
            ApiKeyStore.WritePrivate(admission, RandomNumberGenerator.GetBytes(32));
            if (store == "etcd")
                plane._etcd = await EtcdMembers.StartAsync(Path.Combine(dir, "etcd"), 3);
            // The servers start while etcd elects; each is a process that is ready in a few ms.
            for (int i = 0; i < servers; i++)
                plane._servers.Add(await ServerProcess.StartAsync(admission));
            var managers = new List<ManagerProcess>();
            for (int i = 0; i < replicas; i++)
            {
                var args = new List<string>
                {
                    "--state-dir", Path.Combine(dir, $"mgr{i + 1}.state"), "--store", store, "--allocator", "static", "--transports", "tcp",
                    "--keys", keys, "--admission-key", admission, "--catalogue", catalogue,
                };
                if (plane._etcd is { } etcd)
                    args.AddRange(new[] { "--etcd-endpoints", etcd.Endpoints, "--leader-lease", leaderLease.ToString(CultureInfo.InvariantCulture) });
                managers.Add(new ManagerProcess($"mgr{i + 1}", FreePort(), args, Path.Combine(dir, $"mgr{i + 1}.log")));
            }
            plane.Managers = managers;
            // Started together: each waits for its store, and the replicas elect among themselves.
            foreach (var m in managers)
                m.Start();
            int leader = await plane.SettledAsync(TimeSpan.FromSeconds(60));
            foreach (var s in plane._servers)
            {
                var add = new AddServerRequest { VmType = "small" };
                add.Endpoints.Add("tcp", s.Endpoint);
                await managers[leader].Operator.AddServerAsync(add, deadline: DateTime.UtcNow.AddSeconds(10));
            }
            return plane;
        }
        catch
        {
            await plane.DisposeAsync();
            throw;
        }
    }

    /// <summary>
    /// Waits until every manager runs and answers, exactly one serves as the leader and the others know a leader;
    /// returns the leader's index.
    /// </summary>
    public async Task<int> SettledAsync(TimeSpan timeout)
    {
        var waited = Stopwatch.StartNew();
        string last = "";
        while (true)
        {
            foreach (var m in Managers.Where(m => m.HasExited))
                throw new InvalidOperationException($"{m.Name} exited:\n{m.Tail()}");
            try
            {
                var roles = await Task.WhenAll(Managers.Select(m => m.RoleAsync()));
                int leaders = roles.Count(r => r == Role.Leader);
                if (leaders == 1 && roles.All(r => r is Role.Leader or Role.Follower))
                    return Array.IndexOf(roles, Role.Leader);
                last = string.Join(", ", roles);
            }
            catch (RpcException e)
            {
                last = e.Status.Detail;
            }
            if (waited.Elapsed > timeout)
                throw new TimeoutException($"the managers did not settle within {timeout.TotalSeconds} s (last: {last})");
            await Task.Delay(20);
        }
    }

    /// <summary>
    /// CPU time used so far by the manager at <paramref name="leader"/>, the other managers, the etcd members (zero on
    /// SQLite) and the cache servers.
    /// </summary>
    public (TimeSpan Leader, TimeSpan Followers, TimeSpan Etcd, TimeSpan Servers) CpuTime(int leader) =>
        (Managers[leader].CpuTime, Sum(Managers.Where((_, i) => i != leader).Select(m => m.CpuTime)), _etcd?.CpuTime ?? TimeSpan.Zero,
         Sum(_servers.Select(s => s.CpuTime)));

    internal static TimeSpan Sum(IEnumerable<TimeSpan> times) => times.Aggregate(TimeSpan.Zero, (a, b) => a + b);

    /// <summary>A running process's CPU time (user and system), zero once it has gone.</summary>
    internal static TimeSpan CpuTimeOf(Process? process)
    {
        try
        {
            if (process is null || process.HasExited)
                return TimeSpan.Zero;
            process.Refresh();
            return process.TotalProcessorTime;
        }
        catch (InvalidOperationException)
        {
            return TimeSpan.Zero;
        }
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var m in Managers)
            await m.DisposeAsync();
        foreach (var s in _servers)
            await s.DisposeAsync();
        if (_etcd is not null)
            await _etcd.DisposeAsync();
    }

    public static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    internal static CallInvoker Invoker(GrpcChannel channel, string key) => channel.CreateCallInvoker().Intercept(m =>
    {
        m.Add("authorization", "Bearer " + key);
        return m;
    });

    public enum Role
    {
        Down,
        NoLeader,
        Follower,
        Leader,
    }
}

/// <summary>
/// A <c>remotecache-manager</c> process (the apphost built beside this tool, so that its process id is the manager's
/// own and a signal reaches it) on a fixed loopback port, which it keeps across restarts. Its log lines are kept with
/// the time each arrived, to tell when it was elected and when it served.
/// </summary>
internal sealed class ManagerProcess : IAsyncDisposable
{
    private readonly IReadOnlyList<string> _args;
    private readonly string _logFile;
    private readonly object _gate = new();
    private readonly List<(long At, string Line)> _lines = new();
    private readonly GrpcChannel _channel;
    private Process? _process;

    public ManagerProcess(string name, int port, IReadOnlyList<string> args, string logFile)
    {
        Name = name;
        Address = new Uri($"http://127.0.0.1:{port}");
        _args = args;
        _logFile = logFile;
        // Short keep-alive pings and connect timeout: the channel notices a killed manager and reconnects to its restart.
        _channel = GrpcChannel.ForAddress(Address, new GrpcChannelOptions
        {
            HttpHandler = new SocketsHttpHandler
            {
                KeepAlivePingDelay = TimeSpan.FromSeconds(1), KeepAlivePingTimeout = TimeSpan.FromSeconds(1), ConnectTimeout = TimeSpan.FromSeconds(2),
            },
        });
        Tenant = new CacheManager.CacheManagerClient(ControlPlane.Invoker(_channel, ControlPlane.TenantKey));
        Operator = new ServerPool.ServerPoolClient(ControlPlane.Invoker(_channel, ControlPlane.OperatorKey));
    }

    public string Name { get; }

    public Uri Address { get; }

    public CacheManager.CacheManagerClient Tenant { get; }

    public ServerPool.ServerPoolClient Operator { get; }

    public bool HasExited => _process is not { HasExited: false };

    public TimeSpan CpuTime => ControlPlane.CpuTimeOf(_process);

    public void Start()
    {
        if (!HasExited)
            throw new InvalidOperationException($"{Name} is running");
        var start = new ProcessStartInfo(Path.Combine(AppContext.BaseDirectory, "RemoteCache.Manager"))
        {
            RedirectStandardOutput = true, RedirectStandardError = true, RedirectStandardInput = true, UseShellExecute = false,
        };
        foreach (string a in new[] { "--listen", Address.ToString().TrimEnd('/') }.Concat(_args))
            start.ArgumentList.Add(a);
        // Information: the election's lines ("Elected leader", "Leading the managers") time the failover's steps.
        start.Environment["Logging__LogLevel__Default"] = "Information";
        start.Environment["Logging__LogLevel__Microsoft.AspNetCore"] = "Warning";
        start.Environment["Logging__Console__FormatterName"] = "simple";
        start.Environment["Logging__Console__FormatterOptions__SingleLine"] = "true";
        start.Environment["Logging__Console__FormatterOptions__TimestampFormat"] = "HH:mm:ss.fff ";
        start.Environment["DOTNET_NOLOGO"] = "1";
        var process = new Process { StartInfo = start };
        process.OutputDataReceived += (_, e) => Append(e.Data);
        process.ErrorDataReceived += (_, e) => Append(e.Data);
        process.Start();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        _process = process;
        Append($"---- started pid {process.Id}");
    }

    private void Append(string? line)
    {
        if (line is null)
            return;
        long at = Stopwatch.GetTimestamp();
        lock (_gate)
        {
            _lines.Add((at, line));
            File.AppendAllText(_logFile, line + "\n");
        }
    }

    /// <summary>When (Stopwatch ticks) the first line containing <paramref name="text"/> arrived after <paramref name="since"/>, if one did.</summary>
    public long? LineAfter(long since, string text)
    {
        lock (_gate)
            return _lines.Where(l => l.At >= since && l.Line.Contains(text, StringComparison.Ordinal)).Select(l => (long?)l.At).FirstOrDefault();
    }

    public string Tail()
    {
        lock (_gate)
            return string.Join('\n', _lines.TakeLast(30).Select(l => l.Line));
    }

    /// <summary>Sends <paramref name="signal"/> (9 or 15); returns when it was sent (Stopwatch ticks, taken just before).</summary>
    public long Signal(int signal)
    {
        var process = _process ?? throw new InvalidOperationException($"{Name} was never started");
        long at = Stopwatch.GetTimestamp();
        if (Native.Kill(process.Id, signal) != 0)
            throw new InvalidOperationException($"kill({process.Id}, {signal}) failed: errno {Marshal.GetLastPInvokeError()}");
        return at;
    }

    public async Task WaitExitAsync(TimeSpan timeout)
    {
        if (_process is not { } process)
            return;
        using var cts = new CancellationTokenSource(timeout);
        try
        {
            await process.WaitForExitAsync(cts.Token);
        }
        catch (OperationCanceledException)
        {
            process.Kill();
            await process.WaitForExitAsync();
        }
    }

    /// <summary>Its role by the gRPC health service: "" SERVING means a leader is known, the leader service SERVING that it leads.</summary>
    public async Task<ControlPlane.Role> RoleAsync()
    {
        if (HasExited)
            return ControlPlane.Role.Down;
        var health = new Health.HealthClient(_channel);
        try
        {
            var deadline = DateTime.UtcNow.AddSeconds(1);
            if ((await health.CheckAsync(new HealthCheckRequest { Service = ManagerHealth.LeaderService }, deadline: deadline)).Status == HealthCheckResponse.Types.ServingStatus.Serving)
                return ControlPlane.Role.Leader;
            return (await health.CheckAsync(new HealthCheckRequest(), deadline: deadline)).Status == HealthCheckResponse.Types.ServingStatus.Serving
                ? ControlPlane.Role.Follower : ControlPlane.Role.NoLeader;
        }
        catch (RpcException e) when (e.StatusCode is StatusCode.Unavailable or StatusCode.DeadlineExceeded)
        {
            return ControlPlane.Role.Down;  // starting, or gone
        }
    }

    public async ValueTask DisposeAsync()
    {
        if (_process is { HasExited: false } p)
        {
            p.Kill();
            await p.WaitForExitAsync();
        }
        _process?.Dispose();
        _channel.Dispose();
    }
}

/// <summary>kill(2): SIGTERM has no managed API, and the time a signal is sent is what the failover is timed from.</summary>
internal static partial class Native
{
    [LibraryImport("libc", EntryPoint = "kill", SetLastError = true)]
    internal static partial int Kill(int pid, int signal);
}

/// <summary>A <c>remotecache-server</c> for the static pool: tcp on a port the system picks, one 256 MiB VM of 64 MiB regions.</summary>
internal sealed class ServerProcess : IAsyncDisposable
{
    private readonly Process _process;

    private ServerProcess(Process process, string endpoint)
    {
        _process = process;
        Endpoint = endpoint;
    }

    public string Endpoint { get; }

    public TimeSpan CpuTime => ControlPlane.CpuTimeOf(_process);

    public static async Task<ServerProcess> StartAsync(string admissionKey)
    {
        var start = new ProcessStartInfo(RemoteCacheServer.ExecutablePath) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in new[] { "--listen", "tcp:127.0.0.1:0", "--memory-limit", ControlPlane.ServerBytes.ToString(CultureInfo.InvariantCulture),
                                     "--region-size", ControlPlane.RegionBytes.ToString(CultureInfo.InvariantCulture), "--threads", "1", "--admission-key", admissionKey })
            start.ArgumentList.Add(a);
        var process = Process.Start(start)!;
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(15));
        string? endpoint = null;
        while (await process.StandardOutput.ReadLineAsync(timeout.Token) is { } line && line != "ready")
            if (line.StartsWith("listening tcp:", StringComparison.Ordinal))
                endpoint = line["listening ".Length..];
        // Drained from now on: a server whose log pipe fills up would block.
        _ = process.StandardOutput.ReadToEndAsync();
        _ = process.StandardError.ReadToEndAsync();
        return new ServerProcess(process, endpoint ?? throw new InvalidOperationException("the server did not say where it listens"));
    }

    public async ValueTask DisposeAsync()
    {
        if (!_process.HasExited)
            _process.Kill();
        await _process.WaitForExitAsync();
        _process.Dispose();
    }
}

/// <summary>
/// A static etcd cluster (Debian's etcd 3.4) on loopback, each member on its own client and peer ports, data in
/// <c>dir</c>; <c>--pre-vote=true</c>, without which a member that comes back forces an election (FACTS.md).
/// </summary>
internal sealed class EtcdMembers : IAsyncDisposable
{
    private const string Binary = "/usr/bin/etcd";
    private readonly List<Process> _processes = new();

    private EtcdMembers(string endpoints) => Endpoints = endpoints;

    public string Endpoints { get; }

    public TimeSpan CpuTime => ControlPlane.Sum(_processes.Select(ControlPlane.CpuTimeOf));

    public static async Task<EtcdMembers> StartAsync(string dir, int count)
    {
        if (!File.Exists(Binary))
            throw new FileNotFoundException($"{Binary} not found: install the Debian package 'etcd-server'");
        var ports = Enumerable.Range(0, count).Select(_ => (Client: ControlPlane.FreePort(), Peer: ControlPlane.FreePort())).ToList();
        string initial = string.Join(',', ports.Select((p, i) => $"m{i}=http://127.0.0.1:{p.Peer}"));
        var members = new EtcdMembers(string.Join(',', ports.Select(p => $"http://127.0.0.1:{p.Client}")));
        try
        {
            for (int i = 0; i < count; i++)
            {
                var start = new ProcessStartInfo(Binary) { RedirectStandardOutput = true, RedirectStandardError = true };
                foreach (string a in new[]
                         {
                             "--name", $"m{i}", "--data-dir", Path.Combine(dir, $"m{i}"),
                             "--listen-client-urls", $"http://127.0.0.1:{ports[i].Client}", "--advertise-client-urls", $"http://127.0.0.1:{ports[i].Client}",
                             "--listen-peer-urls", $"http://127.0.0.1:{ports[i].Peer}", "--initial-advertise-peer-urls", $"http://127.0.0.1:{ports[i].Peer}",
                             "--initial-cluster", initial, "--initial-cluster-state", "new", "--pre-vote=true",
                         })
                    start.ArgumentList.Add(a);
                var process = Process.Start(start)!;
                // Its log is drained, never read: a full pipe would stop it.
                _ = process.StandardOutput.ReadToEndAsync();
                _ = process.StandardError.ReadToEndAsync();
                members._processes.Add(process);
            }
            using var client = new EtcdClient(members.Endpoints);
            var waited = Stopwatch.StartNew();
            while (true)
            {
                try
                {
                    await client.PutAsync(new PutRequest { Key = ByteString.CopyFromUtf8("/bench/probe"), Value = ByteString.CopyFromUtf8("up") }, null, DateTime.UtcNow.AddSeconds(2));
                    return members;
                }
                catch (Exception e) when ((e is RpcException or HttpRequestException or OperationCanceledException) && waited.Elapsed < TimeSpan.FromSeconds(30))
                {
                    await Task.Delay(100);
                }
            }
        }
        catch
        {
            await members.DisposeAsync();
            throw;
        }
    }

    public async ValueTask DisposeAsync()
    {
        foreach (var p in _processes)
        {
            if (!p.HasExited)
                p.Kill();
            await p.WaitForExitAsync();
            p.Dispose();
        }
    }
}

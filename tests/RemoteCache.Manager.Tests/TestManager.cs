using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Net.Client;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.V1;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Manager.Tests;

/// <summary>
/// A manager in this process over a temporary state directory, with the local allocator (real remotecache-server
/// processes), three API keys (tenants alice and bob, operator ops), a small catalogue and synthetic SLO models.
/// Stop and start it again over the same state to test a restart.
/// </summary>
public sealed class TestManager : IAsyncDisposable
{
    public const string AliceKey = "alice-key-0123456789", BobKey = "bob-key-0123456789", OpsKey = "ops-key-0123456789";
    public const long AliceQuota = 2L << 30;
    public const long MiB = 1L << 20;

    private readonly string _dir = Directory.CreateTempSubdirectory("manager-").FullName;
    private WebApplication? _app;
    private GrpcChannel? _channel;

    /// <param name="verbsAddress">Local servers also listen for verbs there, and verbs is offered (with a synthetic model).</param>
    /// <param name="failureTimeout">Silence before a server is failed (default 2 s: four probe periods).</param>
    public TestManager(int warm = 2, string allocator = "local", TimeSpan? probePeriod = null, bool commitMemory = false, string? verbsAddress = null,
                       TimeSpan? failureTimeout = null)
    {
        var transports = verbsAddress is null ? new List<string> { "tcp", "shm" } : new List<string> { "tcp", "shm", "verbs" };
        Options = new ManagerOptions
        {
            StateDirectory = Path.Combine(_dir, "state"),
            Catalogue = Path.Combine(_dir, "catalogue.json"),
            Models = Path.Combine(_dir, "models"),
            Keys = Path.Combine(_dir, "keys.json"),
            Allocator = allocator,
            Warm = warm,
            CommitMemory = commitMemory,
            VerbsAddress = verbsAddress,
            Transports = transports,
            ProbePeriod = probePeriod ?? TimeSpan.FromMilliseconds(500),
            ProbeTimeout = TimeSpan.FromMilliseconds(500),
            FailureTimeout = failureTimeout ?? TimeSpan.FromSeconds(2),
        };
        File.WriteAllText(Options.Catalogue, Catalogue.ToJson());
        Directory.CreateDirectory(Options.Models);
        foreach (string transport in transports)
            Model(transport).Save(Path.Combine(Options.Models, $"{transport}-8.json"));
        File.WriteAllText(Options.Keys, KeysJson);
    }

    /// <summary>The API keys file of the three keys (also written for the cluster bed's manager processes).</summary>
    internal static string KeysJson => $$"""
            { "keys": [
              { "tenant": "alice", "sha256": "{{Hash(AliceKey)}}", "roles": ["tenant"], "quotaBytes": {{AliceQuota}} },
              { "tenant": "bob", "sha256": "{{Hash(BobKey)}}", "roles": ["tenant"] },
              { "tenant": "ops", "sha256": "{{Hash(OpsKey)}}", "roles": ["operator"] } ] }
            """;

    /// <summary>small: 256 MiB, 1 core, 0.02/h (spot 0.006); medium: 1 GiB, 2 cores, 0.10/h; regions of 64 MiB.</summary>
    public static VmCatalogue Catalogue { get; } = new()
    {
        RegionBytes = 64 * MiB,
        VmTypes = new[]
        {
            new VmType("small", 256 * MiB, 1, 0.02, 0.006, 4, 2),
            new VmType("medium", 1024 * MiB, 2, 0.10, null, 2, 0),
        },
    };

    public ManagerOptions Options { get; }

    public string StateDirectory => Options.StateDirectory;

    public byte[] AdmissionKey => File.ReadAllBytes(Path.Combine(StateDirectory, "admission.key"));

    public Uri? Address { get; private set; }

    public WebApplication App => _app ?? throw new InvalidOperationException("not started");

    /// <summary>Serves TLS with a self-signed certificate (for 127.0.0.1) written into the test's directory; clients trust only it.</summary>
    public X509Certificate2 UseTls()
    {
        using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest("CN=127.0.0.1", key, HashAlgorithmName.SHA256);
        var names = new SubjectAlternativeNameBuilder();
        names.AddIpAddress(System.Net.IPAddress.Loopback);
        request.CertificateExtensions.Add(names.Build());
        var certificate = request.CreateSelfSigned(DateTimeOffset.UtcNow.AddMinutes(-5), DateTimeOffset.UtcNow.AddDays(1));
        Options.Certificate = Path.Combine(_dir, "manager.pem");
        Options.CertificateKey = Path.Combine(_dir, "manager.key");
        File.WriteAllText(Options.Certificate, certificate.ExportCertificatePem());
        File.WriteAllText(Options.CertificateKey, key.ExportPkcs8PrivateKeyPem());
        _trusted = certificate;
        return certificate;
    }

    private X509Certificate2? _trusted;

    /// <summary>Changes the host's services before it is built (at every start), e.g. to add a gRPC interceptor.</summary>
    public Action<WebApplicationBuilder>? Configure { get; set; }

    public async Task StartAsync()
    {
        // A restart listens where the first start did, as a real manager's clients expect.
        var listen = new Uri($"{(_trusted is null ? "http" : "https")}://127.0.0.1:{Address?.Port ?? 0}");
        _app = await Program.BuildAsync(Options, listen, TextWriter.Null, CancellationToken.None,
                                        b =>
                                        {
                                            b.Logging.SetMinimumLevel(LogLevel.Warning);
                                            Configure?.Invoke(b);
                                        });
        await _app.StartAsync();
        Address = Program.ListenAddress(_app);
        if (Options.Store == ManagerOptions.EtcdStore)
            await SettledAsync();
        var handler = new System.Net.Http.SocketsHttpHandler();
        if (_trusted is { } trusted)
            handler.SslOptions.RemoteCertificateValidationCallback = (_, presented, _, _) => presented is not null && presented.GetCertHashString() == trusted.GetCertHashString();
        _channel = GrpcChannel.ForAddress(Address, new GrpcChannelOptions { HttpHandler = handler });
    }

    /// <summary>Who leads, as this manager sees it.</summary>
    public ILeadership Leadership => App.Services.GetRequiredService<ILeadership>();

    /// <summary>Waits (10 s at most) until this replica leads or follows a leader it knows: an election among replicas has settled.</summary>
    public Task SettledAsync() => RoleAsync(ManagerRole.Leader, ManagerRole.Follower);

    /// <summary>Waits (<paramref name="seconds"/> at most) until this replica's role is one of <paramref name="roles"/>; returns it.</summary>
    public async Task<ManagerRole> RoleAsync(ManagerRole role, ManagerRole? or = null, double seconds = 10)
    {
        var until = DateTime.UtcNow.AddSeconds(seconds);
        while (true)
        {
            var now = Leadership.Role;
            if (now == role || now == or)
                return now;
            if (DateTime.UtcNow > until)
                throw new TimeoutException($"the manager at {Address} is still {now} after {seconds} s, not {role}{(or is null ? "" : $" or {or}")}");
            await Task.Delay(20);
        }
    }

    public async Task StopAsync()
    {
        if (_channel is not null)
            await _channel.ShutdownAsync();
        _channel = null;
        if (_app is not null)
        {
            await _app.StopAsync();
            await _app.DisposeAsync();
        }
        _app = null;
    }

    public CacheManager.CacheManagerClient Tenant(string? key) => new(Invoker(key));

    /// <summary>The managed client of tenant <paramref name="key"/>, retrying a manager that is down every 100–200 ms.</summary>
    public RemoteCacheManagerClient ManagedClient(string key = AliceKey, Action<RemoteCacheManagerOptions>? configure = null)
    {
        var options = new RemoteCacheManagerOptions
        {
            Address = Address ?? throw new InvalidOperationException("not started"),
            ApiKey = key,
            CallTimeout = TimeSpan.FromSeconds(20),
            RetryLimit = TimeSpan.FromMilliseconds(200),
            Cache = new RemoteCacheOptions { OperationTimeout = TimeSpan.FromSeconds(5), ConnectTimeout = TimeSpan.FromSeconds(5) },
        };
        configure?.Invoke(options);
        return new RemoteCacheManagerClient(options);
    }

    public ServerPool.ServerPoolClient Operator(string? key = OpsKey) => new(Invoker(key));

    private CallInvoker Invoker(string? key)
    {
        var invoker = (_channel ?? throw new InvalidOperationException("not started")).CreateCallInvoker();
        return key is null ? invoker : invoker.Intercept(m =>
        {
            m.Add("authorization", "Bearer " + key);
            return m;
        });
    }

    /// <summary>Options that open <paramref name="cache"/> as the manager allocated it.</summary>
    public static RemoteCacheOptions ClientOptions(Cache cache) => new()
    {
        CacheId = cache.CacheId,
        Token = cache.Token,
        Capabilities = cache.Servers.Select(s => s.Capability).ToList(),
        RegionsPerServer = (int)cache.Servers[0].Regions,
        Config = new CacheConfig((int)cache.Config.ClientThreads, (int)cache.Config.ServerThreads, (int)cache.Config.BatchSize, (int)cache.Config.QueueDepth),
        OperationTimeout = TimeSpan.FromSeconds(5),
        ConnectTimeout = TimeSpan.FromSeconds(5),
    };

    public static Task<RemoteCacheClient> OpenAsync(Cache cache) =>
        RemoteCacheClient.OpenAsync(cache.Servers.Select(s => s.Endpoint), ClientOptions(cache));

    public async ValueTask DisposeAsync()
    {
        await StopAsync();
        // Servers holding caches outlive a manager on purpose; the test's are stopped here.
        foreach (string log in Directory.Exists(Path.Combine(StateDirectory, "local")) ? Directory.GetFiles(Path.Combine(StateDirectory, "local"), "*.log") : Array.Empty<string>())
            StopServer(Path.GetFileNameWithoutExtension(log));
        Directory.Delete(_dir, recursive: true);
    }

    /// <summary>Kills the local server <paramref name="serverId"/> (found by its command line).</summary>
    public static bool StopServer(string serverId)
    {
        if (ProcessOf(serverId) is not { } pid)
            return false;
        try
        {
            using var p = System.Diagnostics.Process.GetProcessById(pid);
            p.Kill();
            p.WaitForExit(5000);
            return true;
        }
        catch (Exception e) when (e is ArgumentException or InvalidOperationException)
        {
            return false;
        }
    }

    /// <summary>The live (not zombie) process whose command line names <paramref name="serverId"/>, or null.</summary>
    public static int? ProcessOf(string serverId)
    {
        foreach (string dir in Directory.GetDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), out int pid))
                continue;
            try
            {
                if (File.ReadAllText(Path.Combine(dir, "cmdline")).Split('\0').Contains(serverId) &&
                    !File.ReadAllText(Path.Combine(dir, "stat")).Contains(") Z ", StringComparison.Ordinal))
                    return pid;
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException)
            {
            }
        }
        return null;
    }

    /// <summary>Sends <paramref name="signal"/> ("STOP", "CONT", …) to process <paramref name="pid"/>.</summary>
    public static void Signal(int pid, string signal)
    {
        using var kill = System.Diagnostics.Process.Start("kill", new[] { "-" + signal, pid.ToString(System.Globalization.CultureInfo.InvariantCulture) });
        kill.WaitForExit();
        Assert.Equal(0, kill.ExitCode);
    }

    private static string Hash(string key) => Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(key)));

    // Reads: latency 2 µs · b · q / (s + 1) + 5 µs, throughput 1e5 · b · q · (s + 1); q ≤ 4, b ≤ 8, c = 0.
    internal static PerformanceModel Model(string transport)
    {
        int minS = transport == "tcp" ? 1 : 0;
        var points = new List<ModelPoint>();
        foreach (int s in new[] { 0, 1, 2 }.Where(s => s >= minS))
            foreach (int b in s == 0 ? new[] { 1 } : new[] { 1, 2, 4, 8 })
                foreach (int q in new[] { 1, 2, 4 })
                    points.Add(new ModelPoint(0, s, b, q, 5 + 2.0 * b * q / (s + 1), 1e5 * b * q * (s + 1)));
        return new PerformanceModel
        {
            Transport = transport,
            Distance = "same-host",
            RecordSize = 8,
            Machine = new MachineDescription("test", 2, 1L << 30, "Linux"),
            Measured = new MeasurementInfo("2026-11-23", "synthetic (tests)", "test", 1, 0),
            Space = new ConfigurationSpace(0, minS, 2, 8, 4),
            Operations = new Dictionary<SloOperation, List<ModelPoint>> { [SloOperation.Read] = points, [SloOperation.Write] = points },
        };
    }
}

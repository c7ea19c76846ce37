using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Net.Http;
using System.Security.Cryptography;
using System.Threading.Tasks;
using Grpc.Core;
using Grpc.Core.Interceptors;
using Grpc.Health.V1;
using Grpc.Net.Client;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Services;
using RemoteCache.Manager.V1;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// The files every manager of a bed shares, written once: the admission key (the servers have it too), the API keys of
/// <see cref="TestManager"/> (alice, bob, ops), its catalogue and a synthetic tcp model. Managers on one etcd prefix must
/// agree on the admission key and catalogue (the store refuses a manager whose differ).
/// </summary>
public sealed class ManagerFiles
{
    private ManagerFiles(string dir)
    {
        Directory = dir;
        System.IO.Directory.CreateDirectory(Path.Combine(dir, "models"));
        AdmissionKey = RandomNumberGenerator.GetBytes(32);
        ApiKeyStore.WritePrivate(AdmissionKeyFile, AdmissionKey);
        File.WriteAllText(KeysFile, TestManager.KeysJson);
        File.WriteAllText(CatalogueFile, TestManager.Catalogue.ToJson());
        TestManager.Model("tcp").Save(Path.Combine(ModelsDirectory, "tcp-8.json"));
    }

    public static ManagerFiles Create(Bed bed) => new(Path.Combine(bed.Directory, "manager-files"));

    public string Directory { get; }

    public byte[] AdmissionKey { get; }

    public string AdmissionKeyFile => Path.Combine(Directory, "admission.key");

    public string KeysFile => Path.Combine(Directory, "keys.json");

    public string CatalogueFile => Path.Combine(Directory, "catalogue.json");

    public string ModelsDirectory => Path.Combine(Directory, "models");
}

/// <summary>
/// A <c>remotecache-manager</c> process in its own host (the built RemoteCache.Manager.dll run with <c>dotnet</c>):
/// <c>--store etcd</c> on the bed's cluster, <c>--allocator static</c>, tcp only, listening on the host's address, port
/// 7400. Probes every 0.5 s and fails a server after 2 s of silence, so that failure scenarios take seconds.
/// </summary>
public sealed class BedManager : IAsyncDisposable
{
    public const int Port = 7400;
    private readonly ManagerFiles _files;
    private readonly string _etcdEndpoints;
    private readonly GrpcChannel _channel;

    private BedManager(BedHost host, ManagerFiles files, string etcdEndpoints, IReadOnlyList<string> extraArgs)
    {
        Host = host;
        _files = files;
        _etcdEndpoints = etcdEndpoints;
        ExtraArgs = extraArgs;
        StateDirectory = Path.Combine(Path.GetDirectoryName(files.Directory)!, $"{host.Name}.state");
        // Short keep-alive pings: a manager whose host went silent is noticed in seconds, and the channel connects
        // again (to the restarted manager at the same address) on the next call. Not shorter than 3 s: on a busy 2-core
        // machine a manager starting up (JIT, GC) misses a 1 s ping, and the call in flight fails with it.
        var handler = new SocketsHttpHandler
        {
            KeepAlivePingDelay = TimeSpan.FromSeconds(1), KeepAlivePingTimeout = TimeSpan.FromSeconds(3),
            ConnectTimeout = TimeSpan.FromSeconds(2), EnableMultipleHttp2Connections = true,
        };
        _channel = GrpcChannel.ForAddress(Address, new GrpcChannelOptions { HttpHandler = handler });
    }

    public BedHost Host { get; }

    public Uri Address => new($"http://{Host.Address}:{Port}");

    /// <summary><see cref="Address"/> without the path: what it advertises (<c>--advertise</c>), and what followers name as the leader.</summary>
    public string Origin => $"http://{Host.Address}:{Port}";

    /// <summary>Whether the process runs (not killed, or restarted since).</summary>
    public bool Running => Process is { HasExited: false };

    public string StateDirectory { get; }

    /// <summary>More flags for every start (e.g. a shorter <c>--default-lease</c>).</summary>
    public IReadOnlyList<string> ExtraArgs { get; }

    public BedProcess? Process { get; private set; }

    /// <summary>How many times it was started (a restart after a kill counts).</summary>
    public int Starts { get; private set; }

    /// <summary>Adds host <paramref name="name"/> and starts a manager there; waits until it answers.</summary>
    public static async Task<BedManager> StartAsync(Bed bed, ManagerFiles files, EtcdCluster etcd, string name = "mgr1",
                                                    IReadOnlyList<string>? extraArgs = null)
    {
        var host = await bed.AddHostAsync(name).ConfigureAwait(false);
        var manager = bed.Own(new BedManager(host, files, etcd.Endpoints, extraArgs ?? Array.Empty<string>()));
        await manager.StartAsync().ConfigureAwait(false);
        return manager;
    }

    /// <summary>Starts (or restarts) the process and waits until the operator API answers.</summary>
    public async Task StartAsync(TimeSpan? timeout = null)
    {
        if (Process is { HasExited: false })
            throw new InvalidOperationException($"the manager on {Host.Name} is running");
        var args = new List<string>
        {
            Path.Combine(AppContext.BaseDirectory, "RemoteCache.Manager.dll"),
            "--listen", Address.ToString().TrimEnd('/'), "--state-dir", StateDirectory,
            "--store", "etcd", "--etcd-endpoints", _etcdEndpoints, "--allocator", "static", "--transports", "tcp",
            "--keys", _files.KeysFile, "--admission-key", _files.AdmissionKeyFile, "--catalogue", _files.CatalogueFile, "--models", _files.ModelsDirectory,
            "--probe-period", "0.5", "--failure-timeout", "2",
            // What followers name in their not-leader refusals: the host's own address, which every other host reaches.
            "--advertise", Origin,
        };
        args.AddRange(ExtraArgs);
        Process = Host.Start("manager", "dotnet", args, new Dictionary<string, string>
        {
            // Information-level logs: the probes' misses and the store's trouble are what a failed scenario needs.
            ["Logging__LogLevel__Default"] = "Information", ["Logging__LogLevel__Microsoft.AspNetCore"] = "Warning",
            ["DOTNET_NOLOGO"] = "1",
        });
        Starts++;
        await WaitReadyAsync(timeout ?? TimeSpan.FromSeconds(30)).ConfigureAwait(false);
    }

    /// <summary>Waits until ListServers answers (the manager has loaded its state from etcd and serves).</summary>
    public async Task WaitReadyAsync(TimeSpan timeout)
    {
        var waited = Stopwatch.StartNew();
        Exception? last = null;
        while (waited.Elapsed < timeout)
        {
            if (Process is not { HasExited: false })
                throw new InvalidOperationException($"the manager on {Host.Name} is not running:\n{Process?.Tail()}");
            try
            {
                await Operator().ListServersAsync(new ListServersRequest(), deadline: DateTime.UtcNow.AddSeconds(2)).ResponseAsync.ConfigureAwait(false);
                return;
            }
            catch (Exception e) when (e is RpcException or OperationCanceledException)
            {
                last = e;
                await Task.Delay(100).ConfigureAwait(false);
            }
        }
        throw new TimeoutException(string.Create(CultureInfo.InvariantCulture,
            $"the manager on {Host.Name} did not answer within {timeout.TotalSeconds} s ({last?.Message}):\n{Process?.Tail()}"));
    }

    /// <summary>
    /// The gRPC health status of <paramref name="service"/> (<c>""</c>: serving as leader or follower;
    /// <see cref="ManagerHealth.LeaderService"/>: serving only on the leader), or null when no answer came within
    /// <paramref name="timeout"/> (1 s by default: the manager is down, or its store check hangs).
    /// </summary>
    public async Task<HealthCheckResponse.Types.ServingStatus?> HealthAsync(string service, TimeSpan? timeout = null)
    {
        try
        {
            var response = await new Health.HealthClient(_channel).CheckAsync(new HealthCheckRequest { Service = service },
                                                                              deadline: DateTime.UtcNow + (timeout ?? TimeSpan.FromSeconds(1))).ResponseAsync.ConfigureAwait(false);
            return response.Status;
        }
        catch (RpcException)
        {
            return null;
        }
    }

    /// <summary>Whether its health says it leads (<see cref="ManagerHealth.LeaderService"/> SERVING).</summary>
    public async Task<bool> IsLeaderAsync(TimeSpan? timeout = null) =>
        Running && await HealthAsync(ManagerHealth.LeaderService, timeout).ConfigureAwait(false) == HealthCheckResponse.Types.ServingStatus.Serving;

    /// <summary>kill -9 of the manager process.</summary>
    public Task KillAsync() => Process?.KillAsync() ?? Task.CompletedTask;

    /// <summary>SIGTERM: the manager stops as it does on a graceful shutdown.</summary>
    public Task StopAsync() => Process?.StopAsync() ?? Task.CompletedTask;

    public CacheManager.CacheManagerClient Tenant(string key = TestManager.AliceKey) => new(Invoker(key));

    public ServerPool.ServerPoolClient Operator(string key = TestManager.OpsKey) => new(Invoker(key));

    private CallInvoker Invoker(string key) => _channel.CreateCallInvoker().Intercept(m =>
    {
        m.Add("authorization", "Bearer " + key);
        return m;
    });

    public async ValueTask DisposeAsync()
    {
        await _channel.ShutdownAsync().ConfigureAwait(false);
        _channel.Dispose();
    }
}

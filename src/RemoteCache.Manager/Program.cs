using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Net;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.AspNetCore.Authentication;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.HealthChecks;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using RemoteCache.Manager.Admin;
using RemoteCache.Manager.Allocators;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Cluster;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.Security;
using RemoteCache.Manager.Services;
using RemoteCache.Manager.Slo;
using RemoteCache.Manager.Store;

namespace RemoteCache.Manager;

/// <summary><c>remotecache-manager</c>: the command line, and the service it hosts.</summary>
public static class Program
{
    /// <summary>Where the manager listens by default (loopback, HTTP/2 without TLS).</summary>
    public const string DefaultListen = "http://127.0.0.1:7400";

    public static Task<int> Main(string[] args) => Command().Parse(args).InvokeAsync();

    internal static RootCommand Command()
    {
        var listen = new Option<string>("--listen") { Description = $"Where to serve gRPC (http://HOST:PORT, or https://… with --certificate)", DefaultValueFactory = _ => DefaultListen };
        var state = new Option<string?>("--state-dir") { Description = "Database, admission key, generated API keys, local servers' logs [default: $XDG_STATE_HOME/remotecache-manager]" };
        var catalogue = new Option<string?>("--catalogue") { Description = "VM catalogue (JSON, docs/manager.md) [default: three local server sizes]" };
        var models = new Option<string?>("--models") { Description = "Directory of SLO performance models [default: the models shipped with the manager]" };
        var keys = new Option<string?>("--keys") { Description = "API keys file (JSON) [default: one key generated into the state directory]" };
        var admission = new Option<string?>("--admission-key") { Description = "The admission key file shared with the servers [default: generated into the state directory]" };
        var allocator = new Option<string>("--allocator") { Description = "local: start remotecache-server processes on this host; static: a pool of servers added with AddServer", DefaultValueFactory = _ => "local" };
        allocator.AcceptOnlyFromAmong("local", "static");
        var transports = new Option<string>("--transports") { Description = "Transports offered, preferred first when prices tie", DefaultValueFactory = _ => "tcp,shm" };
        var warm = new Option<int>("--warm") { Description = "Local allocator: idle servers kept running per VM type (an Allocate then starts none)", DefaultValueFactory = _ => 0 };
        var commit = new Option<bool>("--commit-memory") { Description = "Local allocator: servers commit memory ahead for new caches (remotecache-server --commit-memory): fills run at the transport's rate, idle servers hold their memory" };
        var verbs = new Option<string?>("--verbs-address") { Description = "Local allocator: an RDMA device's IPv4 address; the servers also listen for verbs there (offer verbs with --transports and a verbs model)" };
        var server = new Option<string?>("--server") { Description = "Local allocator: the remotecache-server to run [default: the one in the RemoteCache package]" };
        var probe = new Option<double>("--probe-period") { Description = "Seconds between probes of each server", DefaultValueFactory = _ => 2 };
        var failure = new Option<double>("--failure-timeout") { Description = "Seconds a server may miss every probe (over two probe periods at least) before it is declared failed", DefaultValueFactory = _ => 6 };
        var heartbeat = new Option<double>("--heartbeat-interval") { Description = "Seconds between the heartbeats of servers that join by themselves", DefaultValueFactory = _ => 1 };
        var heartbeatTtl = new Option<double>("--heartbeat-ttl") { Description = "Seconds without a heartbeat after which a joined server is failed (at least two intervals)", DefaultValueFactory = _ => 3 };
        var storeKind = new Option<string>("--store") { Description = "Where the state is kept: sqlite (a file in the state directory) or etcd (--etcd-endpoints)", DefaultValueFactory = _ => ManagerOptions.SqliteStore };
        var etcd = new EtcdOptions();
        var leaderLease = new Option<double>("--leader-lease") { Description = "--store etcd: seconds of the leader's etcd lease; a dead leader is replaced about this long after", DefaultValueFactory = _ => 2 };
        var advertise = new Option<string?>("--advertise") { Description = "--store etcd: the address clients reach this manager at (http://HOST:PORT), named by followers when they refer clients to the leader [default: --listen]" };
        var lease = new Option<double>("--default-lease") { Description = "Seconds of a lease when Allocate names none", DefaultValueFactory = _ => 600 };
        var retention = new Option<double>("--event-retention")
        {
            Description = $"Seconds an event is kept for watchers that resume from its sequence; older ones are compacted away (a watcher asking for one is refused OUT_OF_RANGE) [default: {ManagerOptions.DefaultEventRetention.TotalSeconds} (24 h)]",
            DefaultValueFactory = _ => ManagerOptions.DefaultEventRetention.TotalSeconds,
        };
        var perCache = new Option<int>("--events-per-cache")
        {
            Description = $"Events kept per cache at most, the oldest going first (the newest, e.g. a deleted cache's CacheDeleted, always stays) [default: {ManagerOptions.DefaultEventsPerCache}]",
            DefaultValueFactory = _ => ManagerOptions.DefaultEventsPerCache,
        };
        var replacementIdle = new Option<double>("--replacement-idle-timeout") { Description = "Seconds a pending replacement's mover may do nothing before the replacement is given back and the server's notice goes out again", DefaultValueFactory = _ => 120 };
        var certificate = new Option<string?>("--certificate") { Description = "PEM certificate: serve TLS (with --certificate-key)" };
        var certificateKey = new Option<string?>("--certificate-key") { Description = "PEM private key of --certificate" };
        var root = new RootCommand("remotecache-manager: allocates SLO-driven remote-memory caches over a priced VM catalogue, issues capabilities and leases, watches the servers")
        {
            listen, state, catalogue, models, keys, admission, allocator, transports, warm, commit, verbs, server, probe, failure, heartbeat, heartbeatTtl, storeKind, leaderLease, advertise, lease,
            retention, perCache, replacementIdle, certificate, certificateKey,
        };
        root.SetAction(async (parse, cancellationToken) =>
        {
            var options = new ManagerOptions
            {
                StateDirectory = parse.GetValue(state) ?? new ManagerOptions().StateDirectory,
                Catalogue = parse.GetValue(catalogue),
                Models = parse.GetValue(models),
                Keys = parse.GetValue(keys),
                AdmissionKey = parse.GetValue(admission),
                Allocator = parse.GetValue(allocator)!,
                Transports = parse.GetValue(transports)!.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries).ToList(),
                Warm = parse.GetValue(warm),
                CommitMemory = parse.GetValue(commit),
                VerbsAddress = parse.GetValue(verbs),
                ServerPath = parse.GetValue(server),
                ProbePeriod = TimeSpan.FromSeconds(parse.GetValue(probe)),
                FailureTimeout = TimeSpan.FromSeconds(parse.GetValue(failure)),
                HeartbeatInterval = Seconds(parse.GetValue(heartbeat)),
                HeartbeatTtl = Seconds(parse.GetValue(heartbeatTtl)),
                Store = parse.GetValue(storeKind)!,
                EtcdEndpoints = parse.GetValue(etcd.Endpoints),
                EtcdPrefix = parse.GetValue(etcd.Prefix)!,
                EtcdCaFile = parse.GetValue(etcd.Ca),
                EtcdCertFile = parse.GetValue(etcd.Cert),
                EtcdKeyFile = parse.GetValue(etcd.Key),
                EtcdUser = parse.GetValue(etcd.User),
                EtcdPasswordFile = parse.GetValue(etcd.PasswordFile),
                LeaderLease = TimeSpan.FromSeconds(parse.GetValue(leaderLease)),
                Advertise = parse.GetValue(advertise),
                DefaultLease = TimeSpan.FromSeconds(parse.GetValue(lease)),
                ReplacementIdleTimeout = TimeSpan.FromSeconds(parse.GetValue(replacementIdle)),
                EventRetention = Seconds(parse.GetValue(retention)),
                EventsPerCache = parse.GetValue(perCache),
                Certificate = parse.GetValue(certificate),
                CertificateKey = parse.GetValue(certificateKey),
            };
            try
            {
                string address = parse.GetValue(listen)!;
                if (!Uri.TryCreate(address, UriKind.Absolute, out var uri))
                    throw new StartupException($"--listen {address}: not an address (http://HOST:PORT or https://HOST:PORT)");
                await using var app = await BuildAsync(options, uri, parse.InvocationConfiguration.Output, cancellationToken).ConfigureAwait(false);
                await app.RunAsync(cancellationToken).ConfigureAwait(false);
                return 0;
            }
            catch (StartupException e)
            {
                await parse.InvocationConfiguration.Error.WriteLineAsync($"remotecache-manager: {e.Message}").ConfigureAwait(false);
                return 1;
            }
        });
        etcd.AddTo(root);
        root.Subcommands.Add(MigrateCommand(state, etcd));
        return root;
    }

    // `remotecache-manager migrate-state`: the SQLite state of a state directory, copied into an empty etcd prefix.
    private static Command MigrateCommand(Option<string?> state, EtcdOptions etcd)
    {
        var command = new Command("migrate-state", "Copies the SQLite state of --state-dir (caches, servers, events) into an empty etcd prefix, for --store etcd")
        {
            state,
        };
        etcd.AddTo(command);
        command.SetAction(async (parse, cancellationToken) =>
        {
            try
            {
                string dir = parse.GetValue(state) ?? new ManagerOptions().StateDirectory;
                var connection = new EtcdConnection(parse.GetValue(etcd.Endpoints) ?? "")
                {
                    CaFile = parse.GetValue(etcd.Ca), CertFile = parse.GetValue(etcd.Cert), KeyFile = parse.GetValue(etcd.Key),
                    User = parse.GetValue(etcd.User), PasswordFile = parse.GetValue(etcd.PasswordFile),
                };
                var (caches, servers, events) = await MigrateAsync(dir, connection, parse.GetValue(etcd.Prefix)!, cancellationToken).ConfigureAwait(false);
                await parse.InvocationConfiguration.Output.WriteLineAsync(string.Create(CultureInfo.InvariantCulture,
                    $"migrated {caches} caches, {servers} servers and {events} events from {dir} to etcd; start the manager with --store etcd")).ConfigureAwait(false);
                return 0;
            }
            catch (StartupException e)
            {
                await parse.InvocationConfiguration.Error.WriteLineAsync($"remotecache-manager migrate-state: {e.Message}").ConfigureAwait(false);
                return 1;
            }
        });
        return command;
    }

    /// <summary>Copies the SQLite state in <paramref name="stateDirectory"/> into an empty etcd prefix; returns what was copied.</summary>
    /// <exception cref="StartupException">No SQLite state there, etcd unreachable, or the prefix holds a state already.</exception>
    public static async Task<(int Caches, int Servers, int Events)> MigrateAsync(string stateDirectory, EtcdConnection etcd, string etcdPrefix,
                                                                                CancellationToken cancellationToken)
    {
        string path = Path.Combine(stateDirectory, "manager.db");
        if (!File.Exists(path))
            throw new StartupException($"{path} does not exist: no SQLite state to migrate");
        await using var from = await SqliteManagerStore.OpenAsync(path, cancellationToken).ConfigureAwait(false);
        var state = await from.LoadAsync(cancellationToken).ConfigureAwait(false) with { JoinTokens = await from.JoinTokensAsync(cancellationToken).ConfigureAwait(false) };
        var events = await from.AllEventsAsync(cancellationToken).ConfigureAwait(false);
        var floors = await from.EventFloorsAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            await using var to = await EtcdManagerStore.OpenForImportAsync(etcd, etcdPrefix, cancellationToken).ConfigureAwait(false);
            await to.ImportAsync(state, events, floors, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception e) when (e is StoreUnavailableException or InvalidOperationException or ArgumentException or UriFormatException)
        {
            throw new StartupException(e.Message, e);
        }
        return (state.Caches.Count, state.Servers.Count, events.Count);
    }

    // The etcd store's flags, shared by the manager and migrate-state.
    private sealed class EtcdOptions
    {
        public Option<string?> Endpoints { get; } = new("--etcd-endpoints") { Description = "--store etcd: the etcd members, comma-separated URLs (http://HOST:2379,…)" };
        public Option<string?> Ca { get; } = new("--etcd-ca") { Description = "--store etcd: PEM file of the CA that signed the members' certificates (https endpoints)" };
        public Option<string?> Cert { get; } = new("--etcd-cert") { Description = "--store etcd: PEM client certificate (with --etcd-key) for members that check clients' certificates" };
        public Option<string?> Key { get; } = new("--etcd-key") { Description = "--store etcd: PEM private key of --etcd-cert" };
        public Option<string?> User { get; } = new("--etcd-user") { Description = "--store etcd: the etcd user, for members with auth enabled (with --etcd-password-file)" };
        public Option<string?> PasswordFile { get; } = new("--etcd-password-file") { Description = "--store etcd: a file (mode 600) whose first line is --etcd-user's password" };
        public Option<string> Prefix { get; } = new("--etcd-prefix") { Description = "--store etcd: the prefix of the manager's keys", DefaultValueFactory = _ => EtcdManagerStore.DefaultPrefix };

        public void AddTo(Command command)
        {
            foreach (Option option in new Option[] { Endpoints, Ca, Cert, Key, User, PasswordFile, Prefix })
                command.Options.Add(option);
        }
    }

    /// <summary>The configured service, state recovered, not yet serving.</summary>
    /// <exception cref="StartupException">A file is missing or invalid, or the address is taken (the message says which).</exception>
    public static async Task<WebApplication> BuildAsync(ManagerOptions options, Uri listen, TextWriter console, CancellationToken cancellationToken,
                                                        Action<WebApplicationBuilder>? configure = null)
    {
        if (options.ProbePeriod <= TimeSpan.Zero || options.DefaultLease < options.MinLease || options.Warm < 0 || options.Transports.Count == 0)
            throw new StartupException("--probe-period must be positive, --default-lease at least 2 s, --warm 0 or more, --transports not empty");
        if (!(options.HeartbeatInterval >= TimeSpan.FromMilliseconds(100) && options.HeartbeatInterval <= TimeSpan.FromMinutes(1)))
            throw new StartupException($"--heartbeat-interval ({options.HeartbeatInterval.TotalSeconds} s) must be 0.1 to 60 s");
        if (!(options.HeartbeatTtl >= options.HeartbeatInterval * 2 && options.HeartbeatTtl <= TimeSpan.FromMinutes(10)))
            throw new StartupException($"--heartbeat-ttl ({options.HeartbeatTtl.TotalSeconds} s) must be at least two heartbeat intervals ({options.HeartbeatInterval.TotalSeconds * 2} s) and at most 600 s: one late heartbeat is no evidence of a failure");
        if (options.FailureTimeout < options.ProbePeriod)
            throw new StartupException($"--failure-timeout ({options.FailureTimeout.TotalSeconds} s) must be at least --probe-period ({options.ProbePeriod.TotalSeconds} s): one missed probe is no evidence of a failure");
        if (options.ReplacementIdleTimeout <= TimeSpan.Zero)
            throw new StartupException($"--replacement-idle-timeout must be positive, not {options.ReplacementIdleTimeout.TotalSeconds} s");
        if (options.EventRetention < ManagerOptions.MinEventRetention || options.EventRetention > ManagerOptions.MaxEventRetention)
            throw new StartupException($"--event-retention must be between {ManagerOptions.MinEventRetention.TotalSeconds} s and {ManagerOptions.MaxEventRetention.TotalSeconds} s, not {options.EventRetention.TotalSeconds} s");
        if (options.EventsPerCache < ManagerOptions.MinEventsPerCache || options.EventsPerCache > ManagerOptions.MaxEventsPerCache)
            throw new StartupException($"--events-per-cache must be between {ManagerOptions.MinEventsPerCache} and {ManagerOptions.MaxEventsPerCache}, not {options.EventsPerCache}");
        CheckVerbs(options);
        var endpoint = CheckListen(listen, options);
        CheckReplicas(options, listen);
        Directory.CreateDirectory(options.StateDirectory);
        var catalogue = Load(() => options.Catalogue is null ? VmCatalogue.LocalDefault : VmCatalogue.Load(options.Catalogue));
        string modelsDir = options.Models ?? RemoteCache.Slo.RemoteCacheSloModels.Directory;
        var models = Load(() => ModelLibrary.Load(modelsDir));
        foreach (string t in options.Transports.Where(t => !models.Transports.Contains(t)))
            throw new StartupException($"--transports names {t}, but {modelsDir} has no {t} model");
        string keysPath = options.Keys ?? Path.Combine(options.StateDirectory, "keys.json");
        if (options.Keys is null && !File.Exists(keysPath))
        {
            string key = ApiKeyStore.Generate(keysPath, "default");
            console.WriteLine($"generated {keysPath} with one API key (tenant 'default', roles tenant and operator): {key}");
            console.WriteLine("  it is shown only now; clients send it as 'authorization: Bearer <key>'");
        }
        var keys = Load(() => ApiKeyStore.Load(keysPath));
        string admissionPath = options.AdmissionKey ?? Path.Combine(options.StateDirectory, "admission.key");
        if (options.AdmissionKey is null && !File.Exists(admissionPath))
            ApiKeyStore.WritePrivate(admissionPath, RandomNumberGenerator.GetBytes(32));
        byte[] admissionKey = Load(() => ReadAdmissionKey(admissionPath));

        var builder = WebApplication.CreateBuilder(new WebApplicationOptions { Args = Array.Empty<string>(), ContentRootPath = AppContext.BaseDirectory });
        builder.WebHost.ConfigureKestrel(kestrel =>
        {
            // Headers up to this size are read and refused by name (an oversized authorization header gets UNAUTHENTICATED);
            // past Kestrel's defaults (32 KiB in all, 16 KiB a field) HTTP/2 would reset the connection without a word.
            kestrel.Limits.MaxRequestHeadersTotalSize = ApiKeyAuthenticationHandler.MaxHeaderBytes;
            kestrel.Limits.Http2.MaxRequestHeaderFieldSize = ApiKeyAuthenticationHandler.MaxHeaderBytes;
            Listen(kestrel, listen, endpoint.Address, endpoint.Certificate);
        });
        // Defaults beneath every other source (Logging__LogLevel__Microsoft.AspNetCore=Information turns requests back on):
        // ASP.NET Core logs each request, and gRPC each refusal a service answers with, at Information; the manager logs
        // what it did (allocations, replacements, elections) itself.
        builder.Configuration.Sources.Insert(0, new Microsoft.Extensions.Configuration.Memory.MemoryConfigurationSource
        {
            InitialData = new Dictionary<string, string?>
            {
                ["Logging:LogLevel:Default"] = "Information",
                ["Logging:LogLevel:Microsoft.AspNetCore"] = "Warning",
                ["Logging:LogLevel:Grpc"] = "Warning",
            },
        });
        builder.Logging.AddSimpleConsole(o => { o.SingleLine = true; o.TimestampFormat = "HH:mm:ss.fff "; });
        var services = builder.Services;
        services.AddSingleton(Options.Create(options));
        services.AddSingleton(catalogue);
        services.AddSingleton(models);
        services.AddSingleton(keys);
        services.AddSingleton(TimeProvider.System);
        services.AddSingleton<ManagerMetrics>();
        var store = await OpenStoreAsync(options, new StoreIdentity(admissionKey, catalogue.ToJson()), cancellationToken).ConfigureAwait(false);
        services.AddSingleton<IManagerStore>(_ => store);  // a factory: the container disposes it (closing the database) with the app
        if (store is EtcdManagerStore etcd)
        {
            // Registered before the worker, so that it stops after it: the duties end, then the lead is handed over.
            services.AddSingleton(sp => new EtcdLeadership(etcd, () => options.Advertise ?? AddressOf(sp.GetRequiredService<IServer>()), options.Allocator,
                                                           options.LeaderLease, sp.GetRequiredService<ILogger<EtcdLeadership>>(),
                                                           sp.GetRequiredService<IHostApplicationLifetime>()));
            services.AddSingleton<ILeadership>(sp => sp.GetRequiredService<EtcdLeadership>());
            services.AddHostedService(sp => sp.GetRequiredService<EtcdLeadership>());
        }
        else
        {
            services.AddSingleton<ILeadership, SoleLeadership>();
        }
        var serverKeys = new ServerKeys(admissionKey);
        services.AddSingleton(serverKeys);
        services.AddSingleton<IServerAdmin>(new NativeServerAdmin(serverKeys));
        services.AddSingleton<IServerAllocator>(sp => options.Allocator == StaticPoolAllocator.AllocatorName
            ? new StaticPoolAllocator(catalogue)
            : new LocalProcessAllocator(catalogue, new LocalServerSettings(options.ServerPath ?? RemoteCacheServer.ExecutablePath, Path.Combine(options.StateDirectory, "local"),
                                                                           admissionPath, options.Warm, options.CommitMemory, options.VerbsAddress),
                                        sp.GetRequiredService<ILoggerFactory>().CreateLogger<LocalProcessAllocator>()));
        // The core: the shared state and the units that work on it, each with the services it uses.
        services.AddSingleton(options);
        services.AddSingleton<EventHub>();
        services.AddSingleton<ManagerState>();
        services.AddSingleton<CacheServers>();
        services.AddSingleton<CacheViews>();
        services.AddSingleton<TenantCalls>();
        services.AddSingleton<Replacements>();
        services.AddSingleton<Pool>();
        services.AddSingleton<Duties>();
        services.AddSingleton<Membership>();
        services.AddHostedService<ManagerWorker>();
        services.AddGrpc(grpc =>
        {
            grpc.Interceptors.Add<InputBoundsInterceptor>();
            grpc.Interceptors.Add<LeaderGateInterceptor>();
            grpc.MaxReceiveMessageSize = InputBoundsInterceptor.MaxMessageBytes;
        });
        ManagerHealth.Add(services, store, options.Store);
        services.AddAuthentication(ApiKeyAuthenticationHandler.SchemeName)
                .AddScheme<AuthenticationSchemeOptions, ApiKeyAuthenticationHandler>(ApiKeyAuthenticationHandler.SchemeName, null);
        services.AddAuthorizationBuilder()
                .AddPolicy(Roles.Tenant, p => p.RequireRole(Roles.Tenant))
                .AddPolicy(Roles.Operator, p => p.RequireRole(Roles.Operator));

        configure?.Invoke(builder);
        var app = builder.Build();
        app.UseAuthentication();
        app.UseAuthorization();
        app.MapGrpcService<CacheManagerService>();
        app.MapGrpcService<ServerPoolService>();
        app.MapGrpcService<ServerMembershipService>();
        app.MapGrpcHealthChecksService().AllowAnonymous();

        var pool = app.Services.GetRequiredService<Pool>();  // created now, so that the container disposes it (free local servers stop)
        if (app.Services.GetRequiredService<ILeadership>() is EtcdLeadership replica)
        {
            await JoinAsync(replica, cancellationToken).ConfigureAwait(false);
            await app.Services.GetRequiredService<ManagerState>().RefreshAsync(cancellationToken).ConfigureAwait(false);  // what it serves until it leads, if ever
        }
        else
        {
            // The sole manager takes its state over before it serves, so that a failure to is a failure to start.
            await app.Services.GetRequiredService<Duties>().TakeOverAsync(cancellationToken).ConfigureAwait(false);
            app.Services.GetRequiredService<ILeadership>().Serve(CancellationToken.None);
        }
        if (app.Services.GetRequiredService<IServerAllocator>() is LocalProcessAllocator local)
            local.ServerExited += id => _ = pool.ServerFailedAsync(id, "its process ended", CancellationToken.None);
        app.Lifetime.ApplicationStarted.Register(() => console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"remotecache-manager serving on {listen} ({options.Allocator} allocator, {catalogue.VmTypes.Count} VM types, transports {string.Join(",", options.Transports)}, state in {options.StateDirectory})")));
        return app;
    }

    // Seconds from the command line as a duration, clamped to what TimeSpan holds (NaN: its least) so that the bounds
    // checked later refuse it rather than TimeSpan throwing.
    private static TimeSpan Seconds(double seconds)
    {
        double limit = TimeSpan.MaxValue.TotalSeconds / 2;
        return double.IsNaN(seconds) ? TimeSpan.MinValue : TimeSpan.FromSeconds(Math.Clamp(seconds, -limit, limit));
    }

    /// <summary>Where a started manager serves (with port 0 in --listen, the port the system chose).</summary>
    public static Uri ListenAddress(WebApplication app) =>
        new(app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First());

    // The address a started server listens on, or null before it listens.
    private static string? AddressOf(IServer server) =>
        server.Features.Get<IServerAddressesFeature>()?.Addresses.FirstOrDefault();

    private static async Task JoinAsync(EtcdLeadership replica, CancellationToken cancellationToken)
    {
        try
        {
            await replica.CheckJoinAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (InvalidOperationException e)
        {
            throw new StartupException($"--store etcd: {e.Message}", e);
        }
        catch (Grpc.Core.RpcException e)
        {
            throw new StartupException($"--store etcd: etcd did not answer: {e.Status.Detail}", e);
        }
    }

    // Replicas name each other to clients: an address a client can reach.
    private static void CheckReplicas(ManagerOptions options, Uri listen)
    {
        if (options.Store != ManagerOptions.EtcdStore)
            return;
        if (options.LeaderLease < TimeSpan.FromSeconds(2))
            throw new StartupException($"--leader-lease {options.LeaderLease.TotalSeconds} s: etcd grants no lease below 2 s");
        if (options.Advertise is { } advertise)
        {
            if (!Uri.TryCreate(advertise, UriKind.Absolute, out var uri) || uri.Scheme is not ("http" or "https") || uri.PathAndQuery != "/")
                throw new StartupException($"--advertise {Input.Quote(advertise)}: not an address (http://HOST:PORT or https://HOST:PORT)");
        }
        else if (IPAddress.TryParse(listen.Host, out var ip) && (ip.Equals(IPAddress.Any) || ip.Equals(IPAddress.IPv6Any)))
        {
            throw new StartupException($"--listen {listen} is on every interface: with --store etcd, say with --advertise where clients reach this manager");
        }
    }

    // Verbs caches need servers that listen for verbs: the local allocator's, given an RDMA device's address; a static
    // pool's servers are registered with the endpoints they have.
    private static void CheckVerbs(ManagerOptions options)
    {
        bool local = options.Allocator != StaticPoolAllocator.AllocatorName;
        if (options.VerbsAddress is { } address)
        {
            if (!local)
                throw new StartupException($"--verbs-address {address} is for the local allocator's servers; a static pool's servers are added with their verbs endpoints (AddServer)");
            if (!IPAddress.TryParse(address, out var ip) || ip.AddressFamily != System.Net.Sockets.AddressFamily.InterNetwork)
                throw new StartupException($"--verbs-address {address} is not an IPv4 address (an RDMA device's interface, e.g. rxe0's)");
        }
        else if (local && options.Transports.Contains("verbs"))
        {
            throw new StartupException("--transports names verbs, but the local allocator's servers listen for verbs only with --verbs-address IP (an RDMA device's)");
        }
    }

    // Checked before anything starts, so that a wrong address or certificate is a clear refusal, not a host failure.
    private static (IPAddress? Address, X509Certificate2? Certificate) CheckListen(Uri listen, ManagerOptions options)
    {
        if (listen.Scheme is not ("http" or "https"))
            throw new StartupException($"--listen {listen}: the scheme must be http or https");
        bool tls = listen.Scheme == "https";
        if (tls != (options.Certificate is not null))
            throw new StartupException(tls ? "--listen https://… needs --certificate and --certificate-key" : "--certificate needs --listen https://…");
        IPAddress? address = null;
        if (listen.Host is not "localhost" && !IPAddress.TryParse(listen.Host, out address))
            throw new StartupException($"--listen {listen}: the host must be an IP address or localhost");
        X509Certificate2? certificate = null;
        if (tls)
            certificate = Load(() =>
            {
                try
                {
                    return X509Certificate2.CreateFromPemFile(options.Certificate!, options.CertificateKey);
                }
                catch (CryptographicException e)
                {
                    throw new FormatException($"--certificate {options.Certificate}: {e.Message}", e);
                }
            });
        return (address, certificate);
    }

    private static void Listen(KestrelServerOptions kestrel, Uri listen, IPAddress? address, X509Certificate2? certificate)
    {
        void Configure(ListenOptions o)
        {
            o.Protocols = HttpProtocols.Http2;
            if (certificate is not null)
                o.UseHttps(certificate);
        }
        if (address is null)
            kestrel.ListenLocalhost(listen.Port, Configure);
        else
            kestrel.Listen(address, listen.Port, Configure);
    }

    private static async Task<IManagerStore> OpenStoreAsync(ManagerOptions options, StoreIdentity identity, CancellationToken cancellationToken)
    {
        switch (options.Store)
        {
            case ManagerOptions.SqliteStore:
                return await SqliteManagerStore.OpenAsync(Path.Combine(options.StateDirectory, "manager.db"), cancellationToken).ConfigureAwait(false);
            case ManagerOptions.EtcdStore:
                EtcdManagerStore? etcd = null;
                try
                {
                    etcd = await EtcdManagerStore.OpenAsync(options.EtcdConnection, options.EtcdPrefix, cancellationToken).ConfigureAwait(false);
                    await etcd.ClaimAsync(identity, cancellationToken).ConfigureAwait(false);
                    return etcd;
                }
                catch (Exception e) when (e is StoreUnavailableException or InvalidOperationException or ArgumentException or UriFormatException)
                {
                    if (etcd is not null)
                        await etcd.DisposeAsync().ConfigureAwait(false);
                    throw new StartupException($"--store etcd: {e.Message}", e);
                }
            default:
                throw new StartupException($"--store {options.Store}: '{ManagerOptions.SqliteStore}' or '{ManagerOptions.EtcdStore}'");
        }
    }

    private static byte[] ReadAdmissionKey(string path)
    {
        if ((File.GetUnixFileMode(path) & (UnixFileMode.GroupRead | UnixFileMode.GroupWrite | UnixFileMode.OtherRead | UnixFileMode.OtherWrite)) != 0)
            throw new FormatException($"the admission key file {path} is readable or writable by others: chmod 600 it");
        byte[] key = File.ReadAllBytes(path);
        if (key.Length < RemoteCacheCapability.MinAdmissionKeyBytes)
            throw new FormatException($"the admission key in {path} has {key.Length} bytes; at least {RemoteCacheCapability.MinAdmissionKeyBytes} are needed");
        return key;
    }

    private static T Load<T>(Func<T> load)
    {
        try
        {
            return load();
        }
        catch (Exception e) when (e is FormatException or IOException or UnauthorizedAccessException)
        {
            throw new StartupException(e.Message, e);
        }
    }
}

/// <summary>The manager cannot start; the message says why.</summary>
public sealed class StartupException : Exception
{
    public StartupException(string message) : base(message)
    {
    }

    public StartupException(string message, Exception inner) : base(message, inner)
    {
    }
}

using System;
using System.Collections.Generic;
using System.CommandLine;
using System.IO;
using System.Linq;
using Garnet.server;
using Microsoft.Extensions.Logging;
using RemoteCache.Slo;
using Tsavorite.core;

namespace RemoteCache.Garnet.Host;

/// <summary>The tool's own options (--rc-*): where Garnet's logs get their caches, and how large.</summary>
internal sealed class HostOptions
{
    private const int MaxUriLength = 2048;

    private static readonly Option<string[]> s_managers = new("--rc-manager")
    {
        Description = "The RemoteCache managers that create the caches (repeated or comma-separated)",
        HelpName = "URL[,URL…]",
        AllowMultipleArgumentsPerToken = false,
    };
    private static readonly Option<string?> s_apiKeyFile = new("--rc-api-key-file") { Description = "The tenant's API key for the managers, in this file", HelpName = "FILE" };
    private static readonly Option<string[]> s_servers = new("--rc-servers")
    {
        Description = "Instead of a manager: remotecache-server endpoints to open the caches on directly (shm:NAME, tcp:HOST:PORT), spread over all of them",
        HelpName = "ENDPOINT[,ENDPOINT…]",
    };
    private static readonly Option<string> s_regionSize = new("--rc-region-size") { Description = "With --rc-servers: the servers' region size (their --region-size)", DefaultValueFactory = _ => "1m", HelpName = "SIZE" };
    private static readonly Option<string> s_cacheSize = new("--rc-cache-size")
    {
        Description = "Remote memory for Garnet's main log past its --memory: a whole number of its --segment",
        HelpName = "SIZE",
        Required = true,
    };
    private static readonly Option<string?> s_objectCacheSize = new("--rc-object-cache-size")
    {
        Description = "Remote memory for the object log (hashes, lists, sets…): a whole number of its --object-log-segment; 0 keeps it on Garnet's files (default: as --rc-cache-size)",
        HelpName = "SIZE",
    };
    private static readonly Option<double?> s_readUs = new("--rc-read-us") { Description = "The caches' SLO: mean 512 B read latency, in microseconds", HelpName = "US" };
    private static readonly Option<double?> s_ops = new("--rc-ops") { Description = "The caches' SLO: reads per second", HelpName = "N" };
    private static readonly Option<string?> s_transport = new("--rc-transport") { Description = "The transport the managers place the caches on (shm, tcp, verbs)", HelpName = "NAME" };
    private static readonly Option<bool> s_cacheOnly = new("--rc-cache-only") { Description = "No files under the logs: the cache is their only copy (lost with its server; no --recover)" };
    private static readonly Option<bool> s_verbose = new("--rc-verbose") { Description = "Log the devices' set-up and every tier event" };

    /// <summary>The options that take no value.</summary>
    public static readonly IReadOnlySet<string> Flags = new HashSet<string> { s_cacheOnly.Name, s_verbose.Name };

    public IReadOnlyList<Uri> Managers { get; private init; } = Array.Empty<Uri>();
    public string? ApiKey { get; private init; }
    public IReadOnlyList<string> Servers { get; private init; } = Array.Empty<string>();
    public long RegionSize { get; private init; }
    public long CacheSize { get; private init; }
    public long ObjectCacheSize { get; private init; }
    public RemoteCacheSlo? Slo { get; private init; }
    public string? Transport { get; private init; }
    public bool CacheOnly { get; private init; }
    public bool Verbose { get; private init; }

    public static RootCommand Command()
    {
        var root = new RootCommand("remotecache-garnet's own options");
        foreach (var option in new Option[] { s_managers, s_apiKeyFile, s_servers, s_regionSize, s_cacheSize, s_objectCacheSize, s_readUs, s_ops, s_transport, s_cacheOnly, s_verbose })
            root.Options.Add(option);
        return root;
    }

    /// <exception cref="ArgumentException">An option's value is wrong (the message names it).</exception>
    public static HostOptions From(ParseResult parse)
    {
        var managers = List(parse.GetValue(s_managers)).Select(m => Uri.TryCreate(m, UriKind.Absolute, out var uri) && m.Length <= MaxUriLength
            ? uri : throw new ArgumentException($"--rc-manager '{Shorten(m)}' is not an absolute URL")).ToList();
        var servers = List(parse.GetValue(s_servers));
        if ((managers.Count > 0) == (servers.Count > 0))
            throw new ArgumentException("give the caches' managers (--rc-manager URL) or their servers (--rc-servers ENDPOINT,…), one of the two");
        string? keyFile = parse.GetValue(s_apiKeyFile);
        if (keyFile is not null && servers.Count > 0)
            throw new ArgumentException("--rc-api-key-file is for the managers; servers opened directly (--rc-servers) take none");
        long cacheSize = Size(parse.GetRequiredValue(s_cacheSize), s_cacheSize.Name, allowZero: false);
        double? readUs = parse.GetValue(s_readUs), ops = parse.GetValue(s_ops);
        if (readUs is <= 0 or > 1e6 || ops is < 0 or > 1e9)
            throw new ArgumentException("--rc-read-us must be in (0, 1e6] and --rc-ops in [0, 1e9]");
        return new HostOptions
        {
            Managers = managers,
            ApiKey = keyFile is null ? null : ReadKey(keyFile),
            Servers = servers,
            RegionSize = Size(parse.GetRequiredValue(s_regionSize), s_regionSize.Name, allowZero: false),
            CacheSize = cacheSize,
            ObjectCacheSize = parse.GetValue(s_objectCacheSize) is { } objects ? Size(objects, s_objectCacheSize.Name, allowZero: true) : cacheSize,
            Slo = readUs is null && ops is null ? null : new RemoteCacheSlo
            {
                ReadLatency = readUs is { } us ? TimeSpan.FromMicroseconds(us) : null,
                Throughput = ops ?? 0,
                RecordSize = RemoteCacheDevice.DefaultSlo.RecordSize,
            },
            Transport = parse.GetValue(s_transport),
            CacheOnly = parse.GetValue(s_cacheOnly),
            Verbose = parse.GetValue(s_verbose),
        };
    }

    /// <summary>The manager's cache for one of Garnet's logs: null leaves the log on Garnet's files.</summary>
    public ManagedCacheRequest? Request(FileDescriptor file) =>
        Capacity(file) is > 0 and var capacity ? new ManagedCacheRequest { Capacity = capacity, Slo = Slo, Transport = Transport } : null;

    /// <summary>A cache opened directly on <see cref="Servers"/> for one of Garnet's logs: null leaves the log on Garnet's files.</summary>
    public RemoteCacheClient? OpenDirect(FileDescriptor file, ILoggerFactory loggers)
    {
        long capacity = Capacity(file);
        if (capacity == 0)
            return null;
        long perServer = RegionSize * Servers.Count;
        if (capacity % perServer != 0)
            throw new ArgumentException($"--rc-cache-size refused for {file.fileName}: {capacity} bytes is not a whole number of regions of {RegionSize} bytes on each of {Servers.Count} servers");
        return RemoteCacheClient.Open(Servers.ToArray(), new RemoteCacheOptions
        {
            RegionsPerServer = checked((int)(capacity / perServer)),
            Name = $"garnet-{file.fileName}",
            Exclusive = true,
            LoggerFactory = loggers,
        });
    }

    private long Capacity(FileDescriptor file) => file.fileName == RemoteCacheDeviceFactoryCreator.RemoteLogs[0] ? CacheSize : ObjectCacheSize;

    private static List<string> List(string[]? values) =>
        (values ?? Array.Empty<string>()).SelectMany(v => v.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries)).ToList();

    // Sizes as Garnet writes them (64m, 1g, 4096).
    private static long Size(string text, string option, bool allowZero)
    {
        if (text.Length > 32 || !ServerOptions.TryParseSize(text, out long bytes) || bytes < 0 || (bytes == 0 && !allowZero))
            throw new ArgumentException($"{option} '{Shorten(text)}' is not a size Garnet's way ({(allowZero ? "0, " : "")}64m, 1g, 4096)");
        return bytes;
    }

    private static string ReadKey(string path)
    {
        try
        {
            var info = new FileInfo(path);
            if (info.Exists && info.Length > 4096)
                throw new ArgumentException($"--rc-api-key-file {path}: {info.Length} bytes is not an API key");
            return File.ReadAllText(path).Trim();
        }
        catch (IOException e)
        {
            throw new ArgumentException($"--rc-api-key-file {path}: {e.Message}");
        }
        catch (UnauthorizedAccessException e)
        {
            throw new ArgumentException($"--rc-api-key-file {path}: {e.Message}");
        }
    }

    /// <summary>What a refusal quotes of an argument: at most its first 40 characters.</summary>
    internal static string Shorten(string s) => s.Length <= 40 ? s : s[..40] + "…";
}

using System;
using System.Collections.Generic;
using System.CommandLine;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using System.Threading.Tasks;
using Garnet;
using Garnet.server;
using Microsoft.Extensions.Logging;
using Tsavorite.core;

namespace RemoteCache.Garnet.Host;

/// <summary>
/// remotecache-garnet [Garnet's options] --rc-cache-size SIZE (--rc-manager URL | --rc-servers ENDPOINTS) [--rc-* options]:
/// Garnet with its storage tier on, its main and object logs on a RemoteCache cache in front of its files.
/// </summary>
public static class Program
{
    private const string Prefix = "--rc-";

    public static async Task<int> Main(string[] args)
    {
        var (ours, garnets) = Split(args);
        var root = HostOptions.Command();
        var parse = root.Parse(ours);
        if (args.Any(a => a is "-h" or "--help" or "-?"))
        {
            Console.WriteLine("remotecache-garnet: Garnet whose log tier past memory is a RemoteCache cache in front of its files.");
            Console.WriteLine("Usage: remotecache-garnet [Garnet's options] [RemoteCache options]\n");
            root.Parse(new[] { "--help" }).Invoke();
            Console.WriteLine("\nGarnet's options (as garnet-server takes them; --storage-tier is implied):");
            using var quiet = LoggerFactory.Create(_ => { });
            GarnetCommandLine.Parse(new[] { "--help" }, quiet);
            return 0;
        }
        if (parse.Errors.Count > 0)
        {
            foreach (var error in parse.Errors)
                Console.Error.WriteLine($"remotecache-garnet: {error.Message}");
            return 2;
        }
        HostOptions options;
        try
        {
            options = HostOptions.From(parse);
        }
        catch (ArgumentException e)
        {
            Console.Error.WriteLine($"remotecache-garnet: {e.Message}");
            return 2;
        }

        using var loggers = LoggerFactory.Create(b => b.AddSimpleConsole(o => { o.SingleLine = true; o.TimestampFormat = "HH:mm:ss "; })
                                                       .SetMinimumLevel(options.Verbose ? LogLevel.Debug : LogLevel.Information));
        var log = loggers.CreateLogger("remotecache-garnet");
        var parsed = GarnetCommandLine.Parse(Implied(garnets, log), loggers);
        if (parsed.Options is not { } garnet)
        {
            if (parsed.ExitGracefully)
                return 0;
            Console.Error.WriteLine($"remotecache-garnet: Garnet refused its options{(parsed.Invalid.Count > 0 ? ": " + string.Join(", ", parsed.Invalid.Select(Quote)) : "")}");
            return 2;
        }
        if (Refusal(garnet, options) is { } refusal)
        {
            Console.Error.WriteLine($"remotecache-garnet: {refusal}");
            return 2;
        }

        await using var manager = options.Managers.Count > 0
            ? new RemoteCacheManagerClient(new RemoteCacheManagerOptions { Addresses = options.Managers.ToList(), ApiKey = options.ApiKey, Cache = new RemoteCacheOptions { LoggerFactory = loggers } })
            : null;
        var local = garnet.DeviceFactoryCreator ?? throw new InvalidOperationException("Garnet's options have no device factory for its files");
        var creator = manager is not null
            ? RemoteCacheDeviceFactoryCreator.ThroughManager(local, manager, options.Request, loggers, options.CacheOnly)
            : new RemoteCacheDeviceFactoryCreator(local, file => options.OpenDirect(file, loggers), loggers, options.CacheOnly);
        garnet.DeviceFactoryCreator = creator;

        GarnetServer server;
        try
        {
            server = new GarnetServer(garnet, loggers);  // creates the devices, and so the caches
        }
        catch (Exception e) when (Unwrap(e) is RemoteCacheManagerException or RemoteCacheException)
        {
            Console.Error.WriteLine($"remotecache-garnet: Garnet did not start: its log's cache was refused: {Unwrap(e).Message}");
            await creator.WhenReleasedAsync();
            return 1;
        }
        using var stop = new CancellationTokenSource();
        using var sigterm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, c => { c.Cancel = true; stop.Cancel(); });
        using var sigint = PosixSignalRegistration.Create(PosixSignal.SIGINT, c => { c.Cancel = true; stop.Cancel(); });
        try
        {
            server.Start();
            foreach (var device in creator.Devices)
                log.LogInformation("Log on remote memory: {Device}", device.FileName);
            log.LogInformation("ready: Garnet on {EndPoints}", string.Join(", ", garnet.EndPoints.Select(e => e.ToString())));
            await Task.Delay(Timeout.Infinite, stop.Token).ContinueWith(_ => { }, TaskScheduler.Default);
            log.LogInformation("stopping");
        }
        finally
        {
            server.Dispose();  // keeps the log and checkpoint files; its devices give their caches back
            await creator.WhenReleasedAsync();
        }
        return 0;
    }

    // The arguments that are ours (--rc-NAME VALUE, --rc-NAME=VALUE, a --rc- flag) and Garnet's (the rest, in order).
    internal static (string[] Ours, string[] Garnets) Split(IReadOnlyList<string> args)
    {
        var ours = new List<string>();
        var garnets = new List<string>();
        for (int i = 0; i < args.Count; i++)
        {
            string arg = args[i];
            if (!arg.StartsWith(Prefix, StringComparison.Ordinal))
            {
                garnets.Add(arg);
                continue;
            }
            ours.Add(arg);
            if (!arg.Contains('=') && !HostOptions.Flags.Contains(arg) && i + 1 < args.Count)
                ours.Add(args[++i]);
        }
        return (ours.ToArray(), garnets.ToArray());
    }

    // What the tool needs of Garnet, unless the command line says otherwise: the storage tier (the log past memory is
    // what goes on remote memory), one database (every database's logs have the same names) and the portable file device
    // (Garnet's native one needs glibc 2.38).
    internal static string[] Implied(string[] garnets, ILogger log)
    {
        var args = new List<string>(garnets);
        if (!garnets.Contains("--storage-tier"))
            args.Add("--storage-tier");
        if (!garnets.Any(a => a.StartsWith("--max-databases", StringComparison.Ordinal)))
            args.AddRange(new[] { "--max-databases", "1" });
        if (!garnets.Any(a => a.StartsWith("--device-type", StringComparison.Ordinal)))
        {
            args.AddRange(new[] { "--device-type", nameof(DeviceType.RandomAccess) });
            log.LogDebug("Garnet's files use its RandomAccess device (give --device-type to choose another)");
        }
        return args.ToArray();
    }

    // Garnet's options the tool cannot run with.
    internal static string? Refusal(GarnetServerOptions garnet, HostOptions options)
    {
        if (garnet.MaxDatabases > 1)
            return $"--max-databases {garnet.MaxDatabases} refused: every Garnet database names its logs alike (Store/hlog), so two would write one cache; give 1";
        if (garnet.Recover && options.CacheOnly)
            return "--recover refused with --rc-cache-only: recovery reads the checkpoint's log from Garnet's files, and with --rc-cache-only the log " +
                   "has none (the cache is its only copy, and a new cache starts empty); drop one of the two";
        long segment = 1L << garnet.SegmentSizeBits(false);
        if (options.CacheSize % segment != 0)
            return $"--rc-cache-size {options.CacheSize} refused: the main log's cache holds whole segments of {segment} bytes (Garnet's --segment); give a multiple";
        long objectSegment = 1L << garnet.SegmentSizeBits(true);
        // With --no-obj there is no object log to cache.
        if (!garnet.DisableObjects && options.ObjectCacheSize % objectSegment != 0)
            return $"--rc-object-cache-size {options.ObjectCacheSize} refused: the object log's cache holds whole segments of {objectSegment} bytes (Garnet's --object-log-segment); give a multiple, or 0";
        return null;
    }

    private static Exception Unwrap(Exception e) => e is AggregateException { InnerException: { } inner } ? Unwrap(inner) : e.InnerException is { } i && e is System.Reflection.TargetInvocationException ? Unwrap(i) : e;

    private static string Quote(string s) => $"'{HostOptions.Shorten(s)}'";
}

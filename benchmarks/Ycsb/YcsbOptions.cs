using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>The benchmark's flags (a small parser of our own: System.CommandLine 3.0.0 restores here, but a dozen
/// flags do not need it).</summary>
public sealed class YcsbOptions
{
    public string Store = FasterStore;            // faster, or garnet (GarnetRunner: GETs over RESP)
    public const string FasterStore = "faster";
    public const string GarnetStore = "garnet";

    /// <summary>Whether the run is Garnet's (--store garnet) rather than FASTER's.</summary>
    public bool OnGarnet => Store == GarnetStore;
    public long Records = 2_800_000;              // 8 B values: ~67 MB of log, 8x the 8 MiB memory budget
    public int ValueBytes = 8;
    public double MemoryFraction = 8;             // log bytes / FASTER memory
    public int[] Threads = { 1, 2 };
    public string[] Devices = { "memory", "ram-inline", "remotecache", "ssd", "smb" };
    public Workload Workload = Workload.Parse("readonly");
    public Distribution[]? ExplicitDistributions;  // --distributions; otherwise the workload's own
    public long? OperationCount;                  // YCSB's operationcount; the record count when not given
    public TimeSpan Duration = TimeSpan.FromSeconds(3);
    public TimeSpan Warmup = TimeSpan.FromSeconds(0.5);
    public int Rounds = 5;                        // every device runs every phase once per round; medians reported
    public double Theta = ZipfianChooser.DefaultTheta;
    public int Depth = 32;                        // pending operations per thread
    public string Transport = "shm";
    public string? VerbsAddress;                  // --transport verbs: the IP the servers listen on (an RDMA device's)
    public string? Models;                        // the manager's performance models; null: the ones it ships (shm, tcp)
    public string[]? Managers;                    // --manager: create the cache through these instead of one in process
    public string? ApiKeyFile;                    // and the tenant's API key for them, read from this file
    public double SloReadUs = 10;                 // the device cache's SLO: Redy's "reads under 10 µs" ...
    public bool SloGiven;                         // --slo-read-us or --slo-ops said (with --manager: asked of it)
    public double SloOpsPerSecond = 2e6;          // ... and 2 M reads/s, at FASTER's read size
    public string Output = "artifacts/ycsb";
    public string? DataDir;
    public bool Fio = true;
    public bool Dynamics;                         // the extended mode: timelines across a reclaim and a killed server
    public TimeSpan DynamicsDuration = TimeSpan.FromSeconds(20);

    /// <summary>Garnet's runs' value size unless --value-size says otherwise (../shared/FACTS.md's reference runs used 64 B).</summary>
    public const int GarnetValueBytes = 64;

    /// <summary>The request distributions the run phases use: the workload's own unless --distributions says otherwise.</summary>
    public Distribution[] Distributions => ExplicitDistributions ?? Workload.Distributions;

    /// <summary>
    /// YCSB's expected new keys, 2 × insert proportion × operationcount: the scrambled Zipfian's key space reaches
    /// that far past the loaded records, and keys not inserted yet are drawn again.
    /// </summary>
    public long ExpectedNewKeys => (long)((OperationCount ?? Records) * Workload.Insert * 2.0);

    public const string Usage = """
        usage: RemoteCache.Benchmarks.Ycsb [flags]
          --store S            faster (default) or garnet: Garnet embedded per device (memory, remotecache: its
                               log tier a RemoteCache over its files, ssd: its own storage tier on files), loaded
                               over RESP and read with GETs pipelined --depth deep per client thread, every value
                               checked; the readonly workload only; default devices memory,remotecache,ssd,
                               default value size 64 B
          --records N          records loaded (default 2800000; with 8 B values a 67 MB log)
          --value-size B       value bytes: FASTER 8|1024 (keys are 8 B); Garnet 8-4096 (keys are 10 B strings)
          --memory-fraction F  FASTER log memory = log size / F (default 8)
          --threads 1,2        thread counts to sweep
          --devices LIST       memory,ram-inline,remotecache,ssd,smb (default); ram-inline is process memory
                               copied and completed inside ReadAsync under the same FASTER memory as the
                               others: what FASTER's pending reads cost with a device that costs a copy
                               (also: faster-local, FASTER's own Linux device; remotecache-encrypted, the
                               remotecache device over an encrypted cache, AES-256-GCM in 512 B blocks)
          --workload W         A-F (YCSB's core workloads: their mixes and request distributions, zipfian
                               for A-C, E, F and latest for D) or readonly (default: 100 % reads, Redy §8.3,
                               run under uniform and zipfian keys)
          --distributions L    override the workload's: uniform, zipfian (YCSB's scrambled Zipfian), latest,
                               zipfian-raw (unscrambled: item 0 hottest; not a YCSB request distribution)
          --theta T            Zipf constant (default 0.99, YCSB's; other values compute ζ over 10^10 ranks)
          --operation-count N  YCSB's operationcount, used as YCSB uses it to size the Zipfian key space for
                               inserts (2 x insert proportion x N new keys); phases are timed (default: records)
          --duration S         measured seconds per phase (default 3)
          --warmup S           unmeasured seconds before each phase (default 0.5)
          --rounds N           rounds; in each, every phase runs on every device back to back, so that a
                               noisy stretch of the machine hits all of them (default 5; medians reported)
          --depth D            pending operations per thread (default 32)
          --transport T        how FASTER reaches the cache server the manager places: shm (default), tcp, or
                               verbs (RDMA; needs --verbs-address and a verbs model in --models)
          --verbs-address IP   the address of an RDMA device: the manager's servers listen for verbs there
                               (rdma_cm binds to it; Soft-RoCE: rxe0's netdev's)
          --models DIR         the manager's performance models (default: the shipped shm and tcp ones); for
                               verbs, one measured on your RDMA device: remotecache slo model --transport verbs
                               --verbs-address IP --record-size 512 --out DIR/verbs-512.json
          --slo-read-us US     the device cache's SLO, mean read latency in µs (default 10, Redy's)
          --slo-ops N          and its throughput in reads/s (default 2000000; 0: a latency bound alone, as an
                               application that states only its read latency asks)
          --manager URLS       create the device's cache through these remotecache-managers (comma-separated: a
                               replicated control plane) instead of the one this tool starts in process; their
                               pool places it, by capacity unless --slo-read-us or --slo-ops asks an SLO, over
                               --transport; needs --api-key-file; not with --dynamics (it reclaims and kills
                               servers of the manager in process)
          --api-key-file F     the tenant's API key for --manager (a file: a key on the command line is visible
                               to every user of the machine)
          --out DIR            where results.csv, results.json and the charts go: chart.png (throughput per
                               device), rounds.png (every round), latency-cdf.png (default artifacts/ycsb)
          --data-dir DIR       where the SSD files go (default: under --out, on its disk)
          --no-fio             skip the fio --direct=1 reference of the SSD device
          --dynamics           extended mode: after the rounds, two timelines of the remotecache device (throughput
                               per 100 ms): a reclaim notice a quarter in (the cache moves to a replacement server),
                               then its server killed a quarter in (replaced, the tier taken back and warmed);
                               dynamics.json and dynamics.png, with the times to the first error, the replacement
                               and the tier serving again
          --dynamics-seconds S length of each timeline (default 20)

        Matches YCSB (site.ycsb core 0.17.0): workloads A-F with their operation mixes and request distributions,
        the uniform, Zipfian, scrambled Zipfian and latest generators, inserts read only once acknowledged, the
        Zipfian key space past the records by the expected inserts, scan lengths uniform in 1-100. Does not: FASTER's
        hash index has no key order, so E's scans read consecutive key numbers one by one; keys are 8 B integers;
        phases are timed, not counted; readonly and zipfian-raw are this tool's own.
        """;

    public static YcsbOptions Parse(string[] args)
    {
        var o = new YcsbOptions();
        for (int i = 0; i < args.Length; i++)
        {
            string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            switch (args[i])
            {
                case "--store": o.Store = Value(); break;
                case "--records": o.Records = long.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--value-size": o.ValueBytes = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--memory-fraction": o.MemoryFraction = double.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--threads": o.Threads = List(Value()).Select(t => int.Parse(t, CultureInfo.InvariantCulture)).ToArray(); break;
                case "--devices": o.Devices = List(Value()); break;
                case "--workload": o.Workload = Workload.Parse(Value()); break;
                case "--distributions": o.ExplicitDistributions = List(Value()).Select(ParseDistribution).ToArray(); break;
                case "--operation-count": o.OperationCount = long.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--theta": o.Theta = double.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--duration": o.Duration = TimeSpan.FromSeconds(double.Parse(Value(), CultureInfo.InvariantCulture)); break;
                case "--warmup": o.Warmup = TimeSpan.FromSeconds(double.Parse(Value(), CultureInfo.InvariantCulture)); break;
                case "--rounds": o.Rounds = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--depth": o.Depth = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                case "--transport": o.Transport = Value(); break;
                case "--verbs-address": o.VerbsAddress = Value(); break;
                case "--models": o.Models = Value(); break;
                case "--slo-read-us": o.SloReadUs = double.Parse(Value(), CultureInfo.InvariantCulture); o.SloGiven = true; break;
                case "--slo-ops": o.SloOpsPerSecond = double.Parse(Value(), CultureInfo.InvariantCulture); o.SloGiven = true; break;
                case "--manager": o.Managers = List(Value()); break;
                case "--api-key-file": o.ApiKeyFile = Value(); break;
                case "--out": o.Output = Value(); break;
                case "--data-dir": o.DataDir = Value(); break;
                case "--no-fio": o.Fio = false; break;
                case "--dynamics": o.Dynamics = true; break;
                case "--dynamics-seconds": o.DynamicsDuration = TimeSpan.FromSeconds(double.Parse(Value(), CultureInfo.InvariantCulture)); break;
                case "-h" or "--help": throw new HelpRequested();
                default: throw new ArgumentException($"unknown flag '{args[i]}'");
            }
        }
        if (o.Store is not (FasterStore or GarnetStore))
            throw new ArgumentException($"--store is faster or garnet, not '{o.Store[..Math.Min(32, o.Store.Length)]}'");
        if (o.OnGarnet)
        {
            if (!args.Contains("--devices"))
                o.Devices = GarnetRunner.DeviceNames.ToArray();
            if (!args.Contains("--value-size"))
                o.ValueBytes = GarnetValueBytes;
            if (o.Devices.FirstOrDefault(d => !GarnetRunner.DeviceNames.Contains(d)) is { } device)
                throw new ArgumentException($"--store garnet compares {string.Join(", ", GarnetRunner.DeviceNames)}: not '{device[..Math.Min(32, device.Length)]}'");
            if (o.ValueBytes is < 8 or > 4096)
                throw new ArgumentException("--store garnet: --value-size must be 8 to 4096");
            if (o.Workload.Read != 1)
                throw new ArgumentException($"--store garnet runs the readonly workload (GETs) only, not {o.Workload.Name}");
            if (o.Dynamics)
                throw new ArgumentException("--dynamics runs on FASTER's store: not with --store garnet");
        }
        else if (o.ValueBytes is not (8 or 1024))
        {
            throw new ArgumentException("--value-size must be 8 or 1024");
        }
        if (o.OperationCount < 0)
            throw new ArgumentException("--operation-count must be >= 0");
        if (o.Theta <= 0 || o.Theta >= 1)
            throw new ArgumentException("--theta must be in (0, 1)");
        if (o.Dynamics && !o.Devices.Contains("remotecache"))
            throw new ArgumentException("--dynamics runs on the remotecache device: keep it in --devices");
        if (o.DynamicsDuration < TimeSpan.FromSeconds(2))
            throw new ArgumentException("--dynamics-seconds must be at least 2");
        if (o.Distributions.Length == 0)
            throw new ArgumentException("--distributions names none");
        if (o.Records < 1000 || o.MemoryFraction < 1 || o.Depth < 1 || o.Rounds < 1 || o.Threads.Any(t => t < 1) || o.Transport is not ("shm" or "tcp" or "verbs"))
            throw new ArgumentException("--records >= 1000, --memory-fraction >= 1, --depth >= 1, --rounds >= 1, --threads >= 1, --transport shm|tcp|verbs");
        if ((o.Transport == "verbs") != (o.VerbsAddress is not null))
            throw new ArgumentException("--transport verbs needs --verbs-address (the IP of an RDMA device), and --verbs-address needs --transport verbs");
        if (o.Transport == "verbs" && o.Models is null)
            throw new ArgumentException("--transport verbs needs --models DIR holding a verbs model measured on the RDMA device (the shipped models are shm and tcp): " +
                                        "remotecache slo model --transport verbs --verbs-address IP --record-size 512 --out DIR/verbs-512.json");
        if ((o.Managers is null) != (o.ApiKeyFile is null))
            throw new ArgumentException("--manager needs --api-key-file (the tenant's key for it), and --api-key-file needs --manager");
        if (o.Managers?.FirstOrDefault(m => !Uri.TryCreate(m, UriKind.Absolute, out var u) || u.Scheme is not ("http" or "https")) is { } bad)
            throw new ArgumentException($"--manager takes http(s) URLs, comma-separated: '{bad[..Math.Min(64, bad.Length)]}' is not one");
        if (o.Managers is not null && o.Dynamics)
            throw new ArgumentException("--dynamics reclaims and kills the cache's server through the manager in this process: not with --manager");
        if (!(o.SloReadUs > 0) || !(o.SloOpsPerSecond >= 0))
            throw new ArgumentException("--slo-read-us must be positive and --slo-ops 0 (no throughput bound) or more");
        return o;
    }

    private static string[] List(string value) => value.Split(',', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);

    private static Distribution ParseDistribution(string name) => name.ToLowerInvariant() switch
    {
        "uniform" => Distribution.Uniform,
        "zipfian" or "zipf" => Distribution.Zipfian,
        "zipfian-raw" => Distribution.ZipfianRaw,
        "latest" => Distribution.Latest,
        _ => throw new ArgumentException($"unknown distribution '{name}'"),
    };

    public sealed class HelpRequested : Exception
    {
    }
}

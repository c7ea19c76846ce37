using System;
using System.IO;
using FASTER.core;
using RemoteCache;
using RemoteCache.Device;

// The README's FASTER drop-in: a FasterKV whose log lives in remote memory (recent segments) and on SSD (all of it).
// usage: FasterTiered [ENDPOINT...]    default tcp:127.0.0.1:7300, where remotecache-server listens at default flags
var endpoints = args.Length > 0 ? args : new[] { "tcp:127.0.0.1:7300" };
var dir = Path.Combine(Path.GetTempPath(), $"faster-tiered-{Environment.ProcessId}");
try
{
    return Run(endpoints, dir);
}
catch (RemoteCacheException e)
{
    Console.Error.WriteLine($"FasterTiered: {e.Message} (is remotecache-server running at {string.Join(", ", endpoints)}?)");
    return 2;
}
finally
{
    if (Directory.Exists(dir))
        Directory.Delete(dir, recursive: true);
}

static int Run(string[] endpoints, string dir)
{
    var cache = RemoteCacheClient.Open(endpoints, new RemoteCacheOptions
    {
        RegionsPerServer = 1,  // one region of each server: 1 GiB at remotecache-server's default --region-size
        Exclusive = true,      // a cache is one store's: a second client opening it fails (RemoteCacheStatus.InUse)
        // No Config: RemoteCacheDevice switches the cache to CacheConfig.OneSided, what FASTER's reads want.
    });
    // The log's recent segments in remote memory, all of it on SSD (the commit point). The device owns the cache
    // and the tiered device owns both tiers: disposing it (or a constructor that throws) gives the memory back.
    using var device = new TieredDevice(new RemoteCacheDevice(cache, ownsCache: true),
                                        Devices.CreateLogDevice(Path.Combine(dir, "hlog.log")));
    using var store = new FasterKV<long, long>(1L << 20, new LogSettings
    {
        LogDevice = device,
        MemorySizeBits = 20,   // 1 MiB of log in local memory: most of the data lives on the device
        PageSizeBits = 14,
        SegmentSizeBits = 26,  // 64 MiB segments: a 1 GiB cache holds the 16 most recent
    });
    using var session = store.For(new SimpleFunctions<long, long>()).NewSession<SimpleFunctions<long, long>>();

    const long Records = 200_000;
    for (long key = 0; key < Records; key++)
        session.Upsert(key, key * 10);

    long wrong = 0;
    for (long key = 0; key < Records; key++)
    {
        long value = 0;
        var status = session.Read(ref key, ref value);
        if (status.IsPending)
        {
            session.CompletePendingWithOutputs(out var outputs, wait: true);
            using (outputs)
                while (outputs.Next())
                    value = outputs.Current.Output;
        }
        if (value != key * 10)
            wrong++;
    }

    Console.WriteLine($"{Records} records, {wrong} wrong; cache {cache.Capacity >> 20} MiB ({cache.Config}); device reads " +
                      $"served by the cache: {device.ReadsServedBy(0)}, by the SSD: {device.ReadsServedBy(1)}");
    return wrong == 0 ? 0 : 1;
}

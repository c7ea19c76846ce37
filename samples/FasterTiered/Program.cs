using System;
using System.IO;
using FASTER.core;
using RemoteCache;
using RemoteCache.Device;

// A cache server in this process; in production it is `remotecache-server` on a machine with spare memory.
var dir = Path.Combine(Path.GetTempPath(), $"faster-tiered-{Environment.ProcessId}");
using var server = RemoteCacheServer.Start(new[] { "shm:" + Path.Combine(Path.GetTempPath(), $"rc-{Environment.ProcessId}.sock") },
                                           regionSize: 16 << 20, memoryLimit: 1L << 30);
var cache = RemoteCacheClient.Open(server.Endpoints, new RemoteCacheOptions
{
    RegionsPerServer = 4,   // 64 MiB
    Exclusive = true,       // a cache belongs to one store: RemoteCacheDevice refuses a cache others could open
    SessionCapacity = 4096, // FASTER keeps many reads and page flushes in flight per thread (see RemoteCacheDevice)
});

// The drop-in: the log's recent segments in remote memory, all of it on SSD (the commit point).
var device = new TieredDevice(new RemoteCacheDevice(cache, ownsCache: true),
                              Devices.CreateLogDevice(Path.Combine(dir, "hlog.log")));
var store = new FasterKV<long, long>(1L << 20, new LogSettings
{
    LogDevice = device,
    MemorySizeBits = 20,   // 1 MiB of log in local memory: most of the data lives on the device
    PageSizeBits = 14,
    SegmentSizeBits = 24,  // 16 MiB segments: the 64 MiB cache holds the 4 most recent
});
var session = store.For(new SimpleFunctions<long, long>()).NewSession<SimpleFunctions<long, long>>();

const long Records = 500_000;
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

Console.WriteLine($"{Records} records, {wrong} wrong; device reads served by the cache: {device.ReadsServedBy(0)}, " +
                  $"by the SSD: {device.ReadsServedBy(1)}");
session.Dispose();   // the store before its device, the device (and cache) last
store.Dispose();
device.Dispose();
Directory.Delete(dir, recursive: true);
return wrong == 0 ? 0 : 1;

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Threading.Tasks;
using Google.Protobuf.WellKnownTypes;
using Grpc.Core;
using Microsoft.Extensions.DependencyInjection;
using RemoteCache.Manager.Core;
using RemoteCache.Manager.V1;
using Xunit;
using static RemoteCache.Manager.Tests.TestManager;

namespace RemoteCache.Manager.Tests;

/// <summary>The manager's instruments, read with a MeterListener bound to this manager's meter only.</summary>
[Collection(nameof(ManagerServiceTests))]
public sealed class MetricsTests
{
    internal sealed class Recorder : IDisposable
    {
        private readonly MeterListener _listener = new();

        public Recorder(Meter meter)
        {
            _listener.InstrumentPublished = (instrument, listener) =>
            {
                if (ReferenceEquals(instrument.Meter, meter))
                    listener.EnableMeasurementEvents(instrument);
            };
            _listener.SetMeasurementEventCallback<long>((i, v, tags, _) => Add(i.Name, v, tags));
            _listener.SetMeasurementEventCallback<int>((i, v, tags, _) => Add(i.Name, v, tags));
            _listener.SetMeasurementEventCallback<double>((i, v, tags, _) => Add(i.Name, v, tags));
            _listener.Start();
        }

        public ConcurrentQueue<(string Name, double Value, Dictionary<string, object?> Tags)> Seen { get; } = new();

        private void Add(string name, double value, ReadOnlySpan<KeyValuePair<string, object?>> tags) =>
            Seen.Enqueue((name, value, tags.ToArray().ToDictionary(t => t.Key, t => t.Value)));

        /// <summary>Reads the gauges now: only what they report from this call on.</summary>
        public List<(string Name, double Value, Dictionary<string, object?> Tags)> Observe(string name)
        {
            Seen.Clear();
            _listener.RecordObservableInstruments();
            return Seen.Where(m => m.Name == name).ToList();
        }

        public void Dispose() => _listener.Dispose();
    }

    [Fact]
    public async Task AllocationsRefusalsTimingsCachesAndLentMemoryAreReported()
    {
        await using var manager = new TestManager(warm: 2);
        await manager.StartAsync();
        using var recorder = new Recorder(manager.App.Services.GetRequiredService<ManagerMetrics>().Meter);
        var alice = manager.Tenant(AliceKey);
        var request = new AllocateRequest
        {
            Capacity = (ulong)(384 * MiB), Transport = "tcp", RecordSize = 8,
            Slo = new V1.Slo { ReadLatency = Duration.FromTimeSpan(TimeSpan.FromMicroseconds(50)) },
        };
        var cache = (await alice.AllocateAsync(request)).Cache;
        var refused = await Assert.ThrowsAsync<RpcException>(() => alice.AllocateAsync(new AllocateRequest { Capacity = (ulong)AliceQuota + 1, Transport = "tcp" }).ResponseAsync);
        Assert.Equal(StatusCode.ResourceExhausted, refused.StatusCode);

        var counted = recorder.Seen.Where(m => m.Name == "remotecache.manager.allocations").ToList();
        Assert.Equal(new[] { "ok", "ResourceExhausted" }, counted.Select(m => (string?)m.Tags["result"]));
        Assert.All(counted, m => Assert.Equal(1, m.Value));
        var durations = recorder.Seen.Where(m => m.Name == "remotecache.manager.allocate.duration").ToList();
        Assert.Equal(2, durations.Count);
        Assert.All(durations, m => Assert.InRange(m.Value, 1e-7, 60));
        Assert.Contains(recorder.Seen, m => m.Name == "remotecache.manager.search.duration" && m.Value > 0);

        Assert.Equal(1, Assert.Single(recorder.Observe("remotecache.manager.caches")).Value);
        Assert.Equal(1, Assert.Single(recorder.Observe("remotecache.manager.leader")).Value);  // the sole manager leads

        // Memory lent is what the servers' probes report: a server creates its share when the first client connects,
        // and then each of the cache's two servers lends 192 MiB.
        await using var client = await OpenAsync(cache);
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
        List<(string Name, double Value, Dictionary<string, object?> Tags)> lent;
        while (true)
        {
            lent = recorder.Observe("remotecache.manager.server.memory.lent")
                           .Where(m => cache.Servers.Any(s => s.ServerId == (string?)m.Tags["server"])).ToList();
            if (lent.Count == 2 && lent.All(m => m.Value == 192 * MiB) || DateTime.UtcNow > deadline)
                break;
            await Task.Delay(100);
        }
        Assert.Equal(2, lent.Count);
        Assert.All(lent, m =>
        {
            Assert.Equal((double)(192 * MiB), m.Value);
            Assert.Equal("small", m.Tags["vm_type"]);
        });

        await client.DisposeAsync();
        await alice.DeallocateAsync(new DeallocateRequest { CacheId = cache.CacheId });
        Assert.Equal(0, Assert.Single(recorder.Observe("remotecache.manager.caches")).Value);
    }
}

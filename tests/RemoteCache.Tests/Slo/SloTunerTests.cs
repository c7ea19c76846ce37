using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.IO;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Tests.Slo;

/// <summary>The closed loop: a tuner fed windows from a simulated cache whose real latencies differ from its model.</summary>
public sealed class SloTunerTests
{
    private static PerformanceModel Scaled(PerformanceModel model, Func<ModelPoint, double> factor) =>
        model.WithOperations(model.Operations.ToDictionary(e => e.Key, e => e.Value.Select(p => p with { MeanUs = p.MeanUs * factor(p) }).ToList()));

    // Runs the loop: every window the simulated cache achieves what `reality` predicts at the tuner's configuration,
    // under a load within the SLO; returns the retunes made until a window met the SLO (or -1 after `windows`).
    private static (int Retunes, CacheConfig Config) Converge(PerformanceModel wrong, PerformanceModel reality, RemoteCacheSlo slo, int windows = 60)
        => Converge(wrong, reality, slo, out _, windows);

    private static (int Retunes, CacheConfig Config) Converge(PerformanceModel wrong, PerformanceModel reality, RemoteCacheSlo slo,
                                                              out string trace, int windows = 60)
    {
        var log = new System.Text.StringBuilder();
        var plan = new SloPlanner(wrong).Plan(slo);
        Assert.True(plan.Found, plan.Describe());
        var tuner = new SloTuner(wrong, slo, plan.Config!.Value);
        var truth = new SloPredictor(reality, SloOperation.Read);
        for (int i = 0; i < windows; i++)
        {
            Assert.True(truth.TryPredict(tuner.Config, out var real), $"reality predicts nothing at {tuner.Config}");
            var observation = tuner.Observe(new SloWindow(slo.Window, slo.Throughput * 0.9, 0, real.MeanUs, null));
            Assert.True(observation.Judged);
            if (observation.RetunedTo is not null || observation.Note is not null)
                log.Append($"{observation.Config} ran {real.MeanUs:G4} µs -> {observation.RetunedTo} {observation.Note}; ");
            if (observation.Conformant)
            {
                trace = log.ToString();
                return (tuner.Retunes, tuner.Config);
            }
        }
        trace = log.ToString();
        return (-1, tuner.Config);
    }

    // An SLO the wrong model gets wrong: its cheapest configuration is really too slow, and the real model has one that
    // meets it (the first such bounds on a fine scale).
    private static RemoteCacheSlo Misjudged(PerformanceModel wrong, PerformanceModel reality)
    {
        var truth = new SloPredictor(reality, SloOperation.Read);
        var wrongPlanner = new SloPlanner(wrong);
        var realPlanner = new SloPlanner(reality);
        for (double throughput = 1e5; throughput < 1e7; throughput *= 1.25)
        {
            for (double latency = 1; latency < 50; latency *= 1.05)
            {
                var slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(latency), Throughput = throughput, RecordSize = 8 };
                var picked = wrongPlanner.Plan(slo);
                if (picked.Found && realPlanner.Plan(slo).Found && truth.TryPredict(picked.Config!.Value, out var real)
                    && real.MeanUs > latency * (1 + slo.Tolerance))
                    return slo;
            }
        }
        throw new InvalidOperationException("no SLO that the wrong model misjudges");
    }

    [Theory]
    [InlineData(3.0)]
    [InlineData(10.0)]
    public void AModelWrongByAFactorIsCorrectedInOneRetune(double factor)
    {
        var reality = SloTestModels.Create("monotone", 2);
        var wrong = Scaled(reality, _ => 1 / factor);
        var slo = Misjudged(wrong, reality);
        var (retunes, config) = Converge(wrong, reality, slo);
        Assert.Equal(1, retunes);
        // Corrected by a uniform factor, the model is the real one: it lands where the real model would have chosen.
        Assert.Equal(new SloPlanner(reality).Plan(slo).Config, config);
    }

    [Fact]
    public void APessimisticModelsChoiceAlreadyMeetsTheSlo()
    {
        var reality = SloTestModels.Create("monotone", 2);
        var pessimistic = Scaled(reality, _ => 2);
        var slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(6), Throughput = 3e5, RecordSize = 8 };
        Assert.Equal(0, Converge(pessimistic, reality, slo).Retunes);
    }

    [Fact]
    public void AModelWrongUnevenlyConvergesWithinFourRetunesWhenRealityHasHeadroom()
    {
        // Reality 2–4.5× slower than the model, more so with more server threads and deeper queues.
        var reality = SloTestModels.Create("noisy", 4);
        var wrong = Scaled(reality, p => 1 / (2 + 0.3 * p.S + 0.2 * Math.Log2(p.Q)));
        var truth = new SloPredictor(reality, SloOperation.Read);
        int misjudged = 0, maxRetunes = 0;
        var random = new Random(9);
        for (int i = 0; i < 4000 && misjudged < 30; i++)
        {
            var slo = new RemoteCacheSlo
            {
                ReadLatency = TimeSpan.FromMicroseconds(2 + 6 * random.NextDouble()), Throughput = 1e5 + 3e5 * random.NextDouble(), RecordSize = 8,
            };
            var picked = new SloPlanner(wrong).Plan(slo);
            var headroom = new RemoteCacheSlo { ReadLatency = slo.ReadLatency / 1.1, Throughput = slo.Throughput, RecordSize = 8 };
            if (!new SloPlanner(reality).Plan(headroom).Found || !picked.Found)
                continue;  // nothing real meets it with 10 % to spare: a loop fed noisy corrections may wander (see the docs)
            truth.TryPredict(picked.Config!.Value, out var real);
            if (real.MeanUs <= slo.ReadLatency!.Value.TotalMicroseconds * (1 + slo.Tolerance))
                continue;  // the wrong model's pick happens to meet it
            var (retunes, _) = Converge(wrong, reality, slo, out var trace);
            Assert.True(retunes is >= 1 and <= 4, $"{slo}: {retunes} retunes; {trace}");
            maxRetunes = Math.Max(maxRetunes, retunes);
            misjudged++;
        }
        Assert.True(misjudged >= 15, $"only {misjudged} SLOs misjudged by the wrong model: the test shows too little");
    }

    [Fact]
    public void WaitsForPatienceIgnoresOverloadAndSaysWhyItCannotRetune()
    {
        var model = SloTestModels.Create("monotone", 2);
        var slo = new RemoteCacheSlo { ReadLatency = TimeSpan.FromMicroseconds(6), Throughput = 3e5, RecordSize = 8, Patience = TimeSpan.FromSeconds(6) };
        var start = new SloPlanner(model).Plan(slo).Config!.Value;
        var tuner = new SloTuner(model, slo, start);
        var miss = new SloWindow(TimeSpan.FromSeconds(2), 2e5, 0, 1000, null);  // far too slow for any configuration
        var overload = new SloWindow(TimeSpan.FromSeconds(2), 9e5, 0, 1000, null);
        Assert.False(tuner.Observe(overload).Judged);  // the load's doing, not the configuration's
        Assert.Equal(TimeSpan.FromSeconds(2), tuner.Observe(miss).MissingFor);
        Assert.Null(tuner.Observe(miss).RetunedTo);
        var third = tuner.Observe(miss);
        Assert.Null(third.RetunedTo);
        Assert.Contains("no configuration is predicted to meet", third.Note);
        Assert.Equal(start, tuner.Config);
        Assert.False(tuner.Observe(new SloWindow(TimeSpan.FromSeconds(2), 0, 0, null, null)).Judged);  // nothing sampled
    }
}

/// <summary>The loop on a real cache: a model that is wrong about the configuration it picks makes the client retune.</summary>
public sealed class SloMonitorTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("slo-monitor-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    [Fact]
    public async Task AClientMissingItsSloRetunesAndReports()
    {
        // The model claims tcp reads take 0.1 µs at q = 1 and 0.001 µs at q = 2: any real read misses 5 µs, and once the
        // model is scaled by what q = 1 achieved, q = 2 is predicted to meet it.
        var points = new List<ModelPoint>();
        foreach (int q in new[] { 1, 2 })
            points.Add(new ModelPoint(0, 1, 1, q, q == 1 ? 0.1 : 0.001, 1e6 * q));
        var model = SloTestModels.Reads(new ConfigurationSpace(0, 1, 1, 1, 2), points, "tcp");
        string path = Path.Combine(_dir, "tcp-8.json");
        model.Save(path);
        using var server = Harness.StartTcpServer();
        using var services = new ServiceCollection().AddMetrics().BuildServiceProvider();
        var meters = services.GetRequiredService<IMeterFactory>();
        using var conformance = new MetricCollector<int>(meters, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.SloConformance);
        int? Conformance()
        {
            conformance.RecordObservableInstruments();
            return conformance.GetMeasurementSnapshot().LastOrDefault(m => Equals(m.Tags[RemoteCacheMetrics.CacheTag], "slo monitored"))?.Value;
        }
        var options = Harness.Options(1);
        options.Name = "slo monitored";
        options.MeterFactory = meters;
        options.Config = null;
        options.SloModelPath = path;
        options.Slo = new RemoteCacheSlo
        {
            ReadLatency = TimeSpan.FromMicroseconds(5), RecordSize = 8, Window = TimeSpan.FromMilliseconds(200), Patience = TimeSpan.FromMilliseconds(400),
        };
        await using var client = await RemoteCacheClient.OpenAsync(server.Endpoints, options);
        Assert.Equal(new CacheConfig(0, 1, 1, 1), client.Config);
        Assert.Null(Conformance());  // nothing judged yet
        var observations = new List<SloObservation>();
        var retuned = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        client.SloObserved += (_, o) =>
        {
            lock (observations)
                observations.Add(o);
            if (o.RetunedTo is not null)
                retuned.TrySetResult();
        };
        var buffer = new byte[8];
        // The monitor reconfigures before it raises the window's event: wait for the event, not for the new configuration.
        var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(20);
        while (DateTime.UtcNow < deadline && !retuned.Task.IsCompleted)
            await client.ReadAsync(0, buffer);
        Assert.Equal(new CacheConfig(0, 1, 1, 2), client.Config);
        SloObservation[] seen;
        lock (observations)
            seen = observations.ToArray();
        var retune = Assert.Single(seen, o => o.RetunedTo is not null);
        Assert.True(retune.Judged && !retune.Conformant);
        Assert.True(retune.Window.ReadMeanUs > 5, $"observed {retune.Window.ReadMeanUs} µs");
        Assert.True(retune.MissingFor >= TimeSpan.FromMilliseconds(400));
        Assert.NotNull(client.LastSloObservation);
        Assert.Equal(0, Conformance());  // the window that made it retune missed the SLO
    }
}

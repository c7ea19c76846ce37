using System;
using System.Collections.Generic;
using System.Diagnostics.Metrics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;
using Xunit;
using static RemoteCache.Tests.Harness;
using static RemoteCache.Tests.LogRecords;

namespace RemoteCache.Tests;

/// <summary>Logs (structured, through ILogger) and metrics (System.Diagnostics.Metrics) of the client and the embedded server.</summary>
public sealed class TelemetryTests
{
    [Fact]
    public async Task TheClientLogsOpenReconfigureFailureAndCloseWithStructuredFields()
    {
        var sink = new FakeLogCollector();
        using var loggers = LoggerFactory.Create(b => b.AddProvider(new FakeLoggerProvider(sink)).SetMinimumLevel(LogLevel.Trace));
        using var server = ServerProcess.Start("tcp");
        var options = Options(2, CacheConfig.LowLatency, "logged cache");
        options.LoggerFactory = loggers;
        options.OperationTimeout = TimeSpan.FromSeconds(2);
        options.Capabilities = null;
        var client = await RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, options);
        var opened = sink.GetSnapshot().Single(r => r.Id.Id == 1);
        Assert.Equal(LogLevel.Information, opened.Level);
        var fields = Fields(opened);
        Assert.Equal("logged cache", fields["CacheName"]);
        Assert.Equal(server.Endpoint, fields["Endpoints"]);
        Assert.Equal((2 * MiB).ToString(System.Globalization.CultureInfo.InvariantCulture), fields["Capacity"]);
        Assert.Equal(CacheConfig.LowLatency.ToString(), fields["Config"]);

        await client.ReconfigureAsync(CacheConfig.HighThroughput);
        var reconfigured = Fields(sink.GetSnapshot().Single(r => r.Id.Id == 5));
        Assert.Equal(CacheConfig.LowLatency.ToString(), reconfigured["OldConfig"]);
        Assert.Equal(CacheConfig.HighThroughput.ToString(), reconfigured["NewConfig"]);

        // A dead server fails every operation; one warning says so.
        server.KillHard();
        for (int i = 0; i < 20; i++)
            await Assert.ThrowsAsync<RemoteCacheException>(async () => await client.ReadAsync(0, new byte[8]));
        var failing = sink.GetSnapshot().Where(r => r.Id.Id == 7).ToList();
        Assert.Single(failing);
        Assert.Equal(LogLevel.Warning, failing[0].Level);
        Assert.Equal(nameof(RemoteCacheStatus.Disconnected), Fields(failing[0])["Status"]);

        await DisposeWithTimeout(client);
        Assert.Equal("logged cache", Fields(sink.GetSnapshot().Single(r => r.Id.Id == 4))["CacheName"]);
    }

    [Fact]
    public async Task AFailedOpenIsLoggedAndTheCapabilityIsNot()
    {
        var sink = new FakeLogCollector();
        using var loggers = LoggerFactory.Create(b => b.AddProvider(new FakeLoggerProvider(sink)));
        var key = new byte[RemoteCacheCapability.MinAdmissionKeyBytes];
        using var server = StartTcpServer(loggers, key);
        Assert.Equal("by capability", Fields(sink.GetSnapshot().Single(r => r.Id.Id == 20))["Admission"]);
        // Signed with another key (HMAC pads keys with zeros, so it must differ in its bytes, not only its length).
        var otherKey = Enumerable.Repeat((byte)7, RemoteCacheCapability.MinAdmissionKeyBytes).ToArray();
        var forged = RemoteCacheCapability.Mint(otherKey, 5, server.ServerId, 1,
                                                DateTimeOffset.UtcNow.AddMinutes(5));
        var options = new RemoteCacheOptions { CacheId = 5, Name = "refused", Capabilities = new[] { forged }, LoggerFactory = loggers };
        var e = await Assert.ThrowsAsync<RemoteCacheException>(() => RemoteCacheClient.OpenAsync(server.Endpoints, options));
        Assert.Equal(RemoteCacheStatus.Auth, e.Status);
        var failed = sink.GetSnapshot().Single(r => r.Id.Id == 2);
        Assert.Equal(nameof(RemoteCacheStatus.Auth), Fields(failed)["Status"]);
        Assert.Same(e, failed.Exception);
        Assert.DoesNotContain(sink.GetSnapshot(), r => r.Message.Contains(forged, StringComparison.Ordinal));
        server.Dispose();
        Assert.Single(sink.GetSnapshot(), r => r.Id.Id == 22);
    }

    [Fact]
    public async Task MetricsCountOperationsBytesErrorsAndDurationsPerCacheAndOperation()
    {
        using var server = ServerProcess.Start("tcp");
        var services = new ServiceCollection().AddMetrics().BuildServiceProvider();
        var meters = services.GetRequiredService<IMeterFactory>();
        using var operations = new MetricCollector<long>(meters, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.Operations);
        using var bytes = new MetricCollector<long>(meters, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.Bytes);
        using var errors = new MetricCollector<long>(meters, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.Errors);
        using var durations = new MetricCollector<double>(meters, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.Duration);
        using var inFlight = new MetricCollector<long>(meters, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.InFlight);

        var options = Options(1, CacheConfig.LowLatency, "measured");
        options.MeterFactory = meters;
        options.Lanes = 1;  // one lane: one operation in 16 of its submissions is timed
        options.OperationTimeout = TimeSpan.FromSeconds(2);
        var client = await RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, options);
        for (int i = 0; i < 40; i++)
            await client.WriteAsync(i * 100, new byte[100]);
        for (int i = 0; i < 24; i++)
            await client.ReadAsync(i * 10, new byte[10]);

        // Operations and bytes are observed: each collection reports the totals so far.
        static long Last(MetricCollector<long> c, string operation)
        {
            c.RecordObservableInstruments();
            return c.GetMeasurementSnapshot().Last(m => Equals(m.Tags[RemoteCacheMetrics.OperationTag], operation)
                                                        && Equals(m.Tags[RemoteCacheMetrics.CacheTag], "measured")).Value;
        }
        Assert.Equal(40, Last(operations, "write"));
        Assert.Equal(24, Last(operations, "read"));
        Assert.Equal(4000, Last(bytes, "write"));
        Assert.Equal(240, Last(bytes, "read"));
        var timed = durations.GetMeasurementSnapshot();
        Assert.Equal(64 / 16, timed.Count);
        Assert.Equal(40 / 16, timed.Count(m => Equals(m.Tags[RemoteCacheMetrics.OperationTag], "write")));
        Assert.All(timed, m => Assert.InRange(m.Value, 1e-7, 10));

        inFlight.RecordObservableInstruments();
        var observed = inFlight.GetMeasurementSnapshot().Where(m => Equals(m.Tags[RemoteCacheMetrics.CacheTag], "measured")).ToList();
        Assert.Equal(0, Assert.Single(observed).Value);

        server.KillHard();
        await Assert.ThrowsAsync<RemoteCacheException>(async () => await client.ReadAsync(0, new byte[8]));
        var failure = Assert.Single(errors.GetMeasurementSnapshot());
        Assert.Equal(nameof(RemoteCacheStatus.Disconnected), failure.Tags[RemoteCacheMetrics.StatusTag]);
        Assert.Equal("read", failure.Tags[RemoteCacheMetrics.OperationTag]);
        Assert.Equal(25, Last(operations, "read"));
        Assert.Equal(240, Last(bytes, "read"));

        await DisposeWithTimeout(client);
        inFlight.Clear();
        inFlight.RecordObservableInstruments();
        Assert.DoesNotContain(inFlight.GetMeasurementSnapshot(), m => Equals(m.Tags[RemoteCacheMetrics.CacheTag], "measured"));
        // A closed client's totals stay: counters do not go back.
        Assert.Equal(40, Last(operations, "write"));
        Assert.Equal(25, Last(operations, "read"));
    }

    [Fact]
    public async Task WithoutAMeterFactoryTheProcessWideMeterIsUsed()
    {
        using var operations = new MetricCollector<long>(null, RemoteCacheMetrics.MeterName, RemoteCacheMetrics.Operations);
        using var server = StartTcpServer();
        await using var client = await RemoteCacheClient.OpenAsync(server.Endpoints, new RemoteCacheOptions { Name = "process-wide" });
        await client.WriteAsync(0, new byte[3]);
        operations.RecordObservableInstruments();
        Assert.Contains(operations.GetMeasurementSnapshot(), m => Equals(m.Tags[RemoteCacheMetrics.CacheTag], "process-wide") && m.Value == 1);
    }
}

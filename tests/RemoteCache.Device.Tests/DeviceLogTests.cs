using System;
using System.Globalization;
using System.Linq;
using System.Runtime.InteropServices;
using System.Threading;
using FASTER.core;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Testing;
using RemoteCache.Tests;
using Xunit;
using static RemoteCache.Tests.LogRecords;

namespace RemoteCache.Device.Tests;

/// <summary>The devices' log events (DeviceLog), read back with FakeLogger: event ids, levels and structured fields.</summary>
public sealed unsafe class DeviceLogTests : IDisposable
{
    private const long Segment = 1L << 20;
    private const int Sector = 512;

    private readonly FakeLogCollector _sink = new();
    private readonly ILoggerFactory _loggers;
    private readonly byte* _buffer = (byte*)NativeMemory.AlignedAlloc(Sector, Sector);

    public DeviceLogTests() =>
        _loggers = LoggerFactory.Create(b => b.AddProvider(new FakeLoggerProvider(_sink)).SetMinimumLevel(LogLevel.Trace));

    public void Dispose()
    {
        NativeMemory.AlignedFree(_buffer);
        _loggers.Dispose();
    }

    private ILogger Logger => _loggers.CreateLogger("RemoteCache.Device");

    private FakeLogRecord Single(int eventId) => Assert.Single(_sink.GetSnapshot(), r => r.Id.Id == eventId);

    private static string Invariant(long value) => value.ToString(CultureInfo.InvariantCulture);

    private static RemoteCacheClient OpenCache(ServerProcess server, int regions, string name) =>
        RemoteCacheClient.Open(new[] { server.Endpoint }, new RemoteCacheOptions
        {
            RegionsPerServer = regions, Name = name, Exclusive = true, OperationTimeout = TimeSpan.FromSeconds(5),
        });

    private uint Write(IDevice device, int segment) =>
        Waits.ForDevice(cb => device.WriteAsync((IntPtr)_buffer, segment, 0, Sector, cb, null!)).Error;

    [Fact]
    public void SetUpIsLoggedWithTheConfigurationAndTheLayout()
    {
        using var server = ServerProcess.Start("tcp");
        using var device = new RemoteCacheDevice(OpenCache(server, 2, "logged device"), ownsCache: true, logger: Logger);
        var reconfigured = Single(100);
        Assert.Equal(LogLevel.Information, reconfigured.Level);
        var fields = Fields(reconfigured);
        Assert.Equal(device.FileName, fields["Device"]);
        Assert.Equal("logged device", fields["CacheName"]);
        Assert.Equal(CacheConfig.OneSided.ToString(), fields["Config"]);

        device.Initialize(Segment, new LightEpoch());
        fields = Fields(Single(101));
        Assert.Equal("2", fields["Slots"]);
        Assert.Equal(Invariant(Segment), fields["SegmentSize"]);
        Assert.Equal(Invariant(2 * Segment), fields["Capacity"]);

        using var flat = new RemoteCacheDevice(OpenCache(server, 1, "logged flat log"), ownsCache: true, logger: Logger);
        flat.Initialize(-1, new LightEpoch());
        fields = Fields(Single(102));
        Assert.Equal(flat.FileName, fields["Device"]);
        Assert.Equal(Invariant(Segment), fields["Capacity"]);
    }

    [Fact]
    public void AnOperationTheCacheRefusesIsLoggedOncePerDevice()
    {
        using var server = ServerProcess.Start("tcp");
        var cache = OpenCache(server, 2, "closed under the device");
        using var device = new RemoteCacheDevice(cache, ownsCache: false, logger: Logger);
        device.Initialize(Segment, new LightEpoch());
        cache.Dispose();
        uint closed = RemoteCacheDevice.ErrorCodeOf(RemoteCacheStatus.Closed);
        Assert.Equal(closed, Write(device, 0));
        Assert.Equal(closed, Write(device, 1));
        var refused = Single(103);
        Assert.Equal(LogLevel.Warning, refused.Level);
        Assert.Equal(device.FileName, Fields(refused)["Device"]);
        Assert.Equal(nameof(RemoteCacheStatus.Closed), Fields(refused)["Status"]);
    }

    [Fact]
    public void ATierThatFailsIsTakenOutBeforeTheCommitPointAndReportedAfterIt()
    {
        // [cache, SSD, cache]: the first cache's failed write takes it out (error); a tier after the commit point
        // only reports the write it lost (warning); the write itself succeeds on the commit point.
        using var before = ServerProcess.Start("tcp");
        using var after = ServerProcess.Start("tcp");
        using var dir = new ScratchDir("device-log");
        var first = TestTiers.CacheDevice(before.Endpoint, 2, "tier before");
        var ssd = Devices.CreateLogDevice(dir.File("hlog.log"));
        var last = TestTiers.CacheDevice(after.Endpoint, 2, "tier after");
        using var tiered = new TieredDevice(1, new IDevice[] { first, ssd, last }, Logger);
        tiered.Initialize(Segment, new LightEpoch());
        Assert.Equal(0u, Write(tiered, 0));
        before.KillHard();
        after.KillHard();

        // Two writes at once: both may reach the dead cache before either fails; the tier is taken out once.
        using var both = new CountdownEvent(2);
        uint errors = 0;
        DeviceIOCompletionCallback done = (e, _, _) => { Interlocked.Or(ref errors, e); both.Signal(); };
        tiered.WriteAsync((IntPtr)_buffer, 0, 0, Sector, done, null!);
        tiered.WriteAsync((IntPtr)_buffer, 1, 0, Sector, done, null!);
        Assert.True(both.Wait(TimeSpan.FromSeconds(10)), "writes to the tiered device did not complete within 10 s");
        Assert.Equal(0u, errors);
        var takenOut = Single(110);
        Assert.Equal(LogLevel.Error, takenOut.Level);
        var fields = Fields(takenOut);
        Assert.Equal("0", fields["Tier"]);
        Assert.Equal(first.FileName, fields["Name"]);
        Assert.Equal("write", fields["What"]);
        Assert.True(Enum.TryParse<RemoteCacheStatus>((string)fields["Status"]!, out var status) && status != RemoteCacheStatus.Ok,
                    $"tier failure logged with status '{fields["Status"]}'");
        Assert.Equal(new[] { 0 }, tiered.FailedTiers);

        var lost = _sink.GetSnapshot().First(r => r.Id.Id == 111);
        Assert.Equal(LogLevel.Warning, lost.Level);
        fields = Fields(lost);
        Assert.Equal("2", fields["Tier"]);
        Assert.Equal(last.FileName, fields["Name"]);
        Assert.Contains(fields["Segment"], new object?[] { "0", "1" });

        Assert.InRange(tiered.TierFailures, 1, 2);
        Assert.Equal(2, _sink.GetSnapshot().Count(r => r.Id.Id == 111));  // each lost write of the last tier
    }
}

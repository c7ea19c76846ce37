using System;
using System.IO;
using System.Threading.Tasks;
using RemoteCache.Benchmarks.Ycsb;
using RemoteCache.Device;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>
/// The main job's control plane: the transport, the models and the SLO it asks the manager for. Verbs needs an RDMA
/// device (tests/rdma-vm runs it, with a model measured there); here the same path runs over tcp.
/// </summary>
public sealed class ControlPlaneTests
{
    [Theory]
    [InlineData("--transport", "verbs", "--models", "m")]
    [InlineData("--verbs-address", "10.0.2.15")]
    [InlineData("--transport", "tcp", "--verbs-address", "10.0.2.15")]
    [InlineData("--transport", "rdma")]
    public void VerbsFlagsAreRefusedWithoutTheirPartner(params string[] args)
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(args));
        Assert.Contains("verbs", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void VerbsNeedsAModelMeasuredOnTheDevice()
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(new[] { "--transport", "verbs", "--verbs-address", "10.0.2.15" }));
        Assert.Contains("--transport verbs needs --models DIR holding a verbs model", e.Message, StringComparison.Ordinal);
        Assert.Contains("remotecache slo model --transport verbs", e.Message, StringComparison.Ordinal);
        var o = YcsbOptions.Parse(new[] { "--transport", "verbs", "--verbs-address", "10.0.2.15", "--models", "m", "--dynamics" });
        Assert.Equal(("verbs", "10.0.2.15", "m"), (o.Transport, o.VerbsAddress, o.Models));
    }

    [Theory]
    [InlineData("--slo-read-us", "0")]
    [InlineData("--slo-ops", "-1")]
    public void TheSloMustBePositive(params string[] args)
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(args));
        Assert.Contains("--slo-read-us must be positive and --slo-ops 0 (no throughput bound) or more", e.Message, StringComparison.Ordinal);
        Assert.Equal(0, YcsbOptions.Parse(new[] { "--slo-ops", "0" }).SloOpsPerSecond);  // a latency bound alone
    }

    [Theory]
    [InlineData("--manager", "http://10.0.0.1:7000")]
    [InlineData("--api-key-file", "key")]
    public void ManagersElsewhereNeedTheTenantsKeyFile(params string[] args)
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(args));
        Assert.Contains("--manager needs --api-key-file", e.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void ManagersElsewhereAreUrlsAndNotForTheDynamics()
    {
        var e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(new[] { "--manager", "http://a:1," + new string('x', 500), "--api-key-file", "k" }));
        Assert.Contains("--manager takes http(s) URLs", e.Message, StringComparison.Ordinal);
        Assert.True(e.Message.Length < 200, "the refusal quotes a short prefix: " + e.Message);
        e = Assert.Throws<ArgumentException>(() => YcsbOptions.Parse(new[] { "--manager", "http://a:1", "--api-key-file", "k", "--dynamics" }));
        Assert.Contains("not with --manager", e.Message, StringComparison.Ordinal);
        var o = YcsbOptions.Parse(new[] { "--manager", "http://a:1,https://b:2", "--api-key-file", "k" });
        Assert.Equal(new[] { "http://a:1", "https://b:2" }, o.Managers);
        Assert.False(o.SloGiven);  // placed by capacity
        Assert.True(YcsbOptions.Parse(new[] { "--manager", "http://a:1", "--api-key-file", "k", "--slo-read-us", "50" }).SloGiven);
    }

    [Fact]
    public async Task TheCacheIsPlacedWithTheModelsAndTheSloGiven()
    {
        string dir = Directory.CreateTempSubdirectory("ycsb-control-plane-").FullName;
        try
        {
            // Only a tcp model of 512 B records: the manager plans with what --models holds.
            string models = Directory.CreateDirectory(Path.Combine(dir, "models")).FullName;
            File.Copy(RemoteCache.Slo.RemoteCacheSloModels.PathFor("tcp", 512), Path.Combine(models, "tcp-512.json"));
            var o = YcsbOptions.Parse(new[] { "--transport", "tcp", "--models", models, "--slo-read-us", "200", "--slo-ops", "1000" });
            const long bytes = 40L << 20;
            await using (var plane = await ControlPlane.StartAsync(Path.Combine(dir, "state"), bytes, o))
            {
                var client = plane.CreateCache(bytes, encrypted: false).Client;
                var info = plane.Cache!.Info;
                Assert.Equal("tcp", info.Transport);
                Assert.Equal(TimeSpan.FromMicroseconds(200), info.Slo.ReadLatency);
                Assert.Equal(1000, info.Slo.Throughput);
                Assert.Equal(ControlPlane.FasterReadBytes, info.Slo.RecordSize);
                var written = new byte[512];
                Random.Shared.NextBytes(written);
                await client.WriteAsync(client.Capacity - written.Length, written);
                var read = new byte[written.Length];
                await client.ReadAsync(client.Capacity - read.Length, read);
                Assert.Equal(written, read);

                // The obvious code: a device on the managed cache keeps the manager's threads and opens the window
                // FASTER's concurrent reads need (the manager chose b and q for one read's latency).
                using var device = new RemoteCacheDevice(client);
                Assert.Equal(info.Config with
                {
                    BatchSize = Math.Max(info.Config.BatchSize, RemoteCacheDevice.DeviceWindow.BatchSize),
                    QueueDepth = Math.Max(info.Config.QueueDepth, RemoteCacheDevice.DeviceWindow.QueueDepth),
                }, client.Config);
            }

            // An SLO no configuration of the model meets is refused, naming it.
            var strict = YcsbOptions.Parse(new[] { "--transport", "tcp", "--models", models, "--slo-read-us", "0.5" });
            await using var refusing = await ControlPlane.StartAsync(Path.Combine(dir, "state2"), bytes, strict);
            var e = Assert.ThrowsAny<Exception>(() => refusing.CreateCache(bytes, encrypted: false));
            Assert.Contains("no configuration meets the SLO", e.Message, StringComparison.Ordinal);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public async Task TheEncryptedDevicesCacheIsEncryptedAndHoldsTheBytesAskedBesideThePlainOne()
    {
        string dir = Directory.CreateTempSubdirectory("ycsb-control-plane-").FullName;
        try
        {
            var o = YcsbOptions.Parse(new[] { "--devices", "remotecache,remotecache-encrypted" });
            const long bytes = 48L << 20;
            await using var plane = await ControlPlane.StartAsync(Path.Combine(dir, "state"), bytes, o);
            var plain = plane.CreateCache(bytes, encrypted: false);
            var encrypted = plane.CreateCache(bytes, encrypted: true);
            Assert.Null(plain.Client.EncryptionBlockSize);
            Assert.Equal(ControlPlane.FasterReadBytes, encrypted.Client.EncryptionBlockSize);
            Assert.True(encrypted.Client.Capacity >= bytes, $"the encrypted cache holds {encrypted.Client.Capacity} of the {bytes} bytes asked");
            var written = new byte[4 * ControlPlane.FasterReadBytes];
            Random.Shared.NextBytes(written);
            await encrypted.Client.WriteAsync(bytes - written.Length, written);
            var read = new byte[written.Length];
            await encrypted.Client.ReadAsync(bytes - read.Length, read);
            Assert.Equal(written, read);
            using var device = new RemoteCacheDevice(encrypted.Client, capacity: bytes);
            Assert.Equal(bytes, device.Capacity);
            Assert.Throws<InvalidOperationException>(() => plane.CreateCache(bytes, encrypted: true));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

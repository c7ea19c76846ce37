using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Runtime.Versioning;
using System.Security.Cryptography;
using System.Threading.Tasks;
using Microsoft.Extensions.Logging;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>Who may open which cache: tokens, exclusive opens, admission by capability and leases.</summary>
[SupportedOSPlatform("linux")]
public sealed class AdmissionTests
{
    private static string Id(ulong id) => id.ToString(CultureInfo.InvariantCulture);

    // ---- caches named by (id, token); exclusive opens --------------------------------------------------

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task SameIdWithoutATokenIsNotShared(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"no token over {transport}", async () =>
        {
            var first = Options(2, name: "first");
            Assert.Null(first.Token);  // the default: a random token, so the cache is this client's alone
            var a = RemoteCacheClient.Open(new[] { server.Endpoint }, first);
            try
            {
                var mine = new byte[4096];
                new Random(1).NextBytes(mine);
                await a.WriteAsync(MiB - 1000, mine);  // across the region boundary

                var second = Options(2, name: "second");
                second.CacheId = first.CacheId;
                var b = RemoteCacheClient.Open(new[] { server.Endpoint }, second);
                try
                {
                    var seen = new byte[mine.Length];
                    await b.ReadAsync(MiB - 1000, seen);
                    Assert.Equal(new byte[mine.Length], seen);  // a new, empty cache: not a's data
                    var theirs = new byte[mine.Length];
                    new Random(2).NextBytes(theirs);
                    await b.WriteAsync(MiB - 1000, theirs);
                    await b.ReadAsync(MiB - 1000, seen);
                    AssertSameBytes(theirs, seen, "second client reading its own write");
                }
                finally
                {
                    await DisposeWithTimeout(b);
                }

                var back = new byte[mine.Length];
                await a.ReadAsync(MiB - 1000, back);
                AssertSameBytes(mine, back, "first client after the second one wrote to 'its' cache");
            }
            finally
            {
                await DisposeWithTimeout(a);
            }
        });
        server.AssertRunning();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ExclusiveOpenRefusesEveryOtherClient(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"exclusive open over {transport}", async () =>
        {
            var first = Options(2, name: "exclusive owner");
            first.Token = "one-store";
            first.Exclusive = true;
            var owner = RemoteCacheClient.Open(new[] { server.Endpoint }, first);
            try
            {
                Assert.True(owner.IsExclusive);
                Assert.Equal(first.CacheId, owner.CacheId);
                await owner.WriteAsync(10, new byte[] { 1, 2, 3 });

                foreach (bool exclusive in new[] { false, true })
                {
                    var second = Options(2, name: "second store");
                    second.CacheId = first.CacheId;
                    second.Token = "one-store";
                    second.Exclusive = exclusive;
                    var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { server.Endpoint }, second));
                    Assert.Equal(RemoteCacheStatus.InUse, e.Status);
                    // The message names the cache by its id (the client's own name for it is "second store").
                    Assert.Contains($"cache {Id(first.CacheId)}", e.Message, StringComparison.Ordinal);
                }

                // Another token is another cache: the exclusive one does not stand in its way.
                var other = Options(2, name: "other token");
                other.CacheId = first.CacheId;
                other.Token = "another-store";
                other.Exclusive = true;
                var stranger = RemoteCacheClient.Open(new[] { server.Endpoint }, other);
                await DisposeWithTimeout(stranger);

                // The owner is unaffected.
                var back = new byte[3];
                await owner.ReadAsync(10, back);
                Assert.Equal(new byte[] { 1, 2, 3 }, back);
            }
            finally
            {
                await DisposeWithTimeout(owner);
            }
        });
        server.AssertRunning();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ExclusiveOpenOfASharedCacheIsRefused(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"exclusive open of an open cache over {transport}", async () =>
        {
            var first = Options(1, name: "sharer");
            first.Token = "shared";
            var sharer = RemoteCacheClient.Open(new[] { server.Endpoint }, first);
            try
            {
                Assert.False(sharer.IsExclusive);
                var second = Options(1, name: "would-be owner");
                second.CacheId = first.CacheId;
                second.Token = "shared";
                second.Exclusive = true;
                var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { server.Endpoint }, second));
                Assert.Equal(RemoteCacheStatus.InUse, e.Status);
                Assert.Contains($"cache {Id(first.CacheId)}", e.Message, StringComparison.Ordinal);
            }
            finally
            {
                await DisposeWithTimeout(sharer);
            }
        });
        server.AssertRunning();
    }

    [Fact]
    public void OptionsAreCheckedBeforeConnecting()
    {
        // Nothing listens there: each refusal must come from the argument checks, before any connect.
        var endpoints = new[] { $"shm:{ServerProcess.NewSocketPath()}", $"shm:{ServerProcess.NewSocketPath()}" };

        var options = Options(1, name: "checks");
        options.Capabilities = new[] { "only-one" };
        var e = Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(endpoints, options));
        Assert.Contains("1 capabilities for 2 endpoints", e.Message, StringComparison.Ordinal);

        options = Options(1, name: "checks");
        options.Token = new string('t', RemoteCacheOptions.MaxTokenBytes + 1);
        e = Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(endpoints, options));
        Assert.Contains($"at most {RemoteCacheOptions.MaxTokenBytes}", e.Message, StringComparison.Ordinal);

        options = Options(RemoteCacheOptions.MaxRegionsPerServer + 1, name: "checks");
        e = Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(endpoints, options));
        Assert.Contains("RegionsPerServer", e.Message, StringComparison.Ordinal);

        // A capability that is not a capability's text form: the native library says which one.
        options = Options(1, name: "checks");
        options.Capabilities = new[] { "not-a-capability", "neither" };
        e = Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(endpoints, options));
        Assert.Contains("capabilities[0]", e.Message, StringComparison.Ordinal);
    }

    // ---- admission by capability ------------------------------------------------------------------------

    [Fact]
    public void MintChecksItsArguments()
    {
        var key = RandomNumberGenerator.GetBytes(RemoteCacheCapability.MinAdmissionKeyBytes);
        var expires = DateTimeOffset.UtcNow.AddHours(1);
        Assert.Throws<ArgumentException>(() => RemoteCacheCapability.Mint(key.AsSpan(1), 1, "server", 1, expires));
        Assert.Throws<ArgumentException>(() => RemoteCacheCapability.Mint(key, 1, "", 1, expires));
        Assert.Throws<ArgumentOutOfRangeException>(() => RemoteCacheCapability.Mint(key, 1, "server", 0, expires));
        Assert.Throws<ArgumentOutOfRangeException>(
            () => RemoteCacheCapability.Mint(key, 1, "server", (int)RemoteCacheOptions.MaxRegionsPerServer + 1, expires));
        // The native library's refusal comes through with its message: a server id longer than a capability holds.
        var e = Assert.Throws<ArgumentException>(() => RemoteCacheCapability.Mint(key, 1, new string('s', 1000), 1, expires));
        Assert.Contains("server id", e.Message, StringComparison.Ordinal);

        var a = RemoteCacheCapability.Mint(key, 7, "server", 3, expires);
        var b = RemoteCacheCapability.Mint(key, 7, "server", 3, expires);
        Assert.InRange(a.Length, 1, 255);
        Assert.NotEqual(a, b);  // each has its own nonce
    }

    private static async Task WithAdmissionServer(string transport, byte[] key, Func<RemoteCacheServer, string, Task> body,
                                                  string? serverId = null)
    {
        var (listen, shm) = ListenList(transport);
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(60), $"admission over {transport}", async () =>
            {
                using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = listen, RegionSize = MiB, MemoryLimit = 64 * MiB, MaxThreads = 2, AdmissionKey = key, ServerId = serverId });
                Assert.True(server.AdmitsByCapability);
                await body(server, server.Endpoints[0]);
            });
        }
        finally
        {
            DeleteSocket(shm);
        }
    }

    private static async Task WriteAndReadBack(RemoteCacheClient client)
    {
        var data = new byte[] { 4, 5, 6, 7 };
        await client.WriteAsync(client.Capacity - 4, data);
        var back = new byte[4];
        await client.ReadAsync(client.Capacity - 4, back);
        Assert.Equal(data, back);
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public Task ServerWithAnAdmissionKeyAdmitsOnlyValidCapabilities(string transport)
    {
        var key = RandomNumberGenerator.GetBytes(32);
        return WithAdmissionServer(transport, key, async (server, endpoint) =>
        {
            // The default server id: the first endpoint as bound.
            Assert.Equal(server.Endpoints[0], server.ServerId);
            var expires = DateTimeOffset.UtcNow.AddMinutes(10);
            var options = Options(2, name: "admitted");

            // No capability.
            var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            Assert.Contains("capability", e.Message, StringComparison.Ordinal);

            // A capability for another cache: refused, and the message names the cache it is for.
            ulong otherId = options.CacheId ^ 0x5555;
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, otherId, server.ServerId, 2, expires) };
            e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            Assert.Contains($"cache {Id(otherId)}", e.Message, StringComparison.Ordinal);

            // For another server, signed with another key, for fewer regions, expired: all refused.
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, "another-server", 2, expires) };
            e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            Assert.Contains("another-server", e.Message, StringComparison.Ordinal);
            options.Capabilities = new[] { RemoteCacheCapability.Mint(RandomNumberGenerator.GetBytes(32), options.CacheId, server.ServerId, 2, expires) };
            e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 1, expires) };
            e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 2, DateTimeOffset.UtcNow.AddSeconds(-5)) };
            e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            Assert.Contains("expired", e.Message, StringComparison.Ordinal);
            Assert.Equal(0L, server.MemoryInUse);  // nothing refused took memory

            // A capability minted for this cache on this server, with enough regions: admitted.
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 2, expires) };
            var client = RemoteCacheClient.Open(new[] { endpoint }, options);
            try
            {
                Assert.Equal(2 * MiB, client.Capacity);
                await WriteAndReadBack(client);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
        }, serverId: null);
    }

    [Fact]
    public async Task ExplicitServerIdIsTheOneCapabilitiesName()
    {
        var key = RandomNumberGenerator.GetBytes(48);
        await WithAdmissionServer("tcp", key, async (server, endpoint) =>
        {
            Assert.Equal("cache-server-7", server.ServerId);
            var options = Options(1, name: "named server");
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.Endpoints[0], 1, DateTimeOffset.UtcNow.AddMinutes(5)) };
            var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Auth, e.Status);
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, "cache-server-7", 1, DateTimeOffset.UtcNow.AddMinutes(5)) };
            var client = RemoteCacheClient.Open(new[] { endpoint }, options);
            try
            {
                await WriteAndReadBack(client);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
        }, serverId: "cache-server-7");
    }

    [Fact]
    public async Task OpenServerIgnoresCapabilities()
    {
        var (listen, shm) = ListenList("tcp");
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(30), "capability on an open server", async () =>
            {
                using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = listen, RegionSize = MiB, MemoryLimit = 64 * MiB, MaxThreads = 1 });
                Assert.False(server.AdmitsByCapability);
                var options = Options(1, name: "open mode");
                options.Capabilities = new[] { RemoteCacheCapability.Mint(RandomNumberGenerator.GetBytes(32), options.CacheId, "elsewhere", 1, DateTimeOffset.UtcNow.AddMinutes(1)) };
                var client = RemoteCacheClient.Open(new[] { server.Endpoints[0] }, options);
                try
                {
                    await WriteAndReadBack(client);
                }
                finally
                {
                    await DisposeWithTimeout(client);
                }
            });
        }
        finally
        {
            DeleteSocket(shm);
        }
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public Task EndOfTheLeaseFailsOperationsWithExpired(string transport)
    {
        var key = RandomNumberGenerator.GetBytes(32);
        return WithAdmissionServer(transport, key, async (server, endpoint) =>
        {
            var options = Options(2, name: $"leased-{transport}");
            var logs = new Microsoft.Extensions.Logging.Testing.FakeLogCollector();
            using var loggers = Microsoft.Extensions.Logging.LoggerFactory.Create(b => b.AddProvider(new Microsoft.Extensions.Logging.Testing.FakeLoggerProvider(logs)));
            options.LoggerFactory = loggers;
            options.ReconnectDelay = TimeSpan.FromMilliseconds(50);
            var lease = TimeSpan.FromSeconds(2);
            var granted = Stopwatch.StartNew();
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 2, DateTimeOffset.UtcNow + lease) };
            var client = RemoteCacheClient.Open(new[] { endpoint }, options);
            try
            {
                await WriteAndReadBack(client);
                Assert.Equal(2 * MiB, server.MemoryInUse);

                // Once the lease is over the server drops the cache: the client's operations fail with Expired.
                RemoteCacheException? failure = null;
                var data = new byte[512];
                while (failure is null && granted.Elapsed < lease + TimeSpan.FromSeconds(10))
                {
                    try
                    {
                        await client.WriteAsync(0, data);
                        await client.ReadAsync(0, data);
                    }
                    catch (RemoteCacheException e)
                    {
                        failure = e;
                    }
                    if (failure is null)
                        await Task.Delay(50);
                }
                Assert.True(failure is not null, $"operations still succeed {granted.Elapsed.TotalSeconds:0.0} s after a lease of {lease.TotalSeconds} s");
                Assert.True(granted.Elapsed >= lease - TimeSpan.FromMilliseconds(100),
                            $"failed after {granted.Elapsed.TotalSeconds:0.00} s, before the lease ended: {failure}");
                Assert.True(failure.Status == RemoteCacheStatus.Expired, $"status {failure.Status}, expected Expired: {failure.Message}");

                // A cache whose lease ended is gone by intent: the client says so, and does not try to reconnect.
                await Task.Delay(RemoteCacheClient.HolderProbeInterval * 2);
                Assert.All(client.CheckServers(), s => Assert.Equal(RemoteCacheStatus.Expired, s.Status));
                Assert.Equal(0, client.Recoveries);
                Assert.DoesNotContain(logs.GetSnapshot(), r => r.Id.Id is 23 or 24);  // ReconnectFailing, ServerRecovered
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
            // The dropped cache's memory is lent back (over shm once the departed client has unmapped it).
            var watch = Stopwatch.StartNew();
            while (server.MemoryInUse != 0 && watch.Elapsed < TimeSpan.FromSeconds(10))
                await Task.Delay(20);
            Assert.Equal(0L, server.MemoryInUse);
        });
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public Task RenewedLeaseKeepsTheCache(string transport)
    {
        var key = RandomNumberGenerator.GetBytes(32);
        return WithAdmissionServer(transport, key, async (server, endpoint) =>
        {
            var options = Options(2, name: $"renewed-{transport}");
            var lease = TimeSpan.FromSeconds(2);
            var granted = Stopwatch.StartNew();
            options.Capabilities = new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 2, DateTimeOffset.UtcNow + lease) };
            var client = RemoteCacheClient.Open(new[] { endpoint }, options);
            try
            {
                var data = new byte[4096];
                RandomNumberGenerator.Fill(data);
                await client.WriteAsync(4096, data);

                // A capability for another cache is refused, and the old lease stays as it was.
                var foreign = RemoteCacheCapability.Mint(key, options.CacheId + 1, server.ServerId, 2, DateTimeOffset.UtcNow + TimeSpan.FromMinutes(1));
                var refused = await Assert.ThrowsAsync<RemoteCacheException>(() => client.RenewAsync(new[] { foreign }));
                Assert.Equal(RemoteCacheStatus.Auth, refused.Status);
                await Assert.ThrowsAsync<ArgumentException>(() => client.RenewAsync(Array.Empty<string>()));

                await client.RenewAsync(new[] { RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 2, DateTimeOffset.UtcNow + TimeSpan.FromMinutes(1)) });
                while (granted.Elapsed < lease + TimeSpan.FromSeconds(1))
                    await Task.Delay(100);
                // Past the first lease (and the server's quarter-second check): same cache, same data.
                var back = new byte[data.Length];
                await client.ReadAsync(4096, back);
                Assert.Equal(data, back);
                Assert.Equal(2 * MiB, server.MemoryInUse);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
        });
    }

    // ---- remotecache-server and remotecache-capability ----------------------------------------------------

    private static string WriteKeyFile(byte[] key)
    {
        var path = Path.Combine(Path.GetTempPath(), $"rc-key-{Environment.ProcessId}-{Guid.NewGuid():N}");
        File.WriteAllBytes(path, key);
        File.SetUnixFileMode(path, UnixFileMode.UserRead | UnixFileMode.UserWrite);
        return path;
    }

    private static string RunCapabilityTool(params string[] args)
    {
        var info = new ProcessStartInfo(Path.Combine(Path.GetDirectoryName(RemoteCacheServer.ExecutablePath)!, "remotecache-capability"))
        {
            UseShellExecute = false,
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        foreach (var a in args)
            info.ArgumentList.Add(a);
        using var process = Process.Start(info) ?? throw new XunitException("could not start remotecache-capability");
        var stderr = process.StandardError.ReadToEndAsync();
        string stdout = process.StandardOutput.ReadToEnd();
        if (!process.WaitForExit(15_000))
        {
            process.Kill();
            throw new XunitException("remotecache-capability did not finish within 15 s");
        }
        if (process.ExitCode != 0)
            throw new XunitException($"remotecache-capability {string.Join(' ', args)} exited with {process.ExitCode}: {stderr.Result}");
        return stdout.Trim();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ServerProcessAdmitsCapabilitiesOfTheCommandAndOfMint(string transport)
    {
        var key = RandomNumberGenerator.GetBytes(32);
        var keyFile = WriteKeyFile(key);
        try
        {
            using var server = ServerProcess.Start(transport, extraArgs: new[] { "--admission-key", keyFile, "--server-id", $"test-{transport}" });
            Assert.Equal($"test-{transport}", server.ServerId);
            Assert.Contains("admission: by capability", server.Output, StringComparison.Ordinal);
            await WithTimeout(TimeSpan.FromSeconds(30), $"admission by the server process over {transport}", async () =>
            {
                var options = Options(3, name: "process client");
                var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { server.Endpoint }, options));
                Assert.Equal(RemoteCacheStatus.Auth, e.Status);

                var minted = new List<string>
                {
                    RunCapabilityTool("--key", keyFile, "--cache-id", Id(options.CacheId), "--server", server.ServerId, "--regions", "3", "--ttl", "600"),
                    RemoteCacheCapability.Mint(key, options.CacheId, server.ServerId, 3, DateTimeOffset.UtcNow.AddMinutes(10)),
                };
                foreach (var capability in minted)
                {
                    options.Capabilities = new[] { capability };
                    options.Token = "process-token";  // both open the same cache
                    var client = RemoteCacheClient.Open(new[] { server.Endpoint }, options);
                    try
                    {
                        Assert.Equal(3 * MiB, client.Capacity);
                        await WriteAndReadBack(client);
                    }
                    finally
                    {
                        await DisposeWithTimeout(client);
                    }
                }
            });
            server.AssertRunning();
        }
        finally
        {
            File.Delete(keyFile);
        }
    }

    [Fact]
    public void CapabilityCommandMakesOwnerOnlyKeys()
    {
        var path = Path.Combine(Path.GetTempPath(), $"rc-newkey-{Environment.ProcessId}-{Guid.NewGuid():N}");
        try
        {
            Assert.Equal("", RunCapabilityTool("--new-key", path));
            Assert.Equal(32, new FileInfo(path).Length);
            Assert.Equal(UnixFileMode.UserRead | UnixFileMode.UserWrite, File.GetUnixFileMode(path));
            var capability = RunCapabilityTool("--key", path, "--cache-id", "42", "--server", "s", "--regions", "1");
            Assert.False(string.IsNullOrWhiteSpace(capability));
            Assert.True(capability.Length < NativeAbi.Define("RC_MAX_CAPABILITY_TEXT"));
        }
        finally
        {
            File.Delete(path);
        }
    }
}

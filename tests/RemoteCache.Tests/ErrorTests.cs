using System;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>The exceptions the API documents.</summary>
public sealed class ErrorTests
{
    private static void NoOp(RemoteCacheStatus status, object? context)
    {
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task OutOfRangeThrowsSynchronously(string transport)
    {
        string name = $"range-check-{transport}";
        await WithClient(transport, Options(2, name: name), TimeSpan.FromSeconds(30), $"out-of-range checks over {transport}", async client =>
        {
            long capacity = client.Capacity;
            Assert.Equal(2 * MiB, capacity);
            Assert.Equal(name, client.Name);

            void Check(long address, int length, Func<object?> call)
            {
                var e = Assert.Throws<ArgumentOutOfRangeException>(call);
                Assert.Contains(name, e.Message, StringComparison.Ordinal);
                Assert.Contains(address.ToString(CultureInfo.InvariantCulture), e.Message, StringComparison.Ordinal);
            }

            // Assert.Throws on a call that returns the ValueTask: the exception must come from the call itself.
            Check(capacity - 10, 20, () => client.ReadAsync(capacity - 10, new byte[20]));
            Check(capacity, 1, () => client.ReadAsync(capacity, new byte[1]));
            Check(capacity + 12345, 1, () => client.WriteAsync(capacity + 12345, new byte[1]));
            Check(capacity - 1, 2, () => client.WriteAsync(capacity - 1, new byte[2]));
            Check(-1, 1, () => client.ReadAsync(-1, new byte[1]));
            Check(-4096, 8192, () => client.WriteAsync(-4096, new byte[8192]));
            Check(long.MaxValue - 2, 16, () => client.ReadAsync(long.MaxValue - 2, new byte[16]));
            Check(capacity - 10, 20, () => { client.StartRead(capacity - 10, (IntPtr)1, 20, NoOp, null); return null; });
            Check(-7, 1, () => { client.StartWrite(-7, (IntPtr)1, 1, NoOp, null); return null; });
            Assert.Equal(0, client.Outstanding);

            // The last bytes are in range, and a refused request left the client usable.
            var tail = new byte[10];
            new Random(5).NextBytes(tail);
            await client.WriteAsync(capacity - 10, tail);
            var back = new byte[10];
            await client.ReadAsync(capacity - 10, back);
            Assert.Equal(tail, back);
        });
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task CallsAfterDisposeThrowObjectDisposed(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"use after dispose over {transport}", async () =>
        {
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Options(1, name: $"disposed-{transport}"));
            await client.WriteAsync(0, new byte[] { 1, 2, 3 });
            await DisposeWithTimeout(client);

            Assert.Throws<ObjectDisposedException>(() => client.WriteAsync(0, new byte[] { 1 }));
            Assert.Throws<ObjectDisposedException>(() => client.ReadAsync(0, new byte[1]));
            Assert.Throws<ObjectDisposedException>(() => client.StartWrite(0, (IntPtr)1, 1, NoOp, null));
            Assert.Throws<ObjectDisposedException>(() => client.StartRead(0, (IntPtr)1, 1, NoOp, null));
            Assert.Throws<ObjectDisposedException>(() => { _ = client.ReconfigureAsync(CacheConfig.LowLatency); });
            Assert.Throws<ObjectDisposedException>(() => client.Config);
            // Disposing again is harmless.
            await DisposeWithTimeout(client);
            client.Dispose();
        });
        server.AssertRunning();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task WrongTokenNamesAnotherCache(string transport)
    {
        // A cache is named by (id, token): a wrong token neither fails (which would tell existing ids from new ones)
        // nor reaches the owner's data; it opens a new, empty cache.
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"wrong token over {transport}", async () =>
        {
            var first = Options(2, name: "owner");
            first.Token = "the-right-token";
            var owner = RemoteCacheClient.Open(new[] { server.Endpoint }, first);
            try
            {
                var secret = new byte[] { 9, 8, 7 };
                await owner.WriteAsync(100, secret);
                foreach (var token in new[] { "a-wrong-token", "", null })
                {
                    var second = Options(2, name: "intruder");
                    second.CacheId = first.CacheId;
                    second.Token = token;
                    var intruder = RemoteCacheClient.Open(new[] { server.Endpoint }, second);
                    try
                    {
                        var seen = new byte[3];
                        await intruder.ReadAsync(100, seen);
                        Assert.Equal(new byte[3], seen);
                        await intruder.WriteAsync(100, new byte[] { 1, 1, 1 });
                    }
                    finally
                    {
                        await DisposeWithTimeout(intruder);
                    }
                }

                // The owner is unaffected.
                var back = new byte[3];
                await owner.ReadAsync(100, back);
                Assert.Equal(secret, back);
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
    public async Task SameIdAndTokenShareTheCache(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"shared cache over {transport}", async () =>
        {
            var first = Options(2, name: "first");
            first.Token = "shared-secret";
            var a = RemoteCacheClient.Open(new[] { server.Endpoint }, first);
            RemoteCacheClient? b = null;
            try
            {
                var rng = new Random(6000);
                var data = new byte[300_000];
                rng.NextBytes(data);
                long at = MiB - 100_000;  // crosses the region boundary
                await a.WriteAsync(at, data);

                var second = Options(2, name: "second");
                second.CacheId = first.CacheId;
                second.Token = "shared-secret";
                b = RemoteCacheClient.Open(new[] { server.Endpoint }, second);
                Assert.Equal(a.Capacity, b.Capacity);
                var seen = new byte[data.Length];
                await b.ReadAsync(at, seen);
                AssertSameBytes(data, seen, $"{transport}: second client reading the first client's write");

                // And the other way round.
                var reply = new byte[5000];
                rng.NextBytes(reply);
                await b.WriteAsync(12345, reply);
                var seenByA = new byte[reply.Length];
                await a.ReadAsync(12345, seenByA);
                AssertSameBytes(reply, seenByA, $"{transport}: first client reading the second client's write");
            }
            finally
            {
                if (b is not null)
                    await DisposeWithTimeout(b);
                await DisposeWithTimeout(a);
            }
        });
        server.AssertRunning();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task OverTheMemoryLimitIsRefusedWithNoMemory(string transport)
    {
        using var server = ServerProcess.Start(transport, memoryLimit: "64M");
        await WithTimeout(TimeSpan.FromSeconds(30), $"memory limit over {transport}", async () =>
        {
            var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { server.Endpoint }, Options(100, name: "too-big")));
            Assert.Equal(RemoteCacheStatus.NoMemory, e.Status);

            // The refusal did not take the memory: a cache that fits still opens and works.
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Options(64, name: "fits"));
            try
            {
                Assert.Equal(64 * MiB, client.Capacity);
                await client.WriteAsync(63 * MiB, new byte[] { 42 });
                var back = new byte[1];
                await client.ReadAsync(63 * MiB, back);
                Assert.Equal(42, back[0]);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
        });
        server.AssertRunning();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task MoreThan250RegionsIsAnInvalidArgument(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"300 regions over {transport}", () =>
        {
            // InvalidArgument maps to ArgumentException ("an option is malformed").
            Assert.Throws<ArgumentException>(() => RemoteCacheClient.Open(new[] { server.Endpoint }, Options(300, name: "too-many-regions")));
        });
        server.AssertRunning();
    }

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task NobodyListeningIsDisconnectedOrTimeout(string transport)
    {
        string endpoint;
        if (transport == "tcp")
        {
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start();
            int port = ((IPEndPoint)listener.LocalEndpoint).Port;
            listener.Stop();
            endpoint = $"tcp:127.0.0.1:{port}";
        }
        else
        {
            endpoint = $"shm:{ServerProcess.NewSocketPath()}";
        }
        await WithTimeout(TimeSpan.FromSeconds(30), $"connect to {endpoint}", () =>
        {
            var options = Options(1, name: "nowhere");
            options.ConnectTimeout = TimeSpan.FromSeconds(2);
            var e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { endpoint }, options));
            Assert.True(e.Status is RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout, $"status {e.Status}: {e.Message}");
        });
    }
}

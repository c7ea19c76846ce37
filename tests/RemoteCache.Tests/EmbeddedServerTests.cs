using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading.Tasks;
using Xunit;
using Xunit.Abstractions;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary><see cref="RemoteCacheServer"/>: the server embedded in this process.</summary>
public sealed class EmbeddedServerTests
{
    private readonly ITestOutputHelper output;

    public EmbeddedServerTests(ITestOutputHelper output) => this.output = output;

    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task EmbeddedServerServesAClient(string transport)
    {
        var (listen, shm) = ListenList(transport);
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(40), $"embedded server over {transport}", async () =>
            {
                using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = listen, RegionSize = MiB, MemoryLimit = 256 * MiB, MaxThreads = 2 });
                Assert.Equal(2, server.Endpoints.Count);
                var tcp = server.Endpoints.Single(e => e.StartsWith("tcp:", StringComparison.Ordinal));
                Assert.StartsWith("tcp:127.0.0.1:", tcp, StringComparison.Ordinal);
                Assert.False(tcp.EndsWith(":0", StringComparison.Ordinal), $"port 0 not resolved: {tcp}");
                Assert.Contains(shm, server.Endpoints);
                Assert.StartsWith(transport + ":", server.Endpoints[0], StringComparison.Ordinal);
                Assert.Equal(0L, server.MemoryInUse);

                var client = RemoteCacheClient.Open(new[] { server.Endpoints[0] }, Options(2, name: $"embedded-{transport}"));
                try
                {
                    Assert.Equal(2 * MiB, client.Capacity);
                    Assert.True(server.MemoryInUse > 0, $"MemoryInUse {server.MemoryInUse} with a cache open");
                    Assert.Equal(2 * MiB, server.MemoryInUse);
                    await FreshCacheServesVerifiedIoAsync(client, seed: 8000, $"embedded {transport}");
                }
                finally
                {
                    await DisposeWithTimeout(client);
                }

                // The last connection gone, the server takes its memory back (eventually: it notices the close).
                var watch = Stopwatch.StartNew();
                while (server.MemoryInUse != 0 && watch.Elapsed < TimeSpan.FromSeconds(10))
                    await Task.Delay(10);
                Assert.True(server.MemoryInUse == 0, $"MemoryInUse still {server.MemoryInUse} 10 s after the only client closed");
            });
        }
        finally
        {
            DeleteSocket(shm);
        }
    }

    /// <summary>
    /// <see cref="RemoteCacheServerOptions.CommitMemory"/>: the server commits its memory ahead (spare regions whose
    /// pages exist, seen here as its memfds of a region size no other test uses, fully allocated, and as
    /// <see cref="RemoteCacheServer.MemoryCommitted"/>), a client's cache takes them and reads zeros and keeps what it is
    /// written; without the option no region has pages before it is written.
    /// </summary>
    [Theory]
    [InlineData("shm", true)]
    [InlineData("tcp", true)]
    [InlineData("tcp", false)]
    public async Task CommittedMemoryIsAllocatedAheadAndServesAClient(string transport, bool commit)
    {
        long regionSize = (commit ? 3 * MiB : 5 * MiB) + 4096;  // this test's own memfds
        const int Regions = 4;
        var (listen, shm) = ListenList(transport);
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(40), $"committed memory over {transport}", async () =>
            {
                using var server = RemoteCacheServer.Start(new RemoteCacheServerOptions
                {
                    Listen = listen, RegionSize = regionSize, MemoryLimit = Regions * regionSize, MaxThreads = 2, CommitMemory = commit,
                });
                var watch = Stopwatch.StartNew();
                while (commit && (RegionMemfds(regionSize).Committed < Regions || server.MemoryCommitted < Regions * regionSize) && watch.Elapsed < TimeSpan.FromSeconds(20))
                    await Task.Delay(20);
                Assert.Equal(commit ? (Regions, Regions) : (0, 0), RegionMemfds(regionSize));
                Assert.Equal(commit ? Regions * regionSize : 0, server.MemoryCommitted);

                var client = RemoteCacheClient.Open(new[] { server.Endpoints[0] }, Options(Regions, name: $"committed-{transport}"));
                try
                {
                    // The cache took the spares, or (without the option) made regions with no pages yet.
                    Assert.Equal((Regions, commit ? Regions : 0), RegionMemfds(regionSize));
                    Assert.Equal((0L, Regions * regionSize), (server.MemoryCommitted, server.MemoryInUse));
                    await FreshCacheServesVerifiedIoAsync(client, seed: 8100, $"committed {transport}");
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

    // This process's region memfds of the given size, and how many of them have every page allocated (stat: size,
    // 512-byte blocks).
    // The whole cache reads zeros, then 400 random verified writes and reads, then the whole cache is as written.
    private static async Task FreshCacheServesVerifiedIoAsync(RemoteCacheClient client, int seed, string label)
    {
        var io = new CheckedIo(client, 0, (int)client.Capacity, seed) { Label = label };
        await io.VerifyAllAsync("fresh cache reads zeros");
        await io.RunAsync(ops: 400, maxInFlight: 16, maxLength: 64 << 10);
        await io.VerifyAllAsync("whole cache after the run");
    }

    private static (int All, int Committed) RegionMemfds(long regionSize)
    {
        var stat = new ProcessStartInfo("sh", new[] { "-c", $"find /proc/{Environment.ProcessId}/fd -lname '/memfd:remotecache-region*' -exec stat -L -c '%s %b' {{}} + 2>/dev/null" })
        {
            RedirectStandardOutput = true,
        };
        using var process = Process.Start(stat)!;
        string text = process.StandardOutput.ReadToEnd();
        process.WaitForExit();
        var sized = text.Split('\n', StringSplitOptions.RemoveEmptyEntries)
                        .Select(line => line.Split(' ').Select(long.Parse).ToArray())
                        .Where(f => f[0] == regionSize).ToList();
        return (sized.Count, sized.Count(f => f[1] * 512 >= regionSize));
    }

    /// <summary>
    /// Stopping the embedded server fails the client's operations with RemoteCacheException
    /// (Disconnected or Timeout) within 10 s, and once they fail they keep failing; nothing hangs.
    /// (One-sided shm access learns of the server's death by probing its socket about every
    /// millisecond, so operations issued in the first moments after the stop may still succeed;
    /// how many did is written to the test output.)
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task StoppingTheEmbeddedServerFailsOperations(string transport)
    {
        var (listen, shm) = ListenList(transport);
        try
        {
            await WithTimeout(TimeSpan.FromSeconds(40), $"embedded server stop over {transport}", async () =>
            {
                var server = RemoteCacheServer.Start(new RemoteCacheServerOptions { Listen = listen, RegionSize = MiB, MemoryLimit = 256 * MiB, MaxThreads = 2 });
                var options = Options(2, name: $"embedded-stop-{transport}");
                options.OperationTimeout = TimeSpan.FromSeconds(3);
                var client = RemoteCacheClient.Open(new[] { server.Endpoints[0] }, options);
                try
                {
                    await client.WriteAsync(0, new byte[] { 1, 2, 3 });
                    server.Dispose();
                    var watch = Stopwatch.StartNew();

                    // One operation at a time until the client has noticed.
                    int succeeded = 0;
                    Exception? first = null;
                    for (int i = 0; first is null; i++)
                    {
                        if (watch.Elapsed > TimeSpan.FromSeconds(10))
                            throw new XunitException($"{succeeded} operations succeeded and none failed within 10 s after the server stopped");
                        var buffer = new byte[1000];
                        long at = i % 1000 * 1000L;
                        try
                        {
                            var op = (i % 2 == 0 ? client.WriteAsync(at, buffer) : client.ReadAsync(at, buffer)).AsTask();
                            await op.WaitAsync(TimeSpan.FromSeconds(10));
                            succeeded++;
                        }
                        catch (TimeoutException)
                        {
                            throw new XunitException($"HANG: operation {i} after the server stopped neither completed nor failed within 10 s");
                        }
                        catch (Exception e)
                        {
                            first = e;
                        }
                    }
                    output.WriteLine($"{transport}: {succeeded} operations succeeded in the {watch.Elapsed.TotalMilliseconds:F1} ms after RemoteCacheServer.Dispose() returned before one failed: {first.GetType().Name} {(first as RemoteCacheException)?.Status}");
                    Assert.True(first is RemoteCacheException { Status: RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout }, $"first failure after the server stopped: {first}");

                    // From now on: synchronous RemoteCacheException or a faulted task, never success.
                    var ops = new List<Task>();
                    for (int i = 0; i < 50; i++)
                    {
                        try
                        {
                            var buffer = new byte[1000];
                            ops.Add((i % 2 == 0 ? client.WriteAsync(i * 1000, buffer) : client.ReadAsync(i * 1000, buffer)).AsTask());
                        }
                        catch (RemoteCacheException e) when (e.Status is RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout)
                        {
                        }
                    }
                    if (!await AllSettled(ops, TimeSpan.FromSeconds(10)))
                        throw new XunitException($"{ops.Count(t => !t.IsCompleted)} of {ops.Count} operations still pending 10 s after the server stopped");
                    var wrong = ops.Where(t => t.Exception?.InnerException is not RemoteCacheException { Status: RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout }).ToList();
                    Assert.True(wrong.Count == 0,
                        $"{wrong.Count} of {ops.Count} operations submitted after a failure had been reported did not fault with RemoteCacheException(Disconnected|Timeout); " +
                        $"first: {(wrong.Count == 0 ? "" : wrong[0].IsCompletedSuccessfully ? "succeeded" : wrong[0].Exception!.ToString())}");
                }
                finally
                {
                    server.Dispose();
                    await DisposeWithTimeout(client);
                }
            });
        }
        finally
        {
            DeleteSocket(shm);
        }
    }
}

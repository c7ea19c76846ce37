using System;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>
/// The client's poller runs completion callbacks but never the caller's own code: an awaiter's continuation that ran
/// on it would keep it from polling (every lane stalls) and deadlock when that code blocks on, or disposes, the client.
/// </summary>
public sealed class PollerTests
{
    private static bool OnPoller => Thread.CurrentThread.Name?.StartsWith("RemoteCache poller", StringComparison.Ordinal) == true;

    [Theory]
    [InlineData("tcp")]
    [InlineData("shm")]
    public async Task AwaitContinuationsNeverRunOnThePollerAndASynchronousDisposeAfterThemReturns(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(60), "continuations and dispose", async () =>
        {
            var client = await RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, Options(1, CacheConfig.HighThroughput, $"continuations {transport}"));
            var buffer = new byte[256];
            for (int i = 0; i < 5000; i++)
            {
                await client.WriteAsync(i % 64 * 256L, buffer);
                Assert.False(OnPoller, $"the continuation of write {i} ran on the poller");
                await client.ReadAsync(i % 64 * 256L, buffer);
                Assert.False(OnPoller, $"the continuation of read {i} ran on the poller");
            }
            client.Dispose();  // joins the poller: would never return on it
        });
    }

    [Fact]
    public async Task DisposeFromACallbackOnThePollerReturnsAndTheClientCloses()
    {
        using var server = ServerProcess.Start("tcp");
        await WithTimeout(TimeSpan.FromSeconds(60), "dispose from a callback", async () =>
        {
            long cachesBefore = RemoteCacheDiagnostics.GetNativeObjectCounts().Caches;
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Options(1, CacheConfig.LowLatency, "dispose from callback"));
            var disposedOnPoller = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
            IntPtr buffer = System.Runtime.InteropServices.Marshal.AllocHGlobal(8);
            try
            {
                // Nobody polls on this thread: the poller harvests the completion and runs the callback.
                client.StartRead(0, buffer, 8, (status, _) =>
                {
                    bool onPoller = OnPoller;
                    client.Dispose();
                    disposedOnPoller.SetResult(onPoller);
                }, null);
                Assert.True(await disposedOnPoller.Task.WaitAsync(TimeSpan.FromSeconds(20)), "the callback did not run on the poller");
                var deadline = DateTime.UtcNow + TimeSpan.FromSeconds(20);
                while (RemoteCacheDiagnostics.GetNativeObjectCounts().Caches != cachesBefore && DateTime.UtcNow < deadline)
                    await Task.Delay(10);
                Assert.Equal(cachesBefore, RemoteCacheDiagnostics.GetNativeObjectCounts().Caches);
                Assert.Throws<ObjectDisposedException>(() => client.Config);
            }
            finally
            {
                System.Runtime.InteropServices.Marshal.FreeHGlobal(buffer);
            }
        });
    }

    // Tsavorite's pattern: a thread starts a batch of reads without polling and blocks for their callbacks. The poller
    // leaves a lane alone while its callers submit; it may sleep then only if those callers poll, or this thread waits
    // out its millisecond. Each batch's submissions outlast the poller's 15 µs before it would sleep.
    [Fact]
    public async Task CallersThatSubmitAndBlockWithoutPollingNeverWaitForAPollerSleep()
    {
        using var server = ServerProcess.Start("shm");
        await WithTimeout(TimeSpan.FromSeconds(60), "submit and block", () =>
        {
            using var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Options(1, CacheConfig.HighThroughput, "submit and block"));
            const int Batch = 256, Size = 512;
            IntPtr buffers = System.Runtime.InteropServices.Marshal.AllocHGlobal(Batch * Size);
            try
            {
                using var done = new CountdownEvent(Batch);
                int failed = 0;
                IoCallback onDone = (status, _) =>
                {
                    if (status != RemoteCacheStatus.Ok)
                        Interlocked.Increment(ref failed);
                    done.Signal();
                };
                for (int round = 0; round < 200; round++)
                {
                    done.Reset();
                    for (int i = 0; i < Batch; i++)
                        client.StartRead((round * 7 + i) % 1024 * (long)Size, buffers + i * Size, Size, onDone, null);
                    Assert.True(done.Wait(TimeSpan.FromSeconds(20)), $"round {round}: {done.CurrentCount} of {Batch} callbacks missing");
                }
                Assert.Equal(0, failed);
                Assert.Equal(0, client.DeferredSleeps);
            }
            finally
            {
                System.Runtime.InteropServices.Marshal.FreeHGlobal(buffers);
            }
            return Task.CompletedTask;
        });
    }
}

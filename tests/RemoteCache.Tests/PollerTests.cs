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
}

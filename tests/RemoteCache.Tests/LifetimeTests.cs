using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>
/// Handles hold what they need: a session keeps its cache's native resources, so client, sessions and an embedded
/// server can be disposed in any order, and afterwards no native cache, session or server is left
/// (<see cref="RemoteCacheDiagnostics.GetNativeObjectCounts"/>). The test assembly runs one test at a time, so the
/// counts move only with this test's objects.
/// </summary>
public sealed class LifetimeTests
{
    public static IEnumerable<object[]> Orders() =>
        Permutations(new[] { "client", "session", "server" }).Select(p => new object[] { string.Join(",", p) });

    private static IEnumerable<string[]> Permutations(string[] items) =>
        items.Length <= 1
            ? new[] { items }
            : items.SelectMany((item, i) => Permutations(items.Where((_, j) => j != i).ToArray()).Select(rest => rest.Prepend(item).ToArray()));

    [Theory]
    [MemberData(nameof(Orders))]
    public async Task DisposingInAnyOrderLeaksNothing(string order)
    {
        await WithTimeout(TimeSpan.FromSeconds(60), $"disposal in the order {order}", async () =>
        {
            var before = Settled();
            const int lanes = 2;
            var server = StartTcpServer();
            var options = Options(1, CacheConfig.LowLatency, $"lifetime {order}");
            options.Lanes = lanes;
            options.OperationTimeout = TimeSpan.FromSeconds(2);
            var client = RemoteCacheClient.Open(server.Endpoints, options);
            var session = client.OpenSession();
            Assert.Equal(before with { Caches = before.Caches + 1, Sessions = before.Sessions + lanes + 1, Servers = before.Servers + 1 },
                         RemoteCacheDiagnostics.GetNativeObjectCounts());

            await client.WriteAsync(0, new byte[] { 1, 2, 3 });
            Assert.Equal(RemoteCacheStatus.Ok, SessionRoundTrip(session));

            bool clientAlive = true, sessionAlive = true, serverAlive = true;
            foreach (var what in order.Split(','))
            {
                switch (what)
                {
                    case "client":
                        await DisposeWithTimeout(client);
                        clientAlive = false;
                        break;
                    case "session":
                        // A session that outlived its client still works while its server lives: it kept the cache open.
                        Assert.Equal(serverAlive ? RemoteCacheStatus.Ok : RemoteCacheStatus.Disconnected, SessionRoundTrip(session));
                        session.Dispose();
                        sessionAlive = false;
                        break;
                    case "server":
                        server.Dispose();
                        serverAlive = false;
                        break;
                }
                var expected = new NativeObjectCounts(
                    before.Caches + (clientAlive || sessionAlive ? 1 : 0),
                    before.Sessions + (clientAlive ? lanes : 0) + (sessionAlive ? 1 : 0),
                    before.Servers + (serverAlive ? 1 : 0));
                Assert.True(expected == RemoteCacheDiagnostics.GetNativeObjectCounts(),
                            $"after disposing the {what}: {RemoteCacheDiagnostics.GetNativeObjectCounts()}, expected {expected}");
            }
            Assert.Equal(before, RemoteCacheDiagnostics.GetNativeObjectCounts());
            Assert.Throws<ObjectDisposedException>(() => StartOnDisposed(session));
        });
    }

    [Fact]
    public async Task ASessionNeverDisposedIsClosedByItsFinalizerAndReleasesTheCache()
    {
        await WithTimeout(TimeSpan.FromSeconds(60), "finalized session", async () =>
        {
            var before = Settled();
            using (var server = StartTcpServer())
            {
                var client = RemoteCacheClient.Open(server.Endpoints, Options(1, name: "abandoned session"));
                AbandonASession(client);
                await DisposeWithTimeout(client);
                // The client is gone but the abandoned session still holds the native cache, until the GC finds it.
                Assert.Equal(before.Caches + 1, RemoteCacheDiagnostics.GetNativeObjectCounts().Caches);
            }
            Assert.Equal(before, Settled());
        });
    }

    private static unsafe void StartOnDisposed(RemoteCacheSession session) => session.StartRead(0, null, 1, 0);

    private static void AbandonASession(RemoteCacheClient client) => Assert.Equal(0, client.OpenSession().Outstanding);

    private static unsafe RemoteCacheStatus SessionRoundTrip(RemoteCacheSession session)
    {
        byte value = 0;
        var status = session.StartRead(0, &value, 1, 7);
        if (status != RemoteCacheStatus.Ok)
            return status;
        Span<RemoteCacheCompletion> done = stackalloc RemoteCacheCompletion[1];
        var watch = Stopwatch.StartNew();
        while (session.Wait(done, TimeSpan.FromMilliseconds(100)) == 0)
            Assert.True(watch.Elapsed < TimeSpan.FromSeconds(20), "a session read did not complete within 20 s");
        Assert.Equal(7ul, done[0].Tag);
        return done[0].Status;
    }

    // Counts once finalizers of earlier tests' abandoned objects have run.
    private static NativeObjectCounts Settled()
    {
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
        return RemoteCacheDiagnostics.GetNativeObjectCounts();
    }
}

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Xunit;
using Xunit.Sdk;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>Server death and client disposal with operations in flight: everything finishes, nothing hangs.</summary>
public sealed class FailureTests
{
    private static bool IsServerGone(Exception? e) =>
        e is RemoteCacheException { Status: RemoteCacheStatus.Disconnected or RemoteCacheStatus.Timeout };

    private static string Describe(Task t) => t.Status switch
    {
        TaskStatus.RanToCompletion => "succeeded",
        TaskStatus.Faulted => t.Exception!.InnerException is RemoteCacheException r
            ? $"RemoteCacheException({r.Status})"
            : t.Exception!.InnerException!.GetType().Name,
        _ => t.Status.ToString(),
    };

    private static string Histogram(IEnumerable<Task> tasks) =>
        string.Join(", ", tasks.GroupBy(Describe).Select(g => $"{g.Key}: {g.Count()}"));

    private static Task Start(RemoteCacheClient client, int i, byte[] buffer, long capacity)
    {
        long address = (long)i * 65536 % (capacity - buffer.Length);
        return (i % 2 == 0 ? client.WriteAsync(address, buffer) : client.ReadAsync(address, buffer)).AsTask();
    }

    /// <summary>
    /// SIGKILL the server with operations in flight: every pending operation faults with
    /// RemoteCacheException (Disconnected or Timeout) within 10 s (operation timeout 3 s), and later
    /// submissions throw RemoteCacheException synchronously or fault the same way.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task ServerKilledWithOperationsInFlight(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(60), $"server killed over {transport}", async () =>
        {
            var options = Options(4, name: $"killed-{transport}");
            options.OperationTimeout = TimeSpan.FromSeconds(3);
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, options);
            try
            {
                // Separate buffers per operation: a failed read may still be written into.
                var warm = new byte[4096];
                await client.WriteAsync(0, warm);

                var before = new List<Task>();
                for (int i = 0; i < 200; i++)
                    before.Add(Start(client, i, new byte[65536], client.Capacity));
                server.KillHard();

                // Submitted after the server process is gone: none of these may succeed.
                var after = new List<Task>();
                int syncThrows = 0;
                for (int i = 0; i < 100; i++)
                {
                    try
                    {
                        after.Add(Start(client, i, new byte[65536], client.Capacity));
                    }
                    catch (RemoteCacheException e) when (IsServerGone(e))
                    {
                        syncThrows++;
                    }
                }

                var all = before.Concat(after).ToList();
                if (!await AllSettled(all, TimeSpan.FromSeconds(10)))
                {
                    throw new XunitException(
                        $"{all.Count(t => !t.IsCompleted)} of {all.Count} operations still pending 10 s after SIGKILL " +
                        $"(before kill: {Histogram(before)}; after kill: {Histogram(after)}; Outstanding = {client.Outstanding})");
                }
                var badBefore = before.Where(t => !t.IsCompletedSuccessfully && !IsServerGone(t.Exception?.InnerException)).ToList();
                Assert.True(badBefore.Count == 0,
                    $"operations in flight at the kill must succeed or fault with RemoteCacheException(Disconnected|Timeout): {Histogram(before)}; first: {badBefore.FirstOrDefault()?.Exception}");
                var badAfter = after.Where(t => !IsServerGone(t.Exception?.InnerException)).ToList();
                Assert.True(badAfter.Count == 0,
                    $"operations submitted after the server died must fault with RemoteCacheException(Disconnected|Timeout): {Histogram(after)} (+{syncThrows} thrown synchronously); first: {badAfter.FirstOrDefault()?.Exception}");

                // Later still: throw synchronously or fault, never succeed, never hang.
                var later = new List<Task>();
                for (int i = 0; i < 20; i++)
                {
                    try
                    {
                        later.Add(Start(client, i, new byte[1000], client.Capacity));
                    }
                    catch (RemoteCacheException e) when (IsServerGone(e))
                    {
                    }
                }
                Assert.True(await AllSettled(later, TimeSpan.FromSeconds(10)),
                    $"{later.Count(t => !t.IsCompleted)} late operations still pending after 10 s");
                Assert.True(later.All(t => IsServerGone(t.Exception?.InnerException)), $"late operations: {Histogram(later)}");
                Assert.Equal(0, client.Outstanding);
            }
            finally
            {
                await DisposeWithTimeout(client);
            }
        });
    }

    /// <summary>
    /// 200 reads and writes started without awaiting, then DisposeAsync from another task: every
    /// operation succeeds or faults, nothing hangs, successful reads hold the right data, and
    /// afterwards calls throw ObjectDisposedException.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task DisposeWhileOperationsAreInFlight(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"dispose with I/O in flight over {transport}", async () =>
        {
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Options(4, name: $"dispose-{transport}"));
            var rng = new Random(7000);
            var pattern = new byte[MiB];
            rng.NextBytes(pattern);
            await client.WriteAsync(0, pattern);

            var ops = new List<Task>();
            var reads = new List<(Task Task, byte[] Buffer, int Offset)>();
            for (int i = 0; i < 200; i++)
            {
                int len = LogUniformLength(rng, 64 << 10);
                if (i % 2 == 0)
                {
                    int offset = rng.Next(0, (int)MiB - len + 1);
                    var buffer = new byte[len];
                    var t = client.ReadAsync(offset, buffer).AsTask();
                    reads.Add((t, buffer, offset));
                    ops.Add(t);
                }
                else
                {
                    var data = new byte[len];
                    rng.NextBytes(data);
                    ops.Add(client.WriteAsync(MiB + rng.Next(0, (int)(3 * MiB) - len + 1), data).AsTask());
                }
            }
            var dispose = Task.Run(async () => await client.DisposeAsync());

            var everything = ops.Append(dispose).ToList();
            if (!await AllSettled(everything, TimeSpan.FromSeconds(25)))
            {
                throw new XunitException(
                    $"HANG: {ops.Count(t => !t.IsCompleted)} of {ops.Count} operations pending, dispose {dispose.Status}, 25 s after DisposeAsync ({Histogram(ops)})");
            }
            Assert.True(dispose.IsCompletedSuccessfully, $"DisposeAsync: {dispose.Exception}");
            Assert.True(ops.All(t => t.IsCompletedSuccessfully || t.IsFaulted), Histogram(ops));
            foreach (var (t, buffer, offset) in reads.Where(r => r.Task.IsCompletedSuccessfully))
                AssertSameBytes(pattern.AsSpan(offset, buffer.Length), buffer, $"{transport}: read [{offset}, +{buffer.Length}) that completed during disposal");

            Assert.Throws<ObjectDisposedException>(() => client.ReadAsync(0, new byte[1]));
            Assert.Throws<ObjectDisposedException>(() => client.WriteAsync(0, new byte[1]));
            Assert.Throws<ObjectDisposedException>(() => { _ = client.ReconfigureAsync(CacheConfig.LowLatency); });
        });
        server.AssertRunning();
    }

    /// <summary>
    /// DisposeAsync while another thread keeps submitting: every submission is either refused with
    /// ObjectDisposedException or finishes (success or fault); nothing hangs.
    /// </summary>
    [Theory]
    [InlineData("shm")]
    [InlineData("tcp")]
    public async Task DisposeWhileAnotherThreadKeepsSubmitting(string transport)
    {
        using var server = ServerProcess.Start(transport);
        await WithTimeout(TimeSpan.FromSeconds(30), $"dispose during submissions over {transport}", async () =>
        {
            var client = RemoteCacheClient.Open(new[] { server.Endpoint }, Options(4, name: $"dispose-race-{transport}"));
            var submitted = new ConcurrentQueue<Task>();
            var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            Exception? unexpected = null;
            int refused = 0;
            var submitter = Task.Run(() =>
            {
                var buffer = new byte[8192];
                var watch = System.Diagnostics.Stopwatch.StartNew();
                for (int i = 0; ; i++)
                {
                    if (watch.Elapsed > TimeSpan.FromSeconds(20))
                    {
                        unexpected = new XunitException($"submissions still accepted 20 s after DisposeAsync was called ({i} submitted)");
                        break;
                    }
                    try
                    {
                        long address = (long)i * 8192 % (client.Capacity - buffer.Length);
                        submitted.Enqueue((i % 2 == 0 ? client.WriteAsync(address, buffer) : client.ReadAsync(address, buffer)).AsTask());
                    }
                    catch (ObjectDisposedException)
                    {
                        refused++;
                        break;
                    }
                    catch (Exception e)
                    {
                        unexpected = e;
                        break;
                    }
                    if (i == 200)
                        started.TrySetResult();
                }
                started.TrySetResult();
            });
            await started.Task;
            var dispose = Task.Run(async () => await client.DisposeAsync());

            if (!await AllSettled(new[] { submitter, dispose }, TimeSpan.FromSeconds(25)))
                throw new XunitException($"HANG: submitter {submitter.Status}, DisposeAsync {dispose.Status} after 25 s ({submitted.Count} submitted)");
            var ops = submitted.ToList();
            if (!await AllSettled(ops, TimeSpan.FromSeconds(1)))
                throw new XunitException($"HANG: DisposeAsync finished but {ops.Count(t => !t.IsCompleted)} of {ops.Count} accepted operations never completed ({Histogram(ops)})");
            Assert.True(dispose.IsCompletedSuccessfully, $"DisposeAsync: {dispose.Exception}");
            Assert.Null(unexpected);
            Assert.Equal(1, refused);
            Assert.True(ops.All(t => t.IsCompletedSuccessfully || t.IsFaulted), Histogram(ops));
            Assert.Throws<ObjectDisposedException>(() => client.ReadAsync(0, new byte[1]));
        });
        server.AssertRunning();
    }
}

using System;
using System.Threading;
using FASTER.core;
using Xunit;

namespace RemoteCache.Device.Tests;

/// <summary>Bounded waits of the device tests: a lost completion or a leaked cache fails the test instead of hanging it.</summary>
internal static class Waits
{
    /// <summary>Starts one device operation and waits (up to 10 s) for its completion: (error code, bytes).</summary>
    public static (uint Error, uint Bytes) ForDevice(Action<DeviceIOCompletionCallback> start)
    {
        using var done = new ManualResetEventSlim();
        uint error = uint.MaxValue, bytes = 0;
        start((e, n, _) =>
        {
            error = e;
            bytes = n;
            done.Set();
        });
        Assert.True(done.Wait(TimeSpan.FromSeconds(10)), "device operation did not complete within 10 s");
        return (error, bytes);
    }

    /// <summary>Waits (up to 10 s) until the embedded server lends no memory: every cache opened on it was closed.</summary>
    public static void ForNoMemoryInUse(RemoteCacheServer server)
    {
        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (server.MemoryInUse != 0 && DateTime.UtcNow < deadline)
            Thread.Sleep(10);
        Assert.Equal(0L, server.MemoryInUse);
    }
}

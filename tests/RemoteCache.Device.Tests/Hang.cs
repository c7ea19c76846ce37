using System;
using System.Threading.Tasks;
using Xunit.Sdk;

namespace RemoteCache.Device.Tests;

internal static class Hang
{
    /// <summary>
    /// Runs a test body on the thread pool and fails the test if it has not finished within
    /// <paramref name="seconds"/>: FASTER fed wrong bytes by a device can loop forever, and a hang must become a
    /// failure rather than a stuck CI run.
    /// </summary>
    public static Task Guard(string what, Action body, int seconds = 120) => Guard(what, () => Task.Run(body), seconds);

    /// <inheritdoc cref="Guard(string, Action, int)"/>
    public static async Task Guard(string what, Func<Task> body, int seconds = 120)
    {
        var task = Task.Run(body);
        try
        {
            await task.WaitAsync(TimeSpan.FromSeconds(seconds));
        }
        catch (TimeoutException) when (!task.IsCompleted)
        {
            throw new XunitException($"HANG: {what} did not finish within {seconds} s");
        }
    }
}

using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;
using Xunit;

namespace RemoteCache.Tests;

/// <summary>The threads native calls that block run on: never shared by two calls at once, reused after.</summary>
public class BlockingCallTests
{
    [Fact]
    public async Task CallsAtOnceEachHaveAThread()
    {
        // Each call waits for all the others: calls queued behind one another would never finish.
        const int Calls = 8;
        using var all = new Barrier(Calls);
        var calls = Enumerable.Range(0, Calls).Select(_ => BlockingCall.Start(() => all.SignalAndWait(TimeSpan.FromSeconds(10)))).ToList();
        Assert.All(await Task.WhenAll(calls).WaitAsync(TimeSpan.FromSeconds(30)), Assert.True);
    }

    [Fact]
    public async Task AThreadServesTheCallsThatFollow()
    {
        var threads = new HashSet<int>();
        for (int i = 0; i < 20; i++)
        {
            threads.Add(await BlockingCall.Start(() => Environment.CurrentManagedThreadId).WaitAsync(TimeSpan.FromSeconds(10)));
            await Task.Delay(10);  // the worker is back among the idle ones by then
        }
        Assert.True(threads.Count <= 2, $"20 calls one after another ran on {threads.Count} threads");
    }

    [Fact]
    public async Task AnExceptionReachesTheCallerAndTheThreadGoesOn()
    {
        var thrown = await Assert.ThrowsAsync<InvalidOperationException>(
            () => BlockingCall.Start<int>(() => throw new InvalidOperationException("refused")).WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.Equal("refused", thrown.Message);
        Assert.Equal(42, await BlockingCall.Start(() => 42).WaitAsync(TimeSpan.FromSeconds(10)));
    }

    [Fact]
    public async Task TheCallersContinuationDoesNotRunOnTheCallsThread()
    {
        // A continuation that blocked on the call's thread would hold it from the next call.
        int callThread = await BlockingCall.Start(() => Environment.CurrentManagedThreadId).WaitAsync(TimeSpan.FromSeconds(10));
        Assert.NotEqual(callThread, Environment.CurrentManagedThreadId);
    }
}

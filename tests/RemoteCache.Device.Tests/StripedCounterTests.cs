using System.Threading;
using Xunit;

namespace RemoteCache.Device.Tests;

public sealed class StripedCounterTests
{
    [Fact]
    public void SumCountsWhatEveryThreadAddedEvenWhenOthersTakeItBack()
    {
        // Operations start on some threads and finish on others, as device I/O does: increments and decrements
        // land on different stripes, and only the sum has to be right.
        var counter = new StripedCounter();
        const int PerThread = 100_000;
        var starters = new Thread[3];
        for (int t = 0; t < starters.Length; t++)
        {
            starters[t] = new Thread(() =>
            {
                for (int i = 0; i < PerThread; i++)
                    counter.Add(1);
            });
            starters[t].Start();
        }
        foreach (var t in starters)
            t.Join();
        Assert.Equal(3L * PerThread, counter.Sum());

        var finisher = new Thread(() =>
        {
            for (int i = 0; i < 3 * PerThread - 5; i++)
                counter.Add(-1);
        });
        finisher.Start();
        finisher.Join();
        Assert.Equal(5L, counter.Sum());
        counter.Add(-5);
        Assert.Equal(0L, counter.Sum());
    }
}

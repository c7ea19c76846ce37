using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Diagnosers;
using BenchmarkDotNet.Jobs;
using BenchmarkDotNet.Toolchains.InProcess.Emit;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// A configuration for a small, noisy VM (2 cores) and a time budget of a few minutes for the whole set:
/// <list type="bullet">
/// <item>in-process toolchain: no generated project to build per run (and none that would inherit
/// Directory.Build.props), and the embedded server lives in the measured process as intended;</item>
/// <item>one launch, 2 warm-up and 5 measured iterations of about 500 ms each; the invocation count
/// per iteration is chosen by the pilot stage;</item>
/// <item>MemoryDiagnoser only: the Allocated column counts every thread of the process (BenchmarkDotNet
/// uses GC.GetTotalAllocatedBytes), so the client's poller is included; the hot path must show 0 B.</item>
/// </list>
/// </summary>
public static class MicroConfig
{
    public const int WarmupCount = 2;
    public const int IterationCount = 5;

    public static IConfig Create()
    {
        var job = Job.Default
            .WithToolchain(InProcessEmitToolchain.Instance)
            .WithLaunchCount(1)
            .WithWarmupCount(WarmupCount)
            .WithIterationCount(IterationCount)
            .WithId("Micro");
        return ManualConfig.Create(DefaultConfig.Instance)
            .AddJob(job)
            .AddDiagnoser(MemoryDiagnoser.Default);
    }
}

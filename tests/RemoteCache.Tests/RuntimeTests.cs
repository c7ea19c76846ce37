using System;
using Xunit;

namespace RemoteCache.Tests;

/// <summary>
/// The suites run once per target framework (Directory.Build.props). A net8.0 build rolls forward to a newer runtime
/// when .NET 8 is absent (RollForward=Major), and would then test nothing of .NET 8: this makes that leg fail instead.
/// scripts/test.sh runs it with a dotnet that has .NET 8 (docs/testing.md).
/// </summary>
public sealed class RuntimeTests
{
    [Fact]
    public void RunsOnTheRuntimeOfItsTargetFramework()
    {
#if NET10_0_OR_GREATER
        const int targeted = 10;
        Assert.True(Environment.Version.Major >= targeted, $"built for net{targeted}.0, running on .NET {Environment.Version}");
#else
        const int targeted = 8;
        Assert.True(Environment.Version.Major == targeted,
                    $"built for net{targeted}.0 but running on .NET {Environment.Version}: this machine's dotnet has no .NET {targeted} " +
                    "runtime; run the net8.0 tests with scripts/test.sh, or with build/dotnet-net8/dotnet (docs/testing.md)");
#endif
    }
}

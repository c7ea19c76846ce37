using System;
using System.CommandLine;
using System.IO;
using System.Threading.Tasks;
using RemoteCache.Cli.Manager;
using Xunit;

namespace RemoteCache.Cli.Tests;

/// <summary><c>--manager</c> and REMOTECACHE_MANAGER: one address, or a replicated manager's several.</summary>
public sealed class ManagerAddressTests
{
    private static readonly Uri M1 = new("http://m1:7400"), M2 = new("http://m2:7400"), M3 = new("https://m3:7400");

    private static ParseResult Parse(params string[] args) => Program.BuildRoot().Parse(args);

    [Fact]
    public void ManagerIsRepeatedOrSeparatedByCommasAndLeavesTheCommandsArgumentsAlone()
    {
        // The cache id after --manager stays reshape's: a parse error (its argument missing) otherwise.
        var parse = Parse("reshape", "--manager", "http://m1:7400, http://m2:7400", "7", "--manager", "https://m3:7400", "--capacity", "1GiB", "--api-key", "k");
        Assert.Empty(parse.Errors);
        Assert.Empty(parse.UnmatchedTokens);
        var options = ManagerCommandAction.Options(parse, _ => "http://ignored:1");  // the flags win over the environment
        Assert.Equal(new[] { M1, M2, M3 }, options.Addresses);
        Assert.Equal(M1, options.Address);

        var single = ManagerCommandAction.Options(Parse("caches", "--manager", "http://m1:7400", "--api-key", "k"), _ => null);
        Assert.Equal(new[] { M1 }, single.Addresses);
    }

    [Fact]
    public void TheEnvironmentVariableHoldsOneAddressOrSeveral()
    {
        var parse = Parse("caches", "--api-key", "k");
        var several = ManagerCommandAction.Options(parse, name => name == RemoteCacheManagerOptions.AddressVariable ? "http://m1:7400,http://m2:7400" : null);
        Assert.Equal(new[] { M1, M2 }, several.Addresses);
        var none = ManagerCommandAction.Options(parse, _ => null);
        Assert.Equal(RemoteCacheManagerOptions.DefaultAddress, none.Address);
        Assert.Empty(none.Addresses);
    }

    [Theory]
    [InlineData("http://m1:7400,not an address", "--manager: 'not an address' is not a manager address")]
    [InlineData("http://m1:7400,,http://m2:7400", "--manager: '' is not a manager address")]
    [InlineData("ftp://m1:7400", "--manager: 'ftp://m1:7400' is not a manager address")]
    [InlineData("http://m1:7400,http://M1:7400/", "names http://m1:7400/ twice")]
    public async Task BadAddressesAreRefusedBeforeAnythingIsSent(string addresses, string refusal)
    {
        var error = new StringWriter();
        int exit = await Parse("caches", "--manager", addresses, "--api-key", "k").InvokeAsync(new InvocationConfiguration { Output = new StringWriter(), Error = error });
        Assert.Equal(ManagerExitCodes.Usage, exit);
        Assert.Contains(refusal, error.ToString());
    }

    [Fact]
    public async Task TimeoutBoundsEachCallAndIsCheckedBeforeAnythingIsSent()
    {
        Assert.Equal(TimeSpan.FromSeconds(2.5), ManagerCommandAction.Options(Parse("caches", "--timeout", "2.5", "--api-key", "k"), _ => null).CallTimeout);
        Assert.Equal(new RemoteCacheManagerOptions().CallTimeout, ManagerCommandAction.Options(Parse("caches", "--api-key", "k"), _ => null).CallTimeout);
        foreach (string bad in new[] { "0", "-1", "3601", "NaN" })
        {
            var error = new StringWriter();
            int exit = await Parse("caches", "--timeout", bad, "--api-key", "k").InvokeAsync(new InvocationConfiguration { Output = new StringWriter(), Error = error });
            Assert.Equal(ManagerExitCodes.Usage, exit);
            Assert.Contains("--timeout", error.ToString());
        }
    }
}

using System.IO;
using Xunit;

namespace RemoteCache.Cli.Tests;

public sealed class HelpTests
{
    [Fact]
    public void HelpListsTheSloCommands()
    {
        var output = new StringWriter();
        var root = RemoteCache.Cli.Program.BuildRoot();
        int exit = root.Parse(new[] { "--help" }).Invoke(new System.CommandLine.InvocationConfiguration { Output = output });
        Assert.Equal(0, exit);
        Assert.Contains("slo", output.ToString());
    }

    [Fact]
    public void SloHelpListsSearchAndBench()
    {
        var output = new StringWriter();
        int exit = RemoteCache.Cli.Program.BuildRoot().Parse(new[] { "slo", "--help" })
            .Invoke(new System.CommandLine.InvocationConfiguration { Output = output });
        Assert.Equal(0, exit);
        Assert.Contains("search", output.ToString());
        Assert.Contains("bench", output.ToString());
    }
}

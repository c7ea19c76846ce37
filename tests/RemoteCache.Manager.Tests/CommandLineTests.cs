using System.CommandLine;
using System.IO;
using System.Threading.Tasks;
using Xunit;

namespace RemoteCache.Manager.Tests;

public sealed class CommandLineTests
{
    private static async Task<(int Exit, string Output, string Error)> Run(params string[] args)
    {
        var output = new StringWriter();
        var error = new StringWriter();
        int exit = await Program.Command().Parse(args).InvokeAsync(new InvocationConfiguration { Output = output, Error = error });
        return (exit, output.ToString(), error.ToString());
    }

    [Fact]
    public async Task RefusalsAtStartNameWhatIsWrong()
    {
        string state = Directory.CreateTempSubdirectory("manager-cli-").FullName;
        try
        {
            var (exit, _, error) = await Run("--state-dir", state, "--listen", "not an address");
            Assert.Equal(1, exit);
            Assert.Contains("--listen not an address", error);
            (exit, _, error) = await Run("--state-dir", state, "--listen", "https://127.0.0.1:0");
            Assert.Equal(1, exit);
            Assert.Contains("needs --certificate", error);
            (exit, _, error) = await Run("--state-dir", state, "--catalogue", Path.Combine(state, "missing.json"));
            Assert.Equal(1, exit);
            Assert.Contains("missing.json", error);
            (exit, _, error) = await Run("--state-dir", state, "--transports", "tcp,verbs");
            Assert.Equal(1, exit);
            Assert.Contains("--transports names verbs, but the local allocator's servers listen for verbs only with --verbs-address", error);
            (exit, _, error) = await Run("--state-dir", state, "--transports", "tcp,verbs", "--verbs-address", "10.0.2.15");
            Assert.Equal(1, exit);
            Assert.Contains("no verbs model", error);
            (exit, _, error) = await Run("--state-dir", state, "--verbs-address", "rxe0");
            Assert.Equal(1, exit);
            Assert.Contains("--verbs-address rxe0 is not an IPv4 address", error);
            (exit, _, error) = await Run("--state-dir", state, "--allocator", "static", "--verbs-address", "10.0.2.15");
            Assert.Equal(1, exit);
            Assert.Contains("is for the local allocator's servers", error);
            (exit, _, error) = await Run("--state-dir", state, "--replacement-idle-timeout", "0");
            Assert.Equal(1, exit);
            Assert.Contains("--replacement-idle-timeout must be positive", error);
        }
        finally
        {
            Directory.Delete(state, recursive: true);
        }
    }

    [Fact]
    public async Task HelpListsTheFlags()
    {
        var (exit, output, _) = await Run("--help");
        Assert.Equal(0, exit);
        foreach (string flag in new[] { "--listen", "--catalogue", "--keys", "--allocator", "--warm", "--commit-memory", "--verbs-address", "--replacement-idle-timeout", "--certificate" })
            Assert.Contains(flag, output);
    }
}

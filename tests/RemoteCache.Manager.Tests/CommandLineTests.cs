using System.CommandLine;
using System.IO;
using System.Linq;
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
            foreach (var (flags, refusal) in new (string[], string)[]
            {
                (new[] { "--listen", "not an address" }, "--listen not an address"),
                (new[] { "--listen", "https://127.0.0.1:0" }, "needs --certificate"),
                (new[] { "--catalogue", Path.Combine(state, "missing.json") }, "missing.json"),
                (new[] { "--transports", "tcp,verbs" }, "--transports names verbs, but the local allocator's servers listen for verbs only with --verbs-address"),
                (new[] { "--transports", "tcp,verbs", "--verbs-address", "10.0.2.15" }, "no verbs model"),
                (new[] { "--verbs-address", "rxe0" }, "--verbs-address rxe0 is not an IPv4 address"),
                (new[] { "--allocator", "static", "--verbs-address", "10.0.2.15" }, "is for the local allocator's servers"),
                (new[] { "--replacement-idle-timeout", "0" }, "--replacement-idle-timeout must be positive"),
                (new[] { "--event-retention", "0" }, "--event-retention must be between 1 s and 31536000 s, not 0 s"),
                (new[] { "--event-retention", "1e300" }, "--event-retention must be between"),
                (new[] { "--events-per-cache", "0" }, "--events-per-cache must be between 1 and 1000000, not 0"),
            })
            {
                var (exit, _, error) = await Run(new[] { "--state-dir", state }.Concat(flags).ToArray());
                Assert.Equal(1, exit);
                Assert.Contains(refusal, error);
            }
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
        foreach (string flag in new[] { "--listen", "--catalogue", "--keys", "--allocator", "--warm", "--commit-memory", "--verbs-address", "--replacement-idle-timeout", "--event-retention", "--events-per-cache", "--certificate" })
            Assert.Contains(flag, output);
    }
}

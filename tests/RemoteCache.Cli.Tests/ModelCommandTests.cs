using System;
using System.CommandLine;
using System.IO;
using System.Linq;
using System.Runtime.Versioning;
using RemoteCache.Cli.Slo;
using RemoteCache.Slo;
using Xunit;

namespace RemoteCache.Cli.Tests;

/// <summary>`remotecache slo model` run in process with a fake measurer: flags, resume, refusals, the file it writes.</summary>
public sealed class ModelCommandTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("rc-slo-model-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    private string File(string name) => Path.Combine(_dir, name);

    internal static (int Exit, string Output, string Error) Run(RootCommand root, params string[] args)
    {
        var output = new StringWriter();
        var error = new StringWriter();
        int exit = root.Parse(args).Invoke(new InvocationConfiguration { Output = output, Error = error });
        return (exit, output.ToString(), error.ToString());
    }

    private static (int Exit, string Output, string Error) RunFake(FakeMeasurer measurer, params string[] args) =>
        Run(new RootCommand { new Command("slo") { ModelCommand.Create(_ => measurer) } }, args);

    /// <summary>Better with q up to 4 and b up to 8, flat past them: early termination along both.</summary>
    private static double Plateau(CacheConfig c) =>
        1e5 * (1 + c.ServerThreads) * Math.Min(c.BatchSize, 8) * Math.Min(c.QueueDepth, 4);

    [Fact]
    public void WritesAModelWithTheGridTheSpaceAndHowItWasMeasured()
    {
        string file = File("m.json");
        var fake = new FakeMeasurer(Plateau);
        var (exit, output, error) = RunFake(fake, "slo", "model", "--transport", "shm", "--record-size", "64", "--out", file,
                                            "--max-client-threads", "1", "--max-server-threads", "2", "--note", "a test");
        Assert.True(exit == 0, error);
        var model = PerformanceModel.Load(file);
        Assert.Equal("shm", model.Transport);
        Assert.Equal("same-host", model.Distance);
        Assert.Equal(64, model.RecordSize);
        Assert.Equal(new ConfigurationSpace(1, 0, 2, 64, 64), model.Space);
        Assert.Equal(BenchMeasurer.ToolName, model.Measured.Tool);
        Assert.Equal(0.5, model.Measured.SecondsPerPoint);
        Assert.Equal(0.2, model.Measured.WarmupSeconds);
        Assert.Equal($"remotecache slo model --transport shm --record-size 64 --out {file} --max-client-threads 1 --max-server-threads 2 --note 'a test'",
                     model.Measured.Command);
        Assert.Matches(@"^\d{4}-\d{2}-\d{2}$", model.Measured.Date);
        Assert.Equal(Environment.ProcessorCount, model.Machine.Cores);
        Assert.True(model.Machine.MemoryBytes > 0);
        Assert.False(string.IsNullOrWhiteSpace(model.Machine.Cpu));
        Assert.StartsWith("a test", model.Machine.Note);
        Assert.Equal(new[] { SloOperation.Read, SloOperation.Write }, model.Operations.Keys);
        // Points in the order measured, reads first; both operations took the same path.
        // Each point is the median of 3 runs by default.
        Assert.Equal(3, model.Measured.Repeats);
        Assert.All(fake.Calls.GroupBy(c => c), g => Assert.Equal(3, g.Count()));
        Assert.Equal(fake.Calls.Where(c => c.Operation == SloOperation.Read).Select(c => c.Config).Distinct(), model.Points(SloOperation.Read).Select(p => p.Config));
        Assert.Equal(model.Points(SloOperation.Read).Select(p => p.Config), model.Points(SloOperation.Write).Select(p => p.Config));
        Assert.DoesNotContain(model.Points(SloOperation.Read), p => p.Q > 16 || p.B > 32);
        Assert.Contains("early termination: read c=0 s=1 b=1: q stops at 16", output);
        Assert.Contains("early termination left out", output);
    }

    [Fact]
    public void TcpHasNoZeroServerThreads()
    {
        string file = File("tcp.json");
        var fake = new FakeMeasurer(Plateau);
        var (exit, output, error) = RunFake(fake, "slo", "model", "--transport", "tcp", "--record-size", "512", "--out", file, "--operations", "write");
        Assert.True(exit == 0, error);
        var model = PerformanceModel.Load(file);
        Assert.Equal(1, model.Space.MinServerThreads);
        Assert.Equal(8, model.Space.MaxBatch);
        Assert.Equal(new[] { SloOperation.Write }, model.Operations.Keys);
        Assert.DoesNotContain(fake.Calls, c => c.Config.ServerThreads == 0 || c.Operation == SloOperation.Read);
        Assert.Contains("s = 0 acts as s = 1", output);
    }

    [Fact]
    public void AnInterruptedModelResumesWithoutMeasuringItsPointsAgain()
    {
        string file = File("resume.json");
        string[] args = { "slo", "model", "--transport", "shm", "--record-size", "8", "--out", file, "--max-client-threads", "1", "--max-server-threads", "1",
                          "--repeats", "1" };
        var failing = new FakeMeasurer(Plateau) { FailAfter = 7 };
        var (exit, _, error) = RunFake(failing, args);
        Assert.Equal(1, exit);
        Assert.Contains("fake failure at read", error);
        Assert.Contains($"7 points are saved in {file}; the same command with --resume continues it", error);
        var partial = PerformanceModel.Load(file);
        Assert.Equal(failing.Calls.Select(c => c.Config), partial.Points(SloOperation.Read).Select(p => p.Config));

        var (refused, _, refusal) = RunFake(new FakeMeasurer(Plateau), args);
        Assert.Equal(1, refused);
        Assert.Contains("exists: pass --resume", refusal);
        Assert.Equal(7, PerformanceModel.Load(file).Points(SloOperation.Read).Count);

        var resumer = new FakeMeasurer(Plateau);
        (exit, var output, error) = RunFake(resumer, args.Append("--resume").ToArray());
        Assert.True(exit == 0, error);
        Assert.Contains("resuming", output);
        Assert.Empty(resumer.Calls.Intersect(failing.Calls));
        var model = PerformanceModel.Load(file);
        Assert.EndsWith("--resume", model.Measured.Command);

        // The whole path, as one uninterrupted run measures it.
        var whole = new FakeMeasurer(Plateau);
        string other = File("whole.json");
        Assert.Equal(0, RunFake(whole, args.Select(a => a == file ? other : a).ToArray()).Exit);
        Assert.Equal(whole.Calls.Count, failing.Calls.Count + resumer.Calls.Count);
        Assert.Equal(whole.Calls.Skip(failing.Calls.Count), resumer.Calls);
        foreach (var op in new[] { SloOperation.Read, SloOperation.Write })
            Assert.Equal(PerformanceModel.Load(other).Points(op).Select(p => p.Config), model.Points(op).Select(p => p.Config));
    }

    [Fact]
    public void ResumeRefusesAModelOfAnotherTransportOrRecordSize()
    {
        string file = File("tcp64.json");
        Assert.Equal(0, RunFake(new FakeMeasurer(Plateau), "slo", "model", "--transport", "tcp", "--record-size", "64", "--out", file, "--quick").Exit);
        var fake = new FakeMeasurer(Plateau);
        var (exit, _, error) = RunFake(fake, "slo", "model", "--transport", "shm", "--record-size", "8", "--out", file, "--quick", "--resume");
        Assert.Equal(1, exit);
        Assert.Contains("it is a tcp model of 64 B records; this command measures shm with 8 B records", error);
        Assert.Empty(fake.Calls);

        (exit, _, error) = RunFake(fake, "slo", "model", "--transport", "tcp", "--record-size", "64", "--out", file, "--quick", "--resume", "--seconds", "1");
        Assert.Equal(1, exit);
        Assert.Contains("measured for 0.2 s after 0.1 s of warm-up; this command measures for 1 s after 0.1 s", error);

        (exit, _, error) = RunFake(fake, "slo", "model", "--transport", "tcp", "--record-size", "64", "--out", file, "--quick", "--resume", "--repeats", "3");
        Assert.Equal(1, exit);
        Assert.Contains("its points are the median of 1 run(s); this command takes 3", error);

        (exit, _, error) = RunFake(fake, "slo", "model", "--transport", "tcp", "--record-size", "64", "--out", file, "--resume");
        Assert.Equal(1, exit);
        Assert.Contains("its space is c ≤ 0, s 1..1, b ≤ 4, q ≤ 4; this command's is", error);
        Assert.Empty(fake.Calls);

        // The same command resumes a finished model without measuring anything.
        (exit, _, error) = RunFake(fake, "slo", "model", "--transport", "tcp", "--record-size", "64", "--out", file, "--quick", "--resume");
        Assert.True(exit == 0, error);
        Assert.Empty(fake.Calls);
    }

    [Fact]
    public void QuickIsATinyGrid()
    {
        string file = File("quick.json");
        var fake = new FakeMeasurer(c => 1e6 * c.BatchSize * c.QueueDepth * (1 + c.ServerThreads));
        Assert.Equal(0, RunFake(fake, "slo", "model", "--transport", "shm", "--record-size", "8", "--out", file, "--quick").Exit);
        var model = PerformanceModel.Load(file);
        Assert.Equal(new ConfigurationSpace(0, 0, 1, 4, 4), model.Space);
        Assert.Equal(0.2, model.Measured.SecondsPerPoint);
        Assert.Equal(2 * (3 + 9), fake.Calls.Count);
    }

    [Theory]
    [InlineData("--operations read,scan", "'scan' is not read or write")]
    [InlineData("--max-batch 16", "--max-batch 16 is above the largest batch for 512 B records, 8")]
    [InlineData("--max-queue-depth 65", "--max-queue-depth must be 1..64")]
    [InlineData("--max-server-threads 0", "--max-server-threads must be 1..256")]
    [InlineData("--seconds 0", "--seconds must be more than 0")]
    public void RefusesBadFlags(string flags, string message)
    {
        var fake = new FakeMeasurer(Plateau);
        var (exit, _, error) = RunFake(fake, new[] { "slo", "model", "--transport", "shm", "--record-size", "512", "--out", File("x.json") }
                                             .Concat(flags.Split(' ')).ToArray());
        Assert.NotEqual(0, exit);
        Assert.Contains(message, error);
        Assert.Empty(fake.Calls);
        Assert.False(System.IO.File.Exists(File("x.json")));
    }

    // An executable shell script standing in for remotecache-bench.
    [SupportedOSPlatform("linux")]
    private string FakeBench(string script)
    {
        string bench = File("fake-bench");
        System.IO.File.WriteAllText(bench, "#!/bin/sh\n" + script + "\n");
        System.IO.File.SetUnixFileMode(bench, UnixFileMode.UserRead | UnixFileMode.UserWrite | UnixFileMode.UserExecute);
        return bench;
    }

    [Fact]
    [SupportedOSPlatform("linux")]
    public void ABenchFailureNamesTheConfigurationAndShowsTheToolsStderr()
    {
        string bench = FakeBench("echo \"[server] starting\" >&2\necho \"remotecache-bench: rc_cache_open: RC_E_INVALID_ARGUMENT: it broke ($*)\" >&2\nexit 3");
        string file = File("failed.json");
        var (exit, _, error) = Run(Program.BuildRoot(), "slo", "model", "--transport", "shm", "--record-size", "8", "--out", file, "--quick", "--bench", bench);
        Assert.Equal(1, exit);
        Assert.Contains("remotecache-bench failed for read c=0 s=0 b=1 q=1 (exit code 3)", error);
        Assert.Contains("RC_E_INVALID_ARGUMENT: it broke (--transport shm --op read --size 8 --batch 1 --qdepth 1 --client-threads 0 --server-threads 0 --seconds 0.2 --warmup 0.1 --json)", error);
        Assert.Contains("[server] starting", error);
        Assert.Contains("nothing saved", error);
        Assert.False(System.IO.File.Exists(file));
    }

    [Theory]
    [InlineData("--transport verbs", "--transport verbs needs --verbs-address")]
    [InlineData("--transport shm --verbs-address 10.0.2.15", "--verbs-address is only for --transport verbs")]
    [InlineData("--transport verbs --verbs-address rxe0", "--verbs-address rxe0 is not an IPv4 address")]
    public void VerbsNeedsTheAddressOfAnRdmaDevice(string flags, string message)
    {
        var fake = new FakeMeasurer(Plateau);
        var (exit, _, error) = RunFake(fake, new[] { "slo", "model", "--record-size", "8", "--out", File("v.json"), "--quick" }
                                             .Concat(flags.Split(' ')).ToArray());
        Assert.NotEqual(0, exit);
        Assert.Contains(message, error);
        Assert.Empty(fake.Calls);
    }

    [Fact]
    public void AVerbsModelHasTheOneSidedPoints()
    {
        string file = File("verbs.json");
        ModelSettings? seen = null;
        var fake = new FakeMeasurer(Plateau);
        var (exit, _, error) = Run(new RootCommand { new Command("slo") { ModelCommand.Create(s => { seen = s; return fake; }) } },
                                   "slo", "model", "--transport", "verbs", "--verbs-address", "10.0.2.15", "--record-size", "512", "--out", file, "--quick");
        Assert.True(exit == 0, error);
        Assert.Equal("10.0.2.15", seen!.VerbsAddress);
        var model = PerformanceModel.Load(file);
        Assert.Equal("verbs", model.Transport);
        Assert.Equal(0, model.Space.MinServerThreads);
        Assert.Contains(fake.Calls, c => c.Config.ServerThreads == 0);
    }

    [Fact]
    [SupportedOSPlatform("linux")]
    public void TheBenchIsToldTheVerbsAddress()
    {
        string bench = FakeBench("echo \"listening on $RC_VERBS_ADDR\" >&2\nexit 3");
        var (exit, _, error) = Run(Program.BuildRoot(), "slo", "model", "--transport", "verbs", "--verbs-address", "10.9.8.7", "--record-size", "8",
                                   "--out", File("v.json"), "--quick", "--bench", bench);
        Assert.Equal(1, exit);
        Assert.Contains("listening on 10.9.8.7", error);
        Assert.Contains($"ran: RC_VERBS_ADDR=10.9.8.7 {bench} --transport verbs --op read", error);
    }

    [Fact]
    public void AMissingDirectoryIsRefusedBeforeMeasuring()
    {
        var fake = new FakeMeasurer(Plateau);
        var (exit, _, error) = RunFake(fake, "slo", "model", "--transport", "shm", "--record-size", "8", "--out", File("no/such/dir/m.json"), "--quick");
        Assert.Equal(1, exit);
        Assert.Contains("does not exist", error);
        Assert.Empty(fake.Calls);
    }

    [Fact]
    public void AMissingBenchIsNamed()
    {
        var (exit, _, error) = Run(Program.BuildRoot(), "slo", "model", "--transport", "shm", "--record-size", "8", "--out", File("m.json"), "--quick",
                                   "--bench", File("no-such-bench"));
        Assert.Equal(1, exit);
        Assert.Contains("no-such-bench: no such file", error);
    }

    [Fact]
    public void ReadsTheBenchJsonLine()
    {
        var bench = new BenchMeasurer("remotecache-bench", "shm", null, 8, 1, 0.3);
        const string line = "{\"transport\":\"shm\",\"op\":\"read\",\"size\":8,\"batch\":16,\"qdepth\":2,\"client_threads\":0,\"server_threads\":1,\"app_threads\":1,\"window\":32,\"seconds\":1.000,\"ops\":2539792,\"ops_per_sec\":2539602.7,\"p50_us\":4.144,\"p99_us\":357.376,\"p999_us\":632.832,\"mean_us\":12.050,\"errors\":0}";
        var point = bench.Parse(line + "\n", SloOperation.Read, new CacheConfig(0, 1, 16, 2));
        Assert.Equal(new ModelPoint(0, 1, 16, 2, 12.050, 2539602.7) { P50Us = 4.144, P99Us = 357.376 }, point);
        Assert.Throws<FormatException>(() => bench.Parse(line, SloOperation.Read, new CacheConfig(0, 1, 16, 4)));
        Assert.Throws<FormatException>(() => bench.Parse(line, SloOperation.Write, new CacheConfig(0, 1, 16, 2)));
        Assert.Throws<FormatException>(() => bench.Parse(line.Replace("\"ops\":2539792", "\"ops\":0"), SloOperation.Read, new CacheConfig(0, 1, 16, 2)));
        Assert.Throws<FormatException>(() => bench.Parse("usage: ...", SloOperation.Read, new CacheConfig(0, 1, 16, 2)));
    }
}

/// <summary>`slo model --quick` against the real remotecache-bench (a few seconds each; one class, so they do not run at once).</summary>
public sealed class ModelCommandBenchTests : IDisposable
{
    private readonly string _dir = Directory.CreateTempSubdirectory("rc-slo-model-bench-").FullName;

    public void Dispose() => Directory.Delete(_dir, recursive: true);

    [Theory]
    [InlineData("shm", 12)]  // s = 0: q = 1, 2, 4; s = 1: b = 1, 2, 4 × q = 1, 2, 4
    [InlineData("tcp", 9)]   // s = 1 only
    public void QuickMeasuresAModelThatLoads(string transport, int gridPoints)
    {
        string file = Path.Combine(_dir, transport + ".json");
        var (exit, output, error) = ModelCommandTests.Run(Program.BuildRoot(), "slo", "model", "--transport", transport, "--record-size", "8", "--out", file,
                                                          "--quick", "--operations", "read");
        Assert.True(exit == 0, output + error);
        var model = PerformanceModel.Load(file);
        Assert.Equal(transport, model.Transport);
        Assert.Equal("remotecache-bench", model.Measured.Tool);
        Assert.StartsWith("remotecache slo model --transport " + transport, model.Measured.Command);
        Assert.Contains("when it ended", model.Machine.Note);
        var points = model.Points(SloOperation.Read);
        Assert.InRange(points.Count, 1, gridPoints);
        Assert.Equal(new CacheConfig(0, transport == "shm" ? 0 : 1, 1, 1), points[0].Config);
        Assert.All(points, p => Assert.True(p.P50Us > 0 && p.P99Us >= p.P50Us));
        Assert.Empty(model.Points(SloOperation.Write));
    }
}

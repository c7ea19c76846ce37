using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text;
using System.Text.Json;
using RemoteCache.Benchmarks.RdmaVmCharts;
using SkiaSharp;
using Xunit;

namespace RemoteCache.Ycsb.Tests;

/// <summary>
/// The RDMA VM harness's verdict on the file servers (tests/rdma-vm/summarize.py) and its charts
/// (benchmarks/RdmaVmCharts), from guest output written here: a boot where the share is SMB Direct, and one where it
/// is mounted over TCP, whose figures must never appear as SMB Direct's.
/// </summary>
public sealed class RdmaVmSummaryTests
{
    private static readonly SKColor SmbColor = new(255, 127, 14);
    private static readonly SKColor RemoteCacheColor = new(214, 39, 40);

    private static string RepoRoot()
    {
        for (var dir = new DirectoryInfo(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
            if (File.Exists(Path.Combine(dir.FullName, "RemoteCache.sln")))
                return dir.FullName;
        throw new DirectoryNotFoundException($"no RemoteCache.sln above {AppContext.BaseDirectory}");
    }

    /// <summary>Guest output of one boot: the sections summarize.py reads for the file servers and YCSB.</summary>
    private static string GuestOutput(bool smbDirect)
    {
        var o = new StringBuilder();
        void Section(string name, int rc, params string[] lines)
        {
            o.Append("===== rdma-vm: ").Append(name).Append(" =====\n");
            foreach (var l in lines)
                o.Append(l).Append('\n');
            o.Append("===== rdma-vm: ").Append(name).Append(" done rc=").Append(rc).Append(" =====\n");
        }
        static string Fio(double iops, double p50Us) =>
            $"{{\"jobs\": [{{\"read\": {{\"iops\": {iops}, \"clat_ns\": {{\"percentile\": {{\"50.000000\": {p50Us * 1000}}}}}, \"lat_ns\": {{\"mean\": {p50Us * 1000}}}}}}}]}}";
        static string Medians(params (string Device, string Distribution, double Ops)[] rows) =>
            JsonSerializer.Serialize(new
            {
                records = 400000,
                medians = rows.Select(r => new Dictionary<string, object>
                {
                    ["Device"] = r.Device, ["Distribution"] = r.Distribution, ["Threads"] = 1, ["ops_per_s"] = r.Ops,
                    ["p50_us"] = 1e6 / r.Ops, ["Errors"] = 0,
                }),
            });

        o.Append("rxe-vm: VM ready in 2.1 s (guest kernel uptime 1.8 s)\n");
        Section("conformance", 0, "[==========] 12 tests from 2 test suites ran. (900 ms total)", "[  PASSED  ] 12 tests.");
        Section("nfs_setup", 0, "10.0.2.15:/ /mnt/nfs nfs4 rw,vers=4.2,proto=rdma 0 0");
        if (smbDirect)
            Section("smb_setup", 0, "verified: SMBDirect (in hex) protocol version: 100 transport status: 2");
        else
            Section("smb_setup", 1, "not measured: the share is mounted over TCP, not SMB Direct (no rdma among the mount's options: rw,vers=3.0)");
        // Three interleaved rounds whose RemoteCache figures differ (20 000, 9 800, 15 000 reads/s at depth 1): the row is
        // the median round's; at depth 1 a raw ib_read_lat of 50 µs (20 000 reads/s) beside each.
        for (int round = 1; round <= 3; round++)
            foreach (int size in new[] { 512, 4096 })
                foreach (int depth in new[] { 1, 32 })
                {
                    string sfx = $"{size}_{depth}_{round}";
                    Section($"nfs_fio_{sfx}", 0, Fio(1000 * depth, 800));
                    if (smbDirect)
                        Section($"smb_fio_{sfx}", 0, Fio(1400 * depth, 600));
                    else
                        Section($"smb_fio_{sfx}", 1, "not measured: the SMB Direct share is not mounted (see smb_setup)");
                    if (depth == 1)
                        Section($"ib_read_lat_cmp_{sfx}", 0,
                                " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ",
                                $" {size}       2000          30.00          100.00       50.00            50.00        1.00          80.00          90.00");
                    Section($"bench_cmp_{sfx}", 0,
                            $"{{\"ops_per_sec\": {new[] { 20000, 9800, 15000 }[round - 1] * depth}, \"p50_us\": 40.0, \"p99_us\": 90.0, \"errors\": 0}}");
                }
        Section("verbs_model", 0, "{", "  \"operations\": {\"read\": [{\"x\": 1}, {\"x\": 2}]}", "}");
        if (smbDirect)
        {
            Section("ycsb_smb", 0, "--- results.json ---",
                    Medians(("ssd", "uniform", 5000), ("remotecache", "uniform", 20000), ("ssd", "zipfian", 5200), ("remotecache", "zipfian", 21000)));
            Section("ycsb_nfs", 0, "--- results.json ---", Medians(("ssd", "uniform", 6000), ("ssd", "zipfian", 6100)));
        }
        else
        {
            Section("ycsb_smb", 1, "not measured: the SMB Direct share is not mounted (see smb_setup)");
            Section("ycsb_nfs", 0, "--- results.json ---",
                    Medians(("ssd", "uniform", 6000), ("remotecache", "uniform", 20000), ("ssd", "zipfian", 6100), ("remotecache", "zipfian", 21000)));
        }
        return o.ToString();
    }

    private static (int ExitCode, string Output, JsonDocument Summary, string Json) Summarize(string dir, bool smbDirect)
    {
        string output = Path.Combine(dir, "output.txt"), json = Path.Combine(dir, "summary.json");
        File.WriteAllText(output, GuestOutput(smbDirect));
        var start = new ProcessStartInfo("python3") { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in new[] { Path.Combine(RepoRoot(), "tests", "rdma-vm", "summarize.py"), "--require-smbdirect", "1", "--json", json, output })
            start.ArgumentList.Add(a);
        using var p = Process.Start(start)!;
        string stdout = p.StandardOutput.ReadToEnd() + p.StandardError.ReadToEnd();
        Assert.True(p.WaitForExit(60_000), "summarize.py did not finish");
        return (p.ExitCode, stdout, JsonDocument.Parse(File.ReadAllText(json)), json);
    }

    private static string TempDirectory()
    {
        var dir = Path.Combine(Path.GetTempPath(), $"rdma-vm-summary-{Guid.NewGuid():N}");
        Directory.CreateDirectory(dir);
        return dir;
    }

    private static int PixelsOf(string png, SKColor color)
    {
        using var image = SKBitmap.Decode(png);
        return ChartTests.PixelsOf(image, color);
    }

    [Fact]
    public void SmbDirectRowsAreJudgedAgainstTheirTargetsAndCharted()
    {
        string dir = TempDirectory();
        try
        {
            var (exit, output, summary, json) = Summarize(dir, smbDirect: true);
            using (summary)
            {
                Assert.True(exit == 0, output);
                var servers = summary.RootElement.GetProperty("file_servers");
                Assert.Contains("transport status: 2", servers.GetProperty("smb_direct").GetProperty("transport").GetString());
                // 512 B at depth 1: the median round's 15 000 reads/s against SMB Direct's 1 400 IOPS, 10.7x, target 10x; the
                // raw READ's ceiling 20 000 / 1 400; of it RemoteCache reached 0.75 (target 0.8).
                var read = servers.GetProperty("read_ratio");
                Assert.Equal(15000.0 / 1400, read.GetProperty("value").GetDouble(), 6);
                Assert.True(read.GetProperty("met").GetBoolean());
                Assert.Equal(20000.0 / 1400, read.GetProperty("ceiling_verbs_over_smb").GetDouble(), 6);
                var ofVerbs = servers.GetProperty("read_of_verbs");
                Assert.Equal(0.75, ofVerbs.GetProperty("value").GetDouble(), 6);
                Assert.False(ofVerbs.GetProperty("met").GetBoolean());
                Assert.Contains("3 at depth 1; RC/SMB at 512 B by round: 14.3  7.0  10.7", output);
                var first = servers.GetProperty("rows")[0];
                Assert.Equal(3, first.GetProperty("round").GetInt32());
                Assert.Equal(3, first.GetProperty("rounds").GetArrayLength());
                // YCSB: RemoteCache ran with the SMB Direct log (20 000 / 5 000 = 4x, target 3x), beside NFS's run.
                var rows = summary.RootElement.GetProperty("ycsb").GetProperty("rows").EnumerateArray().ToList();
                Assert.Equal(new[] { "uniform", "zipfian" }, rows.Select(r => r.GetProperty("distribution").GetString()));
                Assert.Equal(4.0, rows[0].GetProperty("smb_ops_ratio").GetDouble(), 6);
                Assert.Equal(20000.0 / 6000, rows[0].GetProperty("nfs_ops_ratio").GetDouble(), 6);
                Assert.All(rows, r => Assert.True(r.GetProperty("smb_met").GetBoolean()));
            }

            var comparison = FileServerCharts.Read(json);
            Assert.Equal(4, comparison.Reads.Count);
            Assert.Equal("512 B, depth 1", comparison.Reads[0].Label);
            Assert.Equal(new double?[] { 1400, 1000, 15000 }, comparison.Reads[0].Values);
            Assert.Equal(new double?[] { 5000, 6000, 20000 }, comparison.Ycsb[0].Values);
            var charts = FileServerCharts.Write(dir, comparison);
            Assert.Equal(new[] { FileServerCharts.ReadsFile, FileServerCharts.YcsbFile }, charts.Select(Path.GetFileName));
            foreach (var chart in charts)
            {
                Assert.True(PixelsOf(chart, SmbColor) > 500, $"{chart}: no SMB Direct bars");
                Assert.True(PixelsOf(chart, RemoteCacheColor) > 500, $"{chart}: no RemoteCache bars");
            }
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void AShareMountedOverTcpIsNotMeasuredAndFailsTheHarness()
    {
        string dir = TempDirectory();
        try
        {
            var (exit, output, summary, json) = Summarize(dir, smbDirect: false);
            using (summary)
            {
                Assert.Equal(1, exit);
                var problems = summary.RootElement.GetProperty("problems").EnumerateArray().Select(p => p.GetString()!).ToList();
                Assert.Contains(problems, p => p.StartsWith("SMB Direct was not measured: the share is mounted over TCP", StringComparison.Ordinal));
                Assert.Contains("SMB Direct: NOT MEASURED: the share is mounted over TCP", output);
                var servers = summary.RootElement.GetProperty("file_servers");
                Assert.Equal(JsonValueKind.Null, servers.GetProperty("read_ratio").GetProperty("value").ValueKind);
                foreach (var row in servers.GetProperty("rows").EnumerateArray())
                {
                    Assert.False(row.GetProperty("smb").TryGetProperty("iops", out _), "an SMB figure from a TCP mount");
                    Assert.True(row.GetProperty("nfs").TryGetProperty("iops", out _));
                }
                // The tiered device ran on the NFS mount instead; its ratio to NFS is still reported.
                var rows = summary.RootElement.GetProperty("ycsb").GetProperty("rows").EnumerateArray().ToList();
                Assert.All(rows, r => Assert.Equal(JsonValueKind.Null, r.GetProperty("smb_ops_ratio").ValueKind));
                Assert.Equal(20000.0 / 6000, rows[0].GetProperty("nfs_ops_ratio").GetDouble(), 6);
            }

            var comparison = FileServerCharts.Read(json);
            Assert.All(comparison.Reads.Concat(comparison.Ycsb), g => Assert.Null(g.Values[0]));
            var charts = FileServerCharts.Write(dir, comparison);
            Assert.All(charts, chart => Assert.True(PixelsOf(chart, SmbColor) < 50, $"{chart}: SMB Direct drawn though not measured"));
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    [Fact]
    public void AnotherJsonIsRefusedByName()
    {
        string dir = TempDirectory();
        try
        {
            string json = Path.Combine(dir, "results.json");
            File.WriteAllText(json, "{\"medians\": []}");
            var e = Assert.Throws<InvalidDataException>(() => FileServerCharts.Read(json));
            Assert.Contains("not the summary.json of tests/rdma-vm/run.sh", e.Message);
        }
        finally
        {
            Directory.Delete(dir, recursive: true);
        }
    }
}

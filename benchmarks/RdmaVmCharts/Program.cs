using System;
using System.IO;
using System.Text.Json;

namespace RemoteCache.Benchmarks.RdmaVmCharts;

/// <summary>
/// usage: RemoteCache.Benchmarks.RdmaVmCharts SUMMARY_JSON [OUT_DIR]. SUMMARY_JSON is the summary.json of
/// tests/rdma-vm/run.sh; the charts go to OUT_DIR (default: beside it). A class of its own namespace, not top-level
/// statements, whose global Program the YCSB tool's tests (which reference both) would confuse with the tool's.
/// </summary>
internal static class Program
{
    private static int Main(string[] args)
    {
        if (args.Length is 0 or > 2 || args[0] is "-h" or "--help")
        {
            Console.Error.WriteLine("usage: RemoteCache.Benchmarks.RdmaVmCharts SUMMARY_JSON [OUT_DIR]   (the summary.json of tests/rdma-vm/run.sh)");
            return args.Length is 0 or > 2 ? 2 : 0;
        }
        string summary = args[0];
        string outDir = args.Length > 1 ? args[1] : Path.GetDirectoryName(Path.GetFullPath(summary))!;
        try
        {
            var comparison = FileServerCharts.Read(summary);
            Console.WriteLine($"wrote {string.Join(", ", FileServerCharts.Write(outDir, comparison))}");
            return 0;
        }
        catch (Exception e) when (e is IOException or UnauthorizedAccessException or InvalidDataException or JsonException)
        {
            Console.Error.WriteLine($"rdma-vm-charts: {summary}: {e.Message}");
            return 1;
        }
    }
}

using System;
using System.IO;
using RemoteCache.Benchmarks.SloCharts;

// usage: dotnet run --project benchmarks/SloCharts -- DIR [DIR …]
// Each DIR holds an accuracy.json of `remotecache slo accuracy --out DIR`; the two CDF charts are written beside it.
if (args.Length == 0 || args[0] is "-h" or "--help")
{
    Console.Error.WriteLine("usage: RemoteCache.Benchmarks.SloCharts DIR [DIR …]   (each DIR holds the accuracy.json of `remotecache slo accuracy --out DIR`)");
    return args.Length == 0 ? 2 : 0;
}
foreach (string dir in args)
{
    string json = Path.Combine(dir, "accuracy.json");
    if (!File.Exists(json))
    {
        Console.Error.WriteLine($"slo-charts: {json} does not exist");
        return 1;
    }
    try
    {
        var (title, points) = AccuracyCharts.Read(json);
        Console.WriteLine($"wrote {string.Join(", ", AccuracyCharts.Write(dir, points, title))}");
    }
    catch (Exception e) when (e is InvalidDataException or System.Text.Json.JsonException or InvalidOperationException or FormatException)
    {
        Console.Error.WriteLine($"slo-charts: {json}: {e.Message}");
        return 1;
    }
}
return 0;

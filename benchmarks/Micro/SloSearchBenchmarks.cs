using System;
using BenchmarkDotNet.Attributes;
using RemoteCache.Cli.Slo;
using RemoteCache.Slo;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// The SLO search (RemoteCache.Slo.SloSearch) on a synthetic model of Redy's size (SyntheticRedyModel, shared with
/// <c>remotecache slo bench</c>: 8 B records so b ≤ 512, q ≤ 16, c and s ≤ <see cref="Threads"/>; every grid point
/// "measured" by a formula with ±3 % noise). No server, no I/O: CPU only.
/// </summary>
/// <remarks>
/// <list type="bullet">
/// <item><see cref="Search"/>, <see cref="SearchByPrice"/>: <see cref="Queries"/> random SLOs per invocation (Redy's
/// §7.3: latency and throughput uniform between the model's lowest and highest), in Redy's order and by price (a
/// server thread costs 2, a client thread 1); the time reported is per query.</item>
/// <item><see cref="Precompute"/>: building the search (every configuration predicted, the frontiers) on one thread.</item>
/// <item><see cref="Figure10"/>: Redy's Fig. 10 walk over the same model for the first <see cref="Figure10Queries"/> of the SLOs, per query.</item>
/// </list>
/// Threads = 30 is Redy's size (c and s above 16 are not predicted: 32 is not in the space); 32 predicts the whole space.
/// </remarks>
public class SloSearchBenchmarks
{
    public const int Queries = 1024;
    public const int Figure10Queries = 16;

    private static readonly SloCost Priced = new(2, 1);

    [Params(30, 32)]
    public int Threads { get; set; } = 30;

    private SloPredictor? _predictor;
    private SloSearch? _search;
    private ServiceLevelObjective[] _slos = Array.Empty<ServiceLevelObjective>();

    [GlobalSetup]
    public void Setup()
    {
        var model = SyntheticRedyModel.Create(Threads, seed: 1);
        _predictor = new SloPredictor(model, SloOperation.Read);
        _search = new SloSearch(_predictor);
        _slos = SyntheticRedyModel.RandomSlos(model, Queries, seed: 1, logUniform: false).ToArray();
    }

    [Benchmark(OperationsPerInvoke = Queries)]
    public int Search()
    {
        int found = 0;
        foreach (var slo in _slos)
        {
            if (_search!.Search(slo).Found)
                found++;
        }
        return found;
    }

    [Benchmark(OperationsPerInvoke = Queries)]
    public int SearchByPrice()
    {
        int found = 0;
        foreach (var slo in _slos)
        {
            if (_search!.Search(slo, Priced).Found)
                found++;
        }
        return found;
    }

    [Benchmark]
    public long Precompute() => new SloSearch(_predictor!, maxDegreeOfParallelism: 1).ConfigurationCount;

    [Benchmark(OperationsPerInvoke = Figure10Queries)]
    public int Figure10()
    {
        int found = 0;
        for (int i = 0; i < Figure10Queries; i++)
        {
            if (SloReferenceSearch.Figure10(_predictor!, _slos[i]) is not null)
                found++;
        }
        return found;
    }
}

using System.CommandLine;

namespace RemoteCache.Cli;

/// <summary>The <c>remotecache</c> command line.</summary>
public static class Program
{
    public static int Main(string[] args) => BuildRoot().Parse(args).Invoke();

    /// <summary>Every command, for Main and for tests that run the CLI in process.</summary>
    public static RootCommand BuildRoot()
    {
        var slo = new Command("slo", "SLO performance models: measure one, search one for the cheapest configuration that meets an SLO, time the search");
        slo.Add(Slo.ModelCommand.Create());
        slo.Add(Slo.SloSearchCommand.Create());
        slo.Add(Slo.SloBenchCommand.Create());
        slo.Add(Slo.SloAccuracyCommand.Create());
        var root = new RootCommand("RemoteCache: remote-memory caches for .NET. Caches through the cache manager (caches, create, reshape, delete, watch; servers, reclaim, join-token for operators), a server that joins the managers by itself (serve) and SLO performance models (slo)") { slo };
        Manager.ManagerCommands.AddTo(root);
        if (System.OperatingSystem.IsLinux())
            Manager.JoinCommands.AddTo(root);
        return root;
    }
}

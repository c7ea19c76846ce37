using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading.Tasks;

namespace RemoteCache.Manager.Tests.Cluster;

/// <summary>
/// The bed's only way to change the machine's network: the <c>ip</c> command (iproute2), run as a process. Hand-written
/// netlink would be shorter to call but is one more thing to get wrong; <c>ip</c> is what a person debugging a leftover
/// would use too.
/// </summary>
internal static class Ip
{
    public const string Binary = "/usr/sbin/ip";
    public const string Kill = "/bin/kill";

    /// <summary>Why the bed cannot run here, or null: root is needed for namespaces and links, and iproute2's <c>ip</c>.</summary>
    public static string? Unavailable()
    {
        if (!OperatingSystem.IsLinux())
            return "the cluster bed needs Linux network namespaces";
        if (geteuid() != 0)
            return "the cluster bed needs root (network namespaces, veth links, a bridge); run the tests as root, as CI does";
        if (!File.Exists(Binary))
            return $"the cluster bed needs {Binary} (Debian package iproute2)";
        if (!File.Exists(EtcdCluster.Binary))
            return $"the cluster bed needs {EtcdCluster.Binary} (Debian package etcd-server; scripts/test.sh installs it)";
        return null;
    }

    [System.Runtime.InteropServices.DllImport("libc", SetLastError = false)]
#pragma warning disable SYSLIB1054 // one call, no marshalling: LibraryImport's generated code would add nothing
    private static extern uint geteuid();
#pragma warning restore SYSLIB1054

    /// <summary>Runs <c>ip ARGS</c>; throws with its error output when it fails (unless <paramref name="check"/> is false).</summary>
    public static async Task<(int Code, string Output)> RunAsync(IEnumerable<string> args, bool check = true) =>
        await RunProgramAsync(Binary, args, check).ConfigureAwait(false);

    public static Task<(int Code, string Output)> RunAsync(params string[] args) => RunAsync((IEnumerable<string>)args);

    /// <summary>Runs <c>ip -n NAMESPACE ARGS</c> (the same as <c>ip netns exec NAMESPACE ip ARGS</c>, one process fewer).</summary>
    public static Task<(int Code, string Output)> InAsync(string ns, params string[] args) => RunAsync(new[] { "-n", ns }.Concat(args));

    public static async Task<(int Code, string Output)> RunProgramAsync(string program, IEnumerable<string> args, bool check = true)
    {
        var start = new ProcessStartInfo(program) { RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (string a in args)
            start.ArgumentList.Add(a);
        using var process = Process.Start(start) ?? throw new InvalidOperationException($"{program} did not start");
        var output = process.StandardOutput.ReadToEndAsync();
        var error = process.StandardError.ReadToEndAsync();
        await process.WaitForExitAsync().ConfigureAwait(false);
        string text = await output.ConfigureAwait(false) + await error.ConfigureAwait(false);
        if (check && process.ExitCode != 0)
            throw new InvalidOperationException($"{program} {string.Join(' ', start.ArgumentList)} failed ({process.ExitCode}): {text.Trim()}");
        return (process.ExitCode, text);
    }

    /// <summary>Sends <paramref name="signal"/> (KILL, STOP, CONT, TERM) to <paramref name="pids"/>; gone processes are no error.</summary>
    public static async Task SignalAsync(string signal, IEnumerable<int> pids)
    {
        var list = pids.Select(p => p.ToString(System.Globalization.CultureInfo.InvariantCulture)).ToList();
        if (list.Count > 0)
            await RunProgramAsync(Kill, new[] { "-" + signal }.Concat(list), check: false).ConfigureAwait(false);
    }
}

using System;
using System.Diagnostics;
using System.IO;
using System.Net.Sockets;
using System.Threading;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// A real Samba server (smbd from Debian) for the SMB baseline: started on loopback on a private port with its
/// own configuration, state and password database in a temporary folder, one share in that folder; stopped and
/// removed at dispose. Needs root (smbd), as the benchmark's machine setup has.
/// </summary>
public sealed class SambaServer : IDisposable
{
    public const string Share = "ycsb";
    public const string User = "root";

    private readonly Process _process;
    private readonly string _root;

    private SambaServer(Process process, string root, int port, string password)
    {
        _process = process;
        _root = root;
        Port = port;
        Password = password;
    }

    public int Port { get; }
    public string Password { get; }
    public string ShareDirectory => Path.Combine(_root, "share");

    /// <summary>smb://127.0.0.1:PORT/ycsb</summary>
    public string ShareUrl => $"smb://127.0.0.1:{Port}/{Share}";

    public static SambaServer Start(string root)
    {
        string smbd = Find("smbd"), pdbedit = Find("pdbedit");
        root = Path.GetFullPath(root);
        KillLeftovers(root);
        int port = FreePort();
        Directory.CreateDirectory(root);
        foreach (var d in new[] { "share", "private", "lock", "state", "cache", "pid", "log" })
            Directory.CreateDirectory(Path.Combine(root, d));
        string conf = Path.Combine(root, "smb.conf");
        File.WriteAllText(conf, $"""
            [global]
              workgroup = WORKGROUP
              server role = standalone server
              smb ports = {port}
              interfaces = lo
              bind interfaces only = yes
              disable netbios = yes
              server min protocol = SMB3
              private dir = {root}/private
              lock directory = {root}/lock
              state directory = {root}/state
              cache directory = {root}/cache
              pid directory = {root}/pid
              log file = {root}/log/smbd.log
              passdb backend = tdbsam:{root}/private/passdb.tdb
              load printers = no
              printing = bsd
              printcap name = /dev/null
              disable spoolss = yes
              map to guest = never
            [{Share}]
              path = {root}/share
              read only = no
              valid users = {User}
              strict sync = no
            """);
        string password = Convert.ToHexString(Guid.NewGuid().ToByteArray());
        Run(pdbedit, new[] { "-s", conf, "-a", "-u", User, "-t" }, $"{password}\n{password}\n");

        var info = new ProcessStartInfo(smbd) { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in new[] { "--foreground", "--no-process-group", "--debug-stdout", "-d", "0", "-s", conf })
            info.ArgumentList.Add(a);
        var process = Process.Start(info) ?? throw new InvalidOperationException("could not start smbd");
        process.OutputDataReceived += (_, _) => { };
        process.ErrorDataReceived += (_, _) => { };
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        var server = new SambaServer(process, root, port, password);
        var deadline = DateTime.UtcNow.AddSeconds(15);
        while (true)
        {
            if (process.HasExited)
                throw new InvalidOperationException($"smbd exited with code {process.ExitCode}; see {root}/log");
            try
            {
                using var probe = new TcpClient();
                probe.Connect("127.0.0.1", port);
                return server;
            }
            catch (SocketException) when (DateTime.UtcNow < deadline)
            {
                Thread.Sleep(100);
            }
        }
    }

    // A run that crashed leaves its smbd behind (it is not our process group's child any more): stop any smbd
    // that serves this same folder before starting a new one.
    private static void KillLeftovers(string root)
    {
        foreach (var dir in Directory.GetDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(dir), out int pid))
                continue;
            try
            {
                var cmdline = File.ReadAllText(Path.Combine(dir, "cmdline")).Replace('\0', ' ');
                if (cmdline.Contains("smbd", StringComparison.Ordinal) && cmdline.Contains(Path.Combine(root, "smb.conf"), StringComparison.Ordinal))
                    Process.GetProcessById(pid).Kill();
            }
            catch (Exception e) when (e is IOException or UnauthorizedAccessException or ArgumentException or InvalidOperationException)
            {
            }
        }
    }

    private static int FreePort()
    {
        var listener = new TcpListener(System.Net.IPAddress.Loopback, 0);
        listener.Start();
        int port = ((System.Net.IPEndPoint)listener.LocalEndpoint).Port;
        listener.Stop();
        return port;
    }

    private static string Find(string tool)
    {
        foreach (var dir in new[] { "/usr/sbin", "/usr/bin", "/sbin", "/bin" })
        {
            var path = Path.Combine(dir, tool);
            if (File.Exists(path))
                return path;
        }
        throw new FileNotFoundException($"{tool} not found: install the Debian package 'samba' (scripts/run.sh does)");
    }

    private static void Run(string file, string[] args, string stdin)
    {
        var info = new ProcessStartInfo(file) { UseShellExecute = false, RedirectStandardInput = true, RedirectStandardOutput = true, RedirectStandardError = true };
        foreach (var a in args)
            info.ArgumentList.Add(a);
        using var p = Process.Start(info)!;
        p.StandardInput.Write(stdin);
        p.StandardInput.Close();
        string output = p.StandardOutput.ReadToEnd() + p.StandardError.ReadToEnd();
        p.WaitForExit();
        if (p.ExitCode != 0)
            throw new InvalidOperationException($"{file} {string.Join(' ', args)} failed ({p.ExitCode}): {output}");
    }

    public void Dispose()
    {
        try
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
                _process.WaitForExit(10_000);
            }
        }
        catch (InvalidOperationException)
        {
        }
        _process.Dispose();
        try
        {
            Directory.Delete(_root, recursive: true);
        }
        catch (IOException)
        {
        }
    }
}

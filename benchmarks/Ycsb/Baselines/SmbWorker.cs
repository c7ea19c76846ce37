using System;
using System.Diagnostics;
using System.IO;
using System.IO.MemoryMappedFiles;
using System.Reflection;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// A process that owns one <see cref="SmbClient"/> and serves its parent's reads and writes, one at a time: the way
/// to keep several SMB requests in flight when the client library cannot be shared between threads. Requests come
/// on stdin, results go to stdout, data moves through a shared-memory file both processes map.
/// </summary>
public sealed class SmbWorker : IDisposable
{
    /// <summary>The flag that starts the benchmark's executable as a worker instead of the benchmark.</summary>
    public const string Flag = "--smb-worker";

    /// <summary>Bytes one request moves at most (the shared buffer's size); larger ones are split by the caller.</summary>
    public const int BufferBytes = 1 << 20;

    private const string PasswordVariable = "RC_SMB_PASSWORD";  // not on the command line, where ps shows it

    private readonly Process _process;
    private readonly BinaryWriter _requests;
    private readonly BinaryReader _results;
    private readonly string _bufferPath;
    private readonly MemoryMappedFile _map;
    private readonly MemoryMappedViewAccessor _view;
    private readonly unsafe byte* _buffer;

    /// <summary>Starts a worker process connected to <paramref name="url"/> (segment s is "{url}.{s}").</summary>
    public unsafe SmbWorker(string url, string user, string password)
    {
        _bufferPath = Path.Combine(Directory.Exists("/dev/shm") ? "/dev/shm" : Path.GetTempPath(), $"rc-smb-{Guid.NewGuid():N}");
        using (var f = new FileStream(_bufferPath, FileMode.CreateNew))
            f.SetLength(BufferBytes);
        _map = MemoryMappedFile.CreateFromFile(_bufferPath, FileMode.Open, null, BufferBytes);
        _view = _map.CreateViewAccessor(0, BufferBytes);
        byte* p = null;
        _view.SafeMemoryMappedViewHandle.AcquirePointer(ref p);
        _buffer = p;

        // `dotnet <this assembly>` (also inside a test host, where the entry assembly is another one).
        string? host = Environment.ProcessPath;
        var info = new ProcessStartInfo(host is not null && Path.GetFileNameWithoutExtension(host) == "dotnet" ? host : "dotnet")
        {
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            UseShellExecute = false,
        };
        foreach (var a in new[] { typeof(SmbWorker).Assembly.Location, Flag, url, user, _bufferPath })
            info.ArgumentList.Add(a);
        info.Environment[PasswordVariable] = password;
        _process = Process.Start(info) ?? throw new IOException("could not start an SMB worker process");
        _requests = new BinaryWriter(_process.StandardInput.BaseStream);
        _results = new BinaryReader(_process.StandardOutput.BaseStream);
    }

    /// <summary>The shared buffer: a read's bytes land here, a write's bytes go here first.</summary>
    public unsafe Span<byte> Buffer(int length) => new(_buffer, length);

    /// <summary>Runs one request in the worker; returns the bytes it moved, or throws with the worker's message.</summary>
    public uint Call(bool write, int segment, ulong offset, uint length)
    {
        if (length > BufferBytes)
            throw new ArgumentOutOfRangeException(nameof(length), length, $"at most {BufferBytes} bytes per request");
        long result;
        string? error = null;
        try
        {
            _requests.Write(write);
            _requests.Write(segment);
            _requests.Write(offset);
            _requests.Write(length);
            _requests.Flush();
            result = _results.ReadInt64();
            if (result < 0)
                error = _results.ReadString();
        }
        catch (Exception e) when (e is IOException or ObjectDisposedException)
        {
            throw new IOException($"SMB worker process {_process.Id} is gone ({(_process.HasExited ? $"exit {_process.ExitCode}" : e.Message)})", e);
        }
        if (error is not null)
            throw new IOException($"SMB worker: {error}");
        return (uint)result;
    }

    public unsafe void Dispose()
    {
        try
        {
            _requests.Dispose();  // end of input: the worker closes its files and exits
            if (!_process.WaitForExit(5000))
                _process.Kill();
        }
        catch (Exception e) when (e is IOException or InvalidOperationException)
        {
        }
        _process.Dispose();
        _view.SafeMemoryMappedViewHandle.ReleasePointer();
        _view.Dispose();
        _map.Dispose();
        File.Delete(_bufferPath);
    }

    /// <summary>The worker's side: serves requests until its input ends. Arguments after the flag: url, user, buffer path.</summary>
    public static unsafe int Serve(string[] args)
    {
        if (args.Length != 4)
        {
            Console.Error.WriteLine($"usage: {Flag} URL USER BUFFER_PATH (password in ${PasswordVariable})");
            return 2;
        }
        using var map = MemoryMappedFile.CreateFromFile(args[3], FileMode.Open, null, BufferBytes);
        using var view = map.CreateViewAccessor(0, BufferBytes);
        byte* buffer = null;
        view.SafeMemoryMappedViewHandle.AcquirePointer(ref buffer);
        using var client = new SmbClient(args[1], args[2], Environment.GetEnvironmentVariable(PasswordVariable) ?? "");
        using var requests = new BinaryReader(Console.OpenStandardInput());
        using var results = new BinaryWriter(Console.OpenStandardOutput());
        try
        {
            while (true)
            {
                bool write;
                try
                {
                    write = requests.ReadBoolean();
                }
                catch (EndOfStreamException)
                {
                    return 0;
                }
                int segment = requests.ReadInt32();
                ulong offset = requests.ReadUInt64();
                uint length = Math.Min(requests.ReadUInt32(), BufferBytes);
                try
                {
                    results.Write((long)(write ? client.Write(segment, offset, buffer, length) : client.Read(segment, offset, buffer, length)));
                }
                catch (IOException e)
                {
                    results.Write(-1L);
                    results.Write(e.Message);
                }
                results.Flush();
            }
        }
        finally
        {
            view.SafeMemoryMappedViewHandle.ReleasePointer();
        }
    }
}

using System;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// The SMB baseline: the log's segments are files on an SMB share (the file-server alternative to remote memory),
/// reached through Samba's client library. libsmbclient cannot be shared between threads, so each of the device's
/// workers drives its own worker process (<see cref="SmbWorker"/>, one SMB connection each): the device keeps as many
/// requests in flight as it has workers, as an SMB client with a deep queue would.
/// </summary>
public sealed unsafe class SmbFileDevice : BlockingIoDevice
{
    /// <summary>Workers (processes, SMB connections, requests in flight) by default.</summary>
    public const int DefaultWorkers = 8;

    private readonly SmbWorker?[] _workers;
    private readonly Func<SmbWorker> _start;

    /// <param name="url">The share and file name prefix: segment s is "{url}.{s}".</param>
    /// <param name="user">The share's user.</param>
    /// <param name="password">Its password.</param>
    /// <param name="workers">Worker processes, so requests in flight.</param>
    public SmbFileDevice(string url, string user, string password, int workers = DefaultWorkers)
        : base($"smb:{url}", workers)
    {
        _workers = new SmbWorker?[workers];
        _start = () => new SmbWorker(url, user, password);
        StartWorkers();
    }

    // Started on the worker's own thread at its first request, so that no process outlives a device never used.
    private SmbWorker Worker(int worker) => _workers[worker] ??= _start();

    protected override uint Read(int worker, int segment, ulong offset, IntPtr destination, uint length)
    {
        var w = Worker(worker);
        uint done = 0;
        while (done < length)
        {
            uint chunk = Math.Min(length - done, SmbWorker.BufferBytes);
            uint n = w.Call(write: false, segment, offset + done, chunk);
            w.Buffer((int)n).CopyTo(new Span<byte>((byte*)destination + done, (int)n));
            done += n;
            if (n < chunk)
                break;  // end of file: like a local segment file, return what there is
        }
        return done;
    }

    protected override uint Write(int worker, int segment, ulong offset, IntPtr source, uint length)
    {
        var w = Worker(worker);
        uint done = 0;
        while (done < length)
        {
            uint chunk = Math.Min(length - done, SmbWorker.BufferBytes);
            new ReadOnlySpan<byte>((byte*)source + done, (int)chunk).CopyTo(w.Buffer((int)chunk));
            if (w.Call(write: true, segment, offset + done, chunk) != chunk)
                throw new System.IO.IOException($"SMB worker wrote less than {chunk} bytes");
            done += chunk;
        }
        return done;
    }

    protected override void CloseWorker(int worker)
    {
        _workers[worker]?.Dispose();
        _workers[worker] = null;
    }
}

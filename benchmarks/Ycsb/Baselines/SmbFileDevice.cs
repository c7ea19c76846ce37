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

    protected override uint Read(int worker, int segment, ulong offset, IntPtr destination, uint length) =>
        Transfer(worker, write: false, segment, offset, (byte*)destination, length);

    protected override uint Write(int worker, int segment, ulong offset, IntPtr source, uint length) =>
        Transfer(worker, write: true, segment, offset, (byte*)source, length);

    // In chunks of the worker's shared buffer: a write's bytes go into it before the call, a read's come out after.
    private uint Transfer(int worker, bool write, int segment, ulong offset, byte* data, uint length)
    {
        var w = Worker(worker);
        uint done = 0;
        while (done < length)
        {
            uint chunk = Math.Min(length - done, SmbWorker.BufferBytes);
            if (write)
                new ReadOnlySpan<byte>(data + done, (int)chunk).CopyTo(w.Buffer((int)chunk));
            uint n = w.Call(write, segment, offset + done, chunk);
            if (!write)
                w.Buffer((int)n).CopyTo(new Span<byte>(data + done, (int)n));
            done += n;
            if (n < chunk)
            {
                if (write)
                    throw new System.IO.IOException($"SMB worker wrote {n} of {chunk} bytes");
                break;  // end of file: like a local segment file, a read returns what there is
            }
        }
        return done;
    }

    protected override void CloseWorker(int worker)
    {
        _workers[worker]?.Dispose();
        _workers[worker] = null;
    }
}

using System;
using System.Collections.Generic;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;

namespace RemoteCache.Benchmarks.Ycsb.Baselines;

/// <summary>
/// One SMB connection through Samba's client library (libsmbclient, Debian package libsmbclient) and the files it
/// has open: segment s of a log is the file "{url}.{s}" on the share. Single-threaded: libsmbclient keeps
/// process-wide state (its talloc stack) and Debian 12's build exports no thread setup, so a process holds one
/// client and the SMB device runs several processes (<see cref="SmbWorker"/>) for requests in flight.
/// </summary>
public sealed unsafe partial class SmbClient : IDisposable
{
    private const string Lib = "libsmbclient.so.0";
    private const int O_RDWR = 2, O_CREAT = 0x40, SEEK_SET = 0;

    // The auth callback has no user pointer in this signature; the credentials are process-wide.
    private static string s_user = "", s_password = "";

    private readonly string _url;
    private readonly IntPtr _context;
    private readonly Dictionary<int, IntPtr> _files = new();

    /// <param name="url">The share and file name prefix: segment s is "{url}.{s}".</param>
    public SmbClient(string url, string user, string password)
    {
        _url = url;
        s_user = user;
        s_password = password;
        _context = smbc_new_context();
        if (_context == IntPtr.Zero)
            throw new InvalidOperationException("smbc_new_context failed");
        smbc_setFunctionAuthData(_context, &Auth);
        smbc_setOptionNoAutoAnonymousLogin(_context, 1);
        if (smbc_init_context(_context) == IntPtr.Zero)
            throw new InvalidOperationException($"smbc_init_context failed: errno {Marshal.GetLastPInvokeError()}");
    }

    [UnmanagedCallersOnly(CallConvs = new[] { typeof(CallConvCdecl) })]
    private static void Auth(byte* server, byte* share, byte* workgroup, int workgroupLength, byte* user, int userLength,
                             byte* password, int passwordLength)
    {
        Copy("WORKGROUP", workgroup, workgroupLength);
        Copy(s_user, user, userLength);
        Copy(s_password, password, passwordLength);
    }

    private static void Copy(string value, byte* destination, int capacity)
    {
        var bytes = Encoding.UTF8.GetBytes(value);
        int n = Math.Min(bytes.Length, capacity - 1);
        for (int i = 0; i < n; i++)
            destination[i] = bytes[i];
        destination[n] = 0;
    }

    /// <summary>Reads up to <paramref name="length"/> bytes; fewer only at the end of the file (as a local file).</summary>
    public uint Read(int segment, ulong offset, byte* destination, uint length) =>
        Transfer(segment, offset, destination, length, write: false);

    /// <summary>Writes all <paramref name="length"/> bytes.</summary>
    public uint Write(int segment, ulong offset, byte* source, uint length) =>
        Transfer(segment, offset, source, length, write: true);

    private uint Transfer(int segment, ulong offset, byte* buffer, uint length, bool write)
    {
        var file = File(segment);
        if (smbc_getFunctionLseek(_context)(_context, file, (long)offset, SEEK_SET) != (long)offset)
            throw new System.IO.IOException($"smbc lseek to {offset} failed: errno {Marshal.GetLastSystemError()}");
        var io = write ? smbc_getFunctionWrite(_context) : smbc_getFunctionRead(_context);
        uint done = 0;
        while (done < length)
        {
            nint n = io(_context, file, buffer + done, length - done);
            if (n < 0 || (write && n == 0))
                throw new System.IO.IOException($"smbc {(write ? "write" : "read")} failed: errno {Marshal.GetLastSystemError()}");
            if (n == 0)
                break;  // end of file
            done += (uint)n;
        }
        return done;
    }

    private IntPtr File(int segment)
    {
        if (_files.TryGetValue(segment, out var file))
            return file;
        var path = Encoding.UTF8.GetBytes($"{_url}.{segment}\0");
        fixed (byte* p = path)
            file = smbc_getFunctionOpen(_context)(_context, p, O_RDWR | O_CREAT, 0x1a4);
        if (file == IntPtr.Zero)
            throw new System.IO.IOException($"smbc open {_url}.{segment} failed: errno {Marshal.GetLastSystemError()}");
        _files[segment] = file;
        return file;
    }

    public void Dispose()
    {
        var close = smbc_getFunctionClose(_context);
        foreach (var file in _files.Values)
            close(_context, file);
        _files.Clear();
        smbc_free_context(_context, 1);
    }

    [LibraryImport(Lib)] private static partial IntPtr smbc_new_context();
    [LibraryImport(Lib, SetLastError = true)] private static partial IntPtr smbc_init_context(IntPtr ctx);
    [LibraryImport(Lib)] private static partial int smbc_free_context(IntPtr ctx, int shutdown);
    [LibraryImport(Lib)] private static partial void smbc_setOptionNoAutoAnonymousLogin(IntPtr ctx, int value);
    [LibraryImport(Lib)]
    private static partial void smbc_setFunctionAuthData(
        IntPtr ctx, delegate* unmanaged[Cdecl]<byte*, byte*, byte*, int, byte*, int, byte*, int, void> fn);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, byte*, int, int, IntPtr> smbc_getFunctionOpen(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, void*, nuint, nint> smbc_getFunctionRead(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, void*, nuint, nint> smbc_getFunctionWrite(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, long, int, long> smbc_getFunctionLseek(IntPtr ctx);
    [LibraryImport(Lib)] private static partial delegate* unmanaged[Cdecl]<IntPtr, IntPtr, int> smbc_getFunctionClose(IntPtr ctx);
}

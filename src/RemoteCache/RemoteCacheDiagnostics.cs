using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>Native caches, sessions and embedded servers alive in this process.</summary>
/// <param name="Caches">Open native caches (one per open <see cref="RemoteCacheClient"/>, until its last session closes).</param>
/// <param name="Sessions">Open native sessions (a client's lanes and every undisposed <see cref="RemoteCacheSession"/>).</param>
/// <param name="Servers">Running embedded servers (<see cref="RemoteCacheServer"/>).</param>
public readonly record struct NativeObjectCounts(long Caches, long Sessions, long Servers);

/// <summary>Process-wide facts of the native library, for leak checks and support.</summary>
public static class RemoteCacheDiagnostics
{
    /// <summary>
    /// How many native objects are alive now: after every client, session and server is disposed, all zero (what a
    /// leak check in a test or at shutdown can assert).
    /// </summary>
    public static NativeObjectCounts GetNativeObjectCounts()
    {
        NativeMethods.EnsureCompatible();
        Errors.ThrowIfFailed(NativeMethods.GetObjectCounts(out var counts), "native object counts");
        return new NativeObjectCounts((long)counts.Caches, (long)counts.Sessions, (long)counts.Servers);
    }

    /// <summary>The native library's API version (<c>rc_api_version</c>), which this assembly checks before first use.</summary>
    public static int NativeApiVersion => (int)NativeMethods.ApiVersion;

    /// <summary>The file the native library was loaded from, when it came from the package's runtime layout.</summary>
    public static string? NativeLibraryPath => NativeMethods.LoadedFrom;
}

using System;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>
/// The functions of <c>remotecache_admin.h</c>, one-to-one: the admin interface of a cache server. They block (each
/// bounded by the timeout given at connect), so callers run them off the caller's thread
/// (<see cref="Admin.CacheServerAdmin"/>).
/// </summary>
internal static unsafe partial class NativeMethods
{
    /// <summary><c>rc_admin_connect</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_connect", StringMarshalling = StringMarshalling.Utf8)]
    public static partial RemoteCacheStatus AdminConnect(string endpoint, byte* key, nuint keyLength, uint timeoutMs,
                                                         out AdminHandle admin);

    /// <summary><c>rc_admin_stats</c>: set <see cref="RcServerStats.Size"/> first.</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_stats")]
    public static partial RemoteCacheStatus AdminStats(AdminHandle admin, RcServerStats* stats);

    /// <summary><c>rc_admin_list_caches</c>: <paramref name="count"/> may exceed <paramref name="max"/>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_list_caches")]
    public static partial RemoteCacheStatus AdminListCaches(AdminHandle admin, RcAdminCache* caches, uint max, out uint count);

    /// <summary><c>rc_admin_drop_cache</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_drop_cache")]
    public static partial RemoteCacheStatus AdminDropCache(AdminHandle admin, ulong cacheId, out uint dropped);

    /// <summary><c>rc_admin_extend_lease</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_extend_lease")]
    public static partial RemoteCacheStatus AdminExtendLease(AdminHandle admin, ulong cacheId, ulong leaseEndUnixMs, out uint caches);

    /// <summary><c>rc_admin_pull_region</c>.</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_pull_region")]
    public static partial RemoteCacheStatus AdminPullRegion(AdminHandle admin, in RcPullRequest request, out RcPullResult result);

    /// <summary><c>rc_admin_close</c> (use <see cref="AdminHandle"/> instead).</summary>
    [LibraryImport(Library, EntryPoint = "rc_admin_close")]
    public static partial RemoteCacheStatus AdminClose(IntPtr admin);
}

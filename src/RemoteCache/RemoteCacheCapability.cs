using System;
using System.Text;
using RemoteCache.Interop;

namespace RemoteCache;

/// <summary>
/// Capabilities: what a server started with an admission key asks of a client before it lends it memory
/// (<see cref="RemoteCacheOptions.Capabilities"/>). Whoever holds the server's admission key (the cache manager,
/// an operator, a test) mints them; the <c>remotecache-capability</c> command does the same.
/// </summary>
public static unsafe class RemoteCacheCapability
{
    /// <summary>Bytes an admission key has at least (RC_MIN_ADMISSION_KEY_BYTES of remotecache.h).</summary>
    public const int MinAdmissionKeyBytes = NativeLimits.MinAdmissionKeyBytes;

    /// <summary>
    /// Mints a capability admitting cache <paramref name="cacheId"/> on the server whose id is
    /// <paramref name="serverId"/> (<see cref="RemoteCacheServer.ServerId"/>, or what <c>remotecache-server</c> prints
    /// as "server id"), with at most <paramref name="regions"/> regions, until <paramref name="expires"/>, signed
    /// (HMAC-SHA256) with the server's <paramref name="admissionKey"/>. The cache's lease on that server ends at
    /// <paramref name="expires"/> too: the server then drops the cache, and its operations fail with
    /// <see cref="RemoteCacheStatus.Expired"/>.
    /// </summary>
    /// <returns>The capability's text form, for <see cref="RemoteCacheOptions.Capabilities"/>.</returns>
    /// <exception cref="ArgumentException">
    /// The key is shorter than <see cref="MinAdmissionKeyBytes"/>, the server id is empty or too long, or the regions
    /// are outside 1..<see cref="RemoteCacheOptions.MaxRegionsPerServer"/>.
    /// </exception>
    /// <exception cref="RemoteCacheException">The native library failed to mint it.</exception>
    public static string Mint(ReadOnlySpan<byte> admissionKey, ulong cacheId, string serverId, int regions, DateTimeOffset expires)
    {
        ArgumentNullException.ThrowIfNull(serverId);
        if (regions < 1 || regions > RemoteCacheOptions.MaxRegionsPerServer)
            throw new ArgumentOutOfRangeException(nameof(regions), regions,
                $"a capability grants 1 to {RemoteCacheOptions.MaxRegionsPerServer} regions");
        return MintWith(admissionKey, cacheId, serverId, expires,
            (key, keyLength, server, expiresMs, output, capacity) =>
                NativeMethods.CapabilityMint(key, keyLength, cacheId, server, (uint)regions, expiresMs, output, capacity));
    }

    /// <summary>
    /// Mints a migration capability: it lets a server pulling a region (<see cref="Admin.CacheServerAdmin.PullRegionAsync"/>)
    /// read the live cache <paramref name="cacheId"/> on the source server <paramref name="serverId"/>, read-only and
    /// without its token, until <paramref name="expires"/>; signed with the SOURCE server's
    /// <paramref name="admissionKey"/>. It admits no client: a cache opened with it is refused.
    /// </summary>
    /// <returns>The capability's text form, for <see cref="Admin.RegionPull.SourceCapability"/>.</returns>
    /// <exception cref="ArgumentException">The key is too short, or the server id is empty or too long.</exception>
    /// <exception cref="RemoteCacheException">The native library failed to mint it.</exception>
    public static string MintMigration(ReadOnlySpan<byte> admissionKey, ulong cacheId, string serverId, DateTimeOffset expires)
    {
        ArgumentNullException.ThrowIfNull(serverId);
        return MintWith(admissionKey, cacheId, serverId, expires,
            (key, keyLength, server, expiresMs, output, capacity) =>
                NativeMethods.CapabilityMintMigration(key, keyLength, cacheId, server, expiresMs, output, capacity));
    }

    private delegate RemoteCacheStatus Minter(byte* key, nuint keyLength, byte* serverId, ulong expiresUnixMs, byte* output, nuint capacity);

    private static string MintWith(ReadOnlySpan<byte> admissionKey, ulong cacheId, string serverId, DateTimeOffset expires, Minter mint)
    {
        if (admissionKey.Length < MinAdmissionKeyBytes)
            throw new ArgumentException(
                $"an admission key has at least {MinAdmissionKeyBytes} bytes; this one has {admissionKey.Length}", nameof(admissionKey));
        if (serverId.Length == 0)
            throw new ArgumentException("the server id is empty", nameof(serverId));
        NativeMethods.EnsureCompatible();
        long expiresMs = expires.ToUnixTimeMilliseconds();
        if (expiresMs <= 0)
            throw new ArgumentOutOfRangeException(nameof(expires), expires, "a capability expires after 1970");

        var id = Encoding.UTF8.GetBytes(serverId + "\0");
        Span<byte> text = stackalloc byte[NativeLimits.MaxCapabilityText];
        RemoteCacheStatus status;
        fixed (byte* key = admissionKey)
        fixed (byte* server = id)
        fixed (byte* output = text)
            status = mint(key, (nuint)admissionKey.Length, server, (ulong)expiresMs, output, (nuint)text.Length);
        if (status != RemoteCacheStatus.Ok)
            throw Errors.For(status, $"capability for cache {cacheId} on server '{serverId}'", -1, 0);
        int length = text.IndexOf((byte)0);
        return Encoding.UTF8.GetString(text[..(length < 0 ? text.Length : length)]);
    }
}

using System;
using System.Security.Cryptography;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace RemoteCache;

/// <summary>
/// Supplies the AES-256 key of an encrypted cache when it is opened (<see cref="RemoteCacheOptions.EncryptionKeyProvider"/>):
/// a secret store, a key-management service, or <see cref="DerivedKeyProvider"/>.
/// </summary>
public interface IRemoteCacheKeyProvider
{
    /// <summary>
    /// The key of cache <paramref name="cacheId"/>: <see cref="RemoteCacheOptions.EncryptionKeyBytes"/> bytes, in a fresh
    /// array that the client clears once the native library has copied it.
    /// </summary>
    ValueTask<byte[]> GetKeyAsync(ulong cacheId, CancellationToken cancellationToken);
}

/// <summary>
/// Gives each cache a key of its own, derived from one master key with HKDF-SHA256 (RFC 5869): the info is
/// "RemoteCache cache key" and the cache id, so a key learned from one cache says nothing of another's or of the master.
/// </summary>
public sealed class DerivedKeyProvider : IRemoteCacheKeyProvider
{
    private static readonly byte[] s_label = Encoding.ASCII.GetBytes("RemoteCache cache key ");
    private readonly byte[] _master;

    /// <param name="masterKey">At least 32 bytes of secret (it is copied).</param>
    /// <exception cref="ArgumentException">The master key is shorter than 32 bytes.</exception>
    public DerivedKeyProvider(ReadOnlySpan<byte> masterKey)
    {
        if (masterKey.Length < RemoteCacheOptions.EncryptionKeyBytes)
            throw new ArgumentException($"a master key needs at least {RemoteCacheOptions.EncryptionKeyBytes} bytes, not {masterKey.Length}", nameof(masterKey));
        _master = masterKey.ToArray();
    }

    /// <inheritdoc/>
    public ValueTask<byte[]> GetKeyAsync(ulong cacheId, CancellationToken cancellationToken)
    {
        var info = new byte[s_label.Length + sizeof(ulong)];
        s_label.CopyTo(info, 0);
        System.Buffers.Binary.BinaryPrimitives.WriteUInt64BigEndian(info.AsSpan(s_label.Length), cacheId);
        return ValueTask.FromResult(HKDF.DeriveKey(HashAlgorithmName.SHA256, _master, RemoteCacheOptions.EncryptionKeyBytes, salt: null, info));
    }
}

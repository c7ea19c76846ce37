using System;
using System.Security.Cryptography;
using BenchmarkDotNet.Attributes;

namespace RemoteCache.Benchmarks.Micro;

/// <summary>
/// <see cref="DataPath"/> over an encrypted cache (<see cref="RemoteCacheOptions.EncryptionKey"/>, blocks of
/// <see cref="Size"/>): each write sealed and each read opened with AES-256-GCM on the thread that completes it. Run
/// with <see cref="DataPath"/> in one invocation (<c>--join</c>) for the ratio to the plain cache.
/// </summary>
public class EncryptedDataPath : DataPath
{
    private static readonly byte[] s_key = RandomNumberGenerator.GetBytes(RemoteCacheOptions.EncryptionKeyBytes);

    /// <summary>Bytes per operation: one block (an encrypted cache is written in whole blocks).</summary>
    [Params(4096)]
    public override int Size { get; set; } = 4096;

    /// <inheritdoc/>
    protected override void Configure(RemoteCacheOptions options)
    {
        options.EncryptionKey = s_key;
        options.EncryptionBlockSize = Size;
        options.Name += " encrypted";
    }

    /// <summary>Writes every block: a block never written does not authenticate, so a read of it would fail.</summary>
    protected override void Prepare(RemoteCacheClient client)
    {
        const int Chunk = 1 << 20;
        var data = new byte[Chunk];
        for (long at = 0; at < client.Capacity; at += Chunk)
            client.WriteAsync(at, data.AsMemory(0, (int)Math.Min(Chunk, client.Capacity - at))).AsTask().GetAwaiter().GetResult();
    }
}

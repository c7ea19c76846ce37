using System;
using System.Linq;
using System.Threading.Tasks;
using Xunit;
using static RemoteCache.Tests.Harness;

namespace RemoteCache.Tests;

/// <summary>
/// Encrypted caches (<see cref="RemoteCacheOptions.EncryptionKey"/>) through the managed client: data round-trips, the
/// capacity counts whole blocks, a write of part of a block and bad options are refused naming the option, and a block
/// that does not authenticate (another key's, never written, altered by the host) throws Integrity with zeros in the
/// buffer.
/// </summary>
public sealed class EncryptionTests
{
    private static byte[] Key(byte seed) => Enumerable.Range(0, RemoteCacheOptions.EncryptionKeyBytes).Select(i => (byte)(seed * 17 + i)).ToArray();

    private static RemoteCacheOptions Encrypted(byte seed, string name, int block = 4096)
    {
        var o = Options(2, CacheConfig.HighThroughput, name);
        o.EncryptionKey = Key(seed);
        o.EncryptionBlockSize = block;
        o.Token = "encryption-tests";
        return o;
    }

    [Theory]
    [InlineData("shm", 512)]
    [InlineData("tcp", 4096)]
    public async Task DataRoundTripsAndTheCapacityCountsWholeBlocks(string transport, int block)
    {
        var options = Encrypted(1, $"encrypted {transport}", block);
        await WithClient(transport, options, TimeSpan.FromSeconds(60), $"encrypted round trip over {transport}", async client =>
        {
            long stride = block + RemoteCacheOptions.EncryptionOverheadBytes;
            long header = (RemoteCache.Interop.NativeLimits.SealKeyCheckBytes + stride - 1) / stride;  // the key check's strides
            Assert.Equal((2 * MiB / stride - header) * block, client.Capacity);
            Assert.Equal(2 * MiB / stride * stride, options.ServerBytesFor(client.Capacity));
            var data = new byte[16 * block];
            new Random(3).NextBytes(data);
            await client.WriteAsync(4L * block, data);
            var back = new byte[data.Length - 100];
            await client.ReadAsync(4L * block + 37, back);  // a range that starts and ends inside blocks
            Assert.True(back.AsSpan().SequenceEqual(data.AsSpan(37, back.Length)));

            var partial = Assert.Throws<ArgumentException>(() => client.WriteAsync(4L * block + 1, new byte[block]));
            Assert.Contains($"whole blocks of {block} bytes", partial.Message, StringComparison.Ordinal);
        });
    }

    [Fact]
    public async Task ABlockThatDoesNotAuthenticateThrowsIntegrityAndLeavesZeros()
    {
        using var server = ServerProcess.Start("tcp");
        await WithTimeout(TimeSpan.FromSeconds(60), "integrity", async () =>
        {
            const int Block = 4096;
            var options = Encrypted(1, "integrity writer");
            options.CacheId = 777_001;
            await using var writer = RemoteCacheClient.Open(new[] { server.Endpoint }, options);
            var never = new byte[100];
            Array.Fill(never, (byte)0x77);
            var e = await Assert.ThrowsAsync<RemoteCacheException>(async () => await writer.ReadAsync(0, never));
            Assert.Equal(RemoteCacheStatus.Integrity, e.Status);
            Assert.All(never, b => Assert.Equal(0, b));

            var data = Enumerable.Repeat((byte)5, 2 * Block).ToArray();
            await writer.WriteAsync(0, data);

            var otherKey = Encrypted(2, "integrity other key");
            otherKey.CacheId = options.CacheId;
            e = Assert.Throws<RemoteCacheException>(() => RemoteCacheClient.Open(new[] { server.Endpoint }, otherKey));
            Assert.Equal(RemoteCacheStatus.Integrity, e.Status);
            Assert.Contains("does not open with this key", e.Message, StringComparison.Ordinal);
            var back = new byte[2 * Block];

            // The memory host's view: a plain client of the same cache flips a bit of block 1's ciphertext.
            var plain = Options(2, CacheConfig.HighThroughput, "integrity host");
            plain.CacheId = options.CacheId;
            plain.Token = options.Token;
            await using var host = RemoteCacheClient.Open(new[] { server.Endpoint }, plain);
            var one = new byte[1];
            long at = 2 * (Block + RemoteCacheOptions.EncryptionOverheadBytes) + 10;  // block 1, after the key check's stride
            await host.ReadAsync(at, one);
            one[0] ^= 0x40;
            await host.WriteAsync(at, one);

            await writer.ReadAsync(0, back.AsMemory(0, Block));  // block 0 untouched
            Assert.All(back.Take(Block), b => Assert.Equal(5, b));
            e = await Assert.ThrowsAsync<RemoteCacheException>(async () => await writer.ReadAsync(Block, back.AsMemory(0, Block)));
            Assert.Equal(RemoteCacheStatus.Integrity, e.Status);
        });
        server.AssertRunning();
    }

    [Fact]
    public async Task AKeyProviderGivesEachCacheItsKeyAndABadOneIsRefused()
    {
        using var server = ServerProcess.Start("shm");
        await WithTimeout(TimeSpan.FromSeconds(60), "key provider", async () =>
        {
            var provider = new DerivedKeyProvider(Key(9));
            var a = await provider.GetKeyAsync(1, default);
            Assert.Equal(a, await provider.GetKeyAsync(1, default));
            Assert.NotEqual(a, await provider.GetKeyAsync(2, default));
            Assert.Equal(RemoteCacheOptions.EncryptionKeyBytes, a.Length);

            var options = Options(2, CacheConfig.HighThroughput, "provided key");
            options.CacheId = 777_002;
            options.Token = "encryption-tests";
            options.EncryptionKeyProvider = provider;
            var data = Enumerable.Repeat((byte)3, 4096).ToArray();
            await using var writer = await RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, options);  // keeps the cache alive
            await writer.WriteAsync(0, data);
            // The same cache with the key the provider derives for it, given directly: it opens and reads.
            var direct = Encrypted(1, "provided key, given");
            direct.CacheId = options.CacheId;
            direct.EncryptionKey = await provider.GetKeyAsync(options.CacheId, default);
            await using (var reader = RemoteCacheClient.Open(new[] { server.Endpoint }, direct))
            {
                var back = new byte[4096];
                await reader.ReadAsync(0, back);
                Assert.Equal(data, back);
            }
            // Another master key derives another key: refused at open.
            options.EncryptionKeyProvider = new DerivedKeyProvider(Key(10));
            var e = await Assert.ThrowsAsync<RemoteCacheException>(() => RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, options));
            Assert.Equal(RemoteCacheStatus.Integrity, e.Status);

            options.EncryptionKeyProvider = new FixedProvider(new byte[16]);
            var bad = await Assert.ThrowsAsync<ArgumentException>(() => RemoteCacheClient.OpenAsync(new[] { server.Endpoint }, options));
            Assert.Contains("EncryptionKeyProvider gave a key of 16 bytes", bad.Message, StringComparison.Ordinal);
            Assert.Throws<ArgumentException>(() => new DerivedKeyProvider(new byte[31]));
        });
        server.AssertRunning();
    }

    private sealed class FixedProvider(byte[] key) : IRemoteCacheKeyProvider
    {
        public ValueTask<byte[]> GetKeyAsync(ulong cacheId, System.Threading.CancellationToken cancellationToken) => ValueTask.FromResult(key.ToArray());
    }

    [Fact]
    public void LostServerBytesAreReportedAsTheClientBlocksTheyHeld()
    {
        var layout = new EncryptedLayout(4096);
        long stride = layout.Stride, capacity = 10 * 4096L;
        Assert.Equal((0L, 0L), layout.ClientRange(0, 100, capacity));                  // the key check only
        Assert.Equal((0L, 4096L), layout.ClientRange(0, stride + 1, capacity));        // ... and block 0's first byte
        Assert.Equal((4096L, 4096L), layout.ClientRange(2 * stride, stride, capacity));  // block 1's stride exactly
        Assert.Equal((0L, 3 * 4096L), layout.ClientRange(2 * stride - 1, stride + 2, capacity));  // a byte either side
        Assert.Equal((9 * 4096L, 4096L), layout.ClientRange(10 * stride, 5 * stride, capacity));  // clipped to the capacity
        Assert.Equal((0L, 0L), layout.ClientRange(11 * stride, stride, capacity));     // the tail past the last block
        Assert.Equal(11 * stride, layout.ServerBytes(capacity));
        Assert.Equal(11 * stride, layout.ServerBytes(capacity - 1));
    }

    [Fact]
    public void BadKeysAndBlockSizesAreRefusedNamingTheOption()
    {
        var o = Encrypted(1, "bad options");
        o.EncryptionKey = new byte[16];
        var e = Assert.Throws<ArgumentException>(() => o.Validate(new[] { "tcp:127.0.0.1:1" }));
        Assert.Contains("EncryptionKey has 16 bytes", e.Message, StringComparison.Ordinal);
        foreach (int bad in new[] { 0, 256, 1000, 128 * 1024 })
        {
            o = Encrypted(1, "bad options", bad);
            e = Assert.Throws<ArgumentException>(() => o.Validate(new[] { "tcp:127.0.0.1:1" }));
            Assert.Contains("EncryptionBlockSize", e.Message, StringComparison.Ordinal);
        }
        o = Encrypted(1, "bad options");
        o.EncryptionKeyProvider = new DerivedKeyProvider(Key(1));
        e = Assert.Throws<ArgumentException>(() => o.Validate(new[] { "tcp:127.0.0.1:1" }));
        Assert.Contains("set one or the other", e.Message, StringComparison.Ordinal);
    }
}

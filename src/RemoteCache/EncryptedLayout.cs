using System;
using RemoteCache.Interop;

namespace RemoteCache;

// Where an encrypted cache's bytes live on its servers (remotecache.h, rc_cache_options.seal_key): strides of a block
// and its trailer, the first HeaderStrides of them holding the key check, client block i in stride i + HeaderStrides.
internal readonly record struct EncryptedLayout(int Block)
{
    public long Stride => Block + RemoteCacheOptions.EncryptionOverheadBytes;

    public long HeaderStrides => (NativeLimits.SealKeyCheckBytes + Stride - 1) / Stride;

    // Servers' bytes for a client capacity of `capacity` (rounded up to whole blocks).
    public long ServerBytes(long capacity) => checked(((capacity + Block - 1) / Block + HeaderStrides) * Stride);

    // The client bytes whose blocks the servers' bytes [address, +length) hold, within `capacity`; empty when they hold
    // none (the key check, or the tail past the last whole block).
    public (long Address, long Length) ClientRange(long address, long length, long capacity)
    {
        long first = Math.Max(address / Stride - HeaderStrides, 0);
        long end = Math.Min((address + length + Stride - 1) / Stride - HeaderStrides, capacity / Block);
        return end <= first ? (0, 0) : (first * Block, (end - first) * Block);
    }
}

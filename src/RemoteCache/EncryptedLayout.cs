using System;

namespace RemoteCache;

// Where an encrypted cache's bytes live on its servers (remotecache.h, RC_SEAL_TRAILER_BYTES): the first stride holds
// the key check, client block i the stride after it; each stride is the block and its trailer.
internal readonly record struct EncryptedLayout(int Block)
{
    public long Stride => Block + RemoteCacheOptions.EncryptionOverheadBytes;

    // Servers' bytes for a client capacity of `capacity` (rounded up to whole blocks).
    public long ServerBytes(long capacity) => checked(((capacity + Block - 1) / Block + 1) * Stride);

    // The client bytes whose blocks the servers' bytes [address, +length) hold, within `capacity`; empty when they hold
    // none (the key check, or the tail past the last whole block).
    public (long Address, long Length) ClientRange(long address, long length, long capacity)
    {
        long first = Math.Max(address / Stride - 1, 0);
        long end = Math.Min((address + length + Stride - 1) / Stride - 1, capacity / Block);
        return end <= first ? (0, 0) : (first * Block, (end - first) * Block);
    }
}

// Binds the devices' shared sources (RemoteCacheDevice, TieredDevice and their helpers, in src/RemoteCache.Device) to
// Tsavorite, the FASTER fork Garnet runs on: its device interface is FASTER's with a fourth completion argument (an
// exception, for diagnosis only: the error code is what counts), its own exception type and TryCompleteMine.
global using Tsavorite.core;
using System;
using System.Runtime.CompilerServices;
using System.Threading.Tasks;

namespace RemoteCache.Garnet;

internal static class StoreBinding
{
    /// <summary>Completes a store's I/O.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static void Complete(this DeviceIOCompletionCallback callback, uint errorCode, uint numBytes, object context) =>
        callback(errorCode, numBytes, context, null!);

    /// <summary>The exception the store expects from a device that refuses its set-up.</summary>
    public static Exception Refusal(string message) => new TsavoriteException(message);
}

public sealed partial class TieredDevice
{
    private static readonly DeviceIOCompletionCallback s_onRead = (error, bytes, context, _) => OnTierRead(error, bytes, context);
    private static readonly DeviceIOCompletionCallback s_onWrite = (error, bytes, context, _) => OnTierWrite(error, bytes, context);

    private static DeviceIOCompletionCallback Completing(TaskCompletionSource<(uint, uint)> done) =>
        (error, bytes, _, _) => done.TrySetResult((error, bytes));

    /// <inheritdoc/>
    /// <remarks>Tsavorite calls this while it waits for the device (<see cref="Throttle"/>): each live tier harvests what the calling thread started.</remarks>
    public override bool TryCompleteMine() => Harvest(static device => device.TryCompleteMine());
}

using System;
using System.Collections.Generic;

// Shared by the FASTER devices (this project) and the Tsavorite ones (RemoteCache.Garnet, GARNET defined), each binding it
// to its store in StoreBinding.cs.
#if GARNET
namespace RemoteCache.Garnet;
#else
namespace RemoteCache.Device;
#endif

/// <summary>
/// A thread-safe object pool for the devices' per-operation state, so that steady-state I/O allocates nothing.
/// Each thread keeps a few objects of its own (an operation is usually completed by the thread that issued it,
/// through TryComplete), and a locked shared stack takes the overflow.
/// </summary>
internal sealed class Pool<T> where T : class
{
    private const int PerThread = 64;

    [ThreadStatic] private static Stack<T>? t_local;  // per closed type: shared by the pools of one T, which reset what they take

    private readonly Stack<T> _shared = new();
    private readonly Func<T> _create;

    public Pool(Func<T> create) => _create = create;

    public T Rent()
    {
        if (t_local is { Count: > 0 } local)
            return local.Pop();
        lock (_shared)
        {
            if (_shared.TryPop(out var item))
                return item;
        }
        return _create();
    }

    public void Return(T item)
    {
        var local = t_local ??= new Stack<T>(PerThread);
        if (local.Count < PerThread)
        {
            local.Push(item);
            return;
        }
        lock (_shared)
            _shared.Push(item);
    }
}

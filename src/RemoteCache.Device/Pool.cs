using System;
using System.Collections.Generic;

namespace RemoteCache.Device;

/// <summary>
/// A thread-safe object pool for the devices' per-operation state, so that steady-state I/O allocates nothing.
/// A locked stack: device operations take microseconds, an uncontended lock tens of nanoseconds.
/// </summary>
internal sealed class Pool<T> where T : class
{
    private readonly Stack<T> _items = new();
    private readonly Func<T> _create;

    public Pool(Func<T> create) => _create = create;

    public T Rent()
    {
        lock (_items)
        {
            if (_items.TryPop(out var item))
                return item;
        }
        return _create();
    }

    public void Return(T item)
    {
        lock (_items)
            _items.Push(item);
    }
}

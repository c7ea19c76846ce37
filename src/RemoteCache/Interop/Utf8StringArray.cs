using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;

namespace RemoteCache.Interop;

/// <summary>
/// NUL-terminated UTF-8 copies of strings in unmanaged memory, as <c>const char* const*</c> arguments
/// (endpoint lists) need them; freed on dispose.
/// </summary>
internal sealed unsafe class Utf8StringArray : IDisposable
{
    private readonly IntPtr[] _pointers;
    private GCHandle _pin;

    /// <summary>Copies <paramref name="strings"/>; a null one becomes a null pointer.</summary>
    public Utf8StringArray(IReadOnlyList<string?> strings)
    {
        _pointers = new IntPtr[strings.Count];
        try
        {
            for (int i = 0; i < strings.Count; i++)
                _pointers[i] = strings[i] is { } text ? Marshal.StringToCoTaskMemUTF8(text) : IntPtr.Zero;
        }
        catch
        {
            Dispose();
            throw;
        }
        _pin = GCHandle.Alloc(_pointers, GCHandleType.Pinned);
    }

    /// <summary>How many strings.</summary>
    public int Count => _pointers.Length;

    /// <summary>The array of string pointers, valid until dispose.</summary>
    public IntPtr* Pointers => (IntPtr*)_pin.AddrOfPinnedObject();

    /// <summary>Frees the copies.</summary>
    public void Dispose()
    {
        if (_pin.IsAllocated)
            _pin.Free();
        for (int i = 0; i < _pointers.Length; i++)
        {
            Marshal.FreeCoTaskMem(_pointers[i]);
            _pointers[i] = IntPtr.Zero;
        }
    }
}

namespace RemoteCache.Manager.V1;

/// <summary>
/// Bounds of the contract's fields that the manager enforces and clients check before sending (manager.proto states
/// them); defined here once so that the two never disagree.
/// </summary>
public static class ContractLimits
{
    /// <summary>Characters of a string field without a bound of its own (ids, endpoints, transports, VM types).</summary>
    public const int MaxStringLength = 256;

    /// <summary>The longest <c>AllocateRequest.name</c>, in characters.</summary>
    public const int MaxNameLength = 200;

    /// <summary>The longest <c>mover</c> of a replacement call, in characters.</summary>
    public const int MaxMoverLength = 200;

    /// <summary>The longest <c>AllocateRequest.request_id</c>, in characters.</summary>
    public const int MaxRequestIdLength = 128;

    /// <summary>Elements of a repeated field, or entries of a map.</summary>
    public const int MaxElements = 1024;
}

namespace RemoteCache.Manager.V1;

/// <summary>
/// Bounds of the contract's fields that the manager enforces and clients check before sending (manager.proto states
/// them); defined here once so that the two never disagree.
/// </summary>
public static class ContractLimits
{
    /// <summary>The longest <c>AllocateRequest.request_id</c>, in characters.</summary>
    public const int MaxRequestIdLength = 128;
}

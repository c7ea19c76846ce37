namespace RemoteCache.Manager.V1;

/// <summary>
/// How a capacity becomes whole regions on whole servers, the rule the manager places and reshapes caches by and the
/// managed client predicts a reshape by (manager.proto: a cache gets at least the capacity asked, in whole regions on
/// equal shares of its servers); defined here once so that the two never disagree.
/// </summary>
public static class WholeServers
{
    /// <summary>Regions of <paramref name="regionBytes"/> that hold <paramref name="capacityBytes"/>: the fewest whole ones.</summary>
    public static long Regions(long capacityBytes, long regionBytes) => Ceiling(capacityBytes, regionBytes);

    /// <summary>The share of each of <paramref name="servers"/> servers that hold <paramref name="regions"/> regions in equal shares: the fewest whole regions.</summary>
    public static long Share(long regions, long servers) => Ceiling(regions, servers);

    /// <summary>Servers lending <paramref name="shareBytes"/> each that hold <paramref name="capacityBytes"/>: the fewest whole ones.</summary>
    public static long Servers(long capacityBytes, long shareBytes) => Ceiling(capacityBytes, shareBytes);

    // ⌈value / unit⌉ for a value of 0 or more and a positive unit, without the overflow of (value + unit - 1) / unit.
    private static long Ceiling(long value, long unit) => value / unit + (value % unit == 0 ? 0 : 1);
}

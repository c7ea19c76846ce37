using System;
using System.Collections.Generic;
using System.Linq;
using RemoteCache.Manager.Catalogue;

namespace RemoteCache.Manager.Placement;

/// <summary>VMs that can be rented right now: <paramref name="Count"/> of <paramref name="Type"/> in one market.</summary>
public sealed record VmOffer(VmType Type, bool Spot, int Count);

/// <summary>What a cache needs from its VMs.</summary>
/// <param name="CapacityBytes">Bytes asked for.</param>
/// <param name="ServerThreads">s of its configuration: cores each of its VMs polls it with.</param>
/// <param name="Duration">Its likely lifetime; null: until deallocated (no spot VM).</param>
public sealed record PlacementRequest(long CapacityBytes, int ServerThreads, TimeSpan? Duration);

/// <summary>One VM of a placement.</summary>
public sealed record PlacedVm(VmType Type, bool Spot);

/// <summary>
/// The VMs a cache rents: <see cref="Vms"/>.Count servers of <see cref="RegionsPerServer"/> regions each (the data
/// path asks every server for the same number of regions), in the order the cache maps its addresses onto them.
/// </summary>
public sealed record Placement(IReadOnlyList<PlacedVm> Vms, int RegionsPerServer, long RegionBytes, double PricePerHour)
{
    /// <summary>Bytes the cache gets: servers × regions × region size (at least what was asked).</summary>
    public long CapacityBytes => Vms.Count * (long)RegionsPerServer * RegionBytes;
}

/// <summary>Why nothing could be placed, for the refusal's message.</summary>
public sealed record PlacementRefusal(string Reason);

/// <summary>
/// Picks the cheapest set of VMs for a cache (Redy §6.1): every VM needs the cores of the configuration's s and room for
/// the cache's share, spot VMs only when the duration and the reclaim notice allow, and several smaller VMs when they
/// cost less than one large. Exact: for every number of servers k, the share is ⌈regions / k⌉ and the cheapest k
/// eligible VMs are taken; the cheapest k wins (fewer servers on a tie: fewer to fail).
/// </summary>
public static class Placer
{
    /// <summary>The cheapest placement of <paramref name="request"/> over <paramref name="offers"/>, or why there is none.</summary>
    public static (Placement? Placement, PlacementRefusal? Refusal) Place(PlacementRequest request, IReadOnlyList<VmOffer> offers, VmCatalogue catalogue)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(request.CapacityBytes, 1);
        ArgumentOutOfRangeException.ThrowIfNegative(request.ServerThreads);
        long regionBytes = catalogue.RegionBytes;
        long needed = V1.WholeServers.Regions(request.CapacityBytes, regionBytes);
        int coresNeeded = Math.Max(1, request.ServerThreads);
        // Cheapest first; on equal prices the larger VM (headroom), then the name, so that the choice is deterministic.
        var sorted = offers.Where(o => o.Count > 0)
            .OrderBy(o => o.Type.PricePerHour(o.Spot)).ThenByDescending(o => o.Type.MemoryBytes).ThenBy(o => o.Type.Name).ThenBy(o => o.Spot)
            .ToList();
        long total = sorted.Sum(o => (long)o.Count);
        Placement? best = null;
        for (long k = 1; k <= Math.Min(needed, total); k++)
        {
            long share = V1.WholeServers.Share(needed, k);
            if (share > RemoteCacheOptions.MaxRegionsPerServer)
                continue;
            var vms = new List<PlacedVm>();
            double price = 0;
            foreach (var offer in sorted)
            {
                if (offer.Type.Cores < coresNeeded || catalogue.RegionsOf(offer.Type) < share)
                    continue;
                if (offer.Spot && !catalogue.SpotPolicy.Allows(request.Duration, share * regionBytes))
                    continue;
                for (int i = 0; i < offer.Count && vms.Count < k; i++)
                {
                    vms.Add(new PlacedVm(offer.Type, offer.Spot));
                    price += offer.Type.PricePerHour(offer.Spot);
                }
                if (vms.Count == k)
                    break;
            }
            if (vms.Count == k && (best is null || price < best.PricePerHour - 1e-12))
                best = new Placement(vms, (int)share, regionBytes, price);
        }
        if (best is not null)
            return (best, null);
        return (null, new PlacementRefusal(Explain(request, sorted, catalogue, needed, coresNeeded)));
    }

    private static string Explain(PlacementRequest request, IReadOnlyList<VmOffer> offers, VmCatalogue catalogue, long needed, int coresNeeded)
    {
        long free = offers.Where(o => o.Type.Cores >= coresNeeded).Sum(o => (long)o.Count * catalogue.RegionsOf(o.Type));
        string gib = $"{request.CapacityBytes / (double)(1L << 30):0.###} GiB";
        if (offers.Count == 0)
            return $"no VM is available to hold {gib}";
        if (free < needed)
            return $"{gib} needs {needed} regions of {catalogue.RegionBytes >> 20} MiB on VMs with at least {coresNeeded} core(s); " +
                   $"the VMs available now have {free}";
        return $"no set of available VMs with at least {coresNeeded} core(s) holds {gib} in equal shares of at most " +
               $"{RemoteCacheOptions.MaxRegionsPerServer} regions per server" +
               (request.Duration is null ? " (a cache without a duration rents on-demand VMs only)" : "");
    }
}

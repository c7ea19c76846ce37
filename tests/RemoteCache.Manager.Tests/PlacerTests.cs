using System;
using System.Collections.Generic;
using System.Linq;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Placement;
using Xunit;

namespace RemoteCache.Manager.Tests;

public sealed class PlacerTests
{
    private const long GiB = 1L << 30;

    // Regions of 1 GiB; spot allowed up to 4 h for what migrates in 30 s at 1 GB/s (about 27 GiB).
    private static VmCatalogue Catalogue(params VmType[] types) => new()
    {
        RegionBytes = GiB,
        Spot = new SpotPolicy(TimeSpan.FromHours(4), TimeSpan.FromSeconds(30), 1e9),
        VmTypes = types,
    };

    private static List<VmOffer> Offers(VmCatalogue catalogue) =>
        catalogue.VmTypes.SelectMany(t => new[] { new VmOffer(t, false, t.Available), new VmOffer(t, true, t.SpotAvailable) })
                 .Where(o => o.Count > 0 && (!o.Spot || o.Type.SpotPerHour is not null)).ToList();

    private static Placement.Placement Place(VmCatalogue catalogue, long bytes, int serverThreads = 1, TimeSpan? duration = null)
    {
        var (placement, refusal) = Placer.Place(new PlacementRequest(bytes, serverThreads, duration), Offers(catalogue), catalogue);
        Assert.True(placement is not null, refusal?.Reason);
        return placement!;
    }

    [Fact]
    public void TakesTheCheapestTypeThatHoldsTheCache()
    {
        var catalogue = Catalogue(new VmType("big", 16 * GiB, 4, 0.80, null, 5, 0),
                                  new VmType("mid", 8 * GiB, 2, 0.30, null, 5, 0),
                                  new VmType("tiny", 2 * GiB, 1, 0.05, null, 5, 0));
        var p = Place(catalogue, 6 * GiB);
        // Three tinies (0.15) beat one mid (0.30), one big (0.80) and four or six tinies.
        Assert.Equal(3, p.Vms.Count);
        Assert.All(p.Vms, v => Assert.Equal("tiny", v.Type.Name));
        Assert.Equal(2, p.RegionsPerServer);
        Assert.Equal(0.15, p.PricePerHour, 9);
        Assert.Equal(6 * GiB, p.CapacityBytes);
    }

    [Fact]
    public void OneLargeWhenSmallOnesCostMoreAndTwoSmallWhenTheyCostLess()
    {
        var large = new VmType("large", 8 * GiB, 4, 0.40, null, 2, 0);
        var dearSmall = new VmType("small", 4 * GiB, 2, 0.25, null, 4, 0);
        var p = Place(Catalogue(large, dearSmall), 6 * GiB);
        Assert.Equal(new[] { "large" }, p.Vms.Select(v => v.Type.Name));
        Assert.Equal(6, p.RegionsPerServer);

        var cheapSmall = dearSmall with { OnDemandPerHour = 0.10 };
        p = Place(Catalogue(large, cheapSmall), 6 * GiB);
        Assert.Equal(new[] { "small", "small" }, p.Vms.Select(v => v.Type.Name));
        Assert.Equal(3, p.RegionsPerServer);
        Assert.Equal(0.20, p.PricePerHour, 9);
    }

    [Fact]
    public void SpotOnlyWhenTheDurationAllowsAndTheShareMigratesWithinTheNotice()
    {
        var type = new VmType("m", 32 * GiB, 4, 1.00, 0.30, 4, 4);
        var catalogue = Catalogue(type);
        Assert.False(Place(catalogue, 8 * GiB).Vms.Single().Spot);                                 // no duration: until deallocated
        Assert.False(Place(catalogue, 8 * GiB, duration: TimeSpan.FromHours(5)).Vms.Single().Spot); // longer than spot's 4 h
        var spot = Place(catalogue, 8 * GiB, duration: TimeSpan.FromHours(1));
        Assert.True(spot.Vms.Single().Spot);
        Assert.Equal(0.30, spot.PricePerHour, 9);
        // 30 GiB on one VM cannot move within a 30 s notice at 1 GB/s; two spot VMs of 15 GiB each can, and cost less than one on-demand.
        var split = Place(catalogue, 30 * GiB, duration: TimeSpan.FromHours(1));
        Assert.Equal(2, split.Vms.Count);
        Assert.All(split.Vms, v => Assert.True(v.Spot));
        Assert.Equal(15, split.RegionsPerServer);
    }

    [Fact]
    public void EveryVmHasTheCoresOfTheServerThreads()
    {
        var catalogue = Catalogue(new VmType("one-core", 8 * GiB, 1, 0.10, null, 4, 0), new VmType("four-core", 8 * GiB, 4, 0.50, null, 4, 0));
        Assert.Equal("one-core", Place(catalogue, 4 * GiB, serverThreads: 1).Vms.Single().Type.Name);
        Assert.Equal("one-core", Place(catalogue, 4 * GiB, serverThreads: 0).Vms.Single().Type.Name);
        Assert.Equal("four-core", Place(catalogue, 4 * GiB, serverThreads: 3).Vms.Single().Type.Name);
    }

    [Fact]
    public void RespectsHowManyAreAvailable()
    {
        var catalogue = Catalogue(new VmType("cheap", 2 * GiB, 2, 0.05, null, 1, 0), new VmType("dear", 4 * GiB, 2, 0.50, null, 3, 0));
        var p = Place(catalogue, 4 * GiB);
        // Two cheap 2 GiB VMs would be cheapest, but only one is available: one dear VM (0.50) beats cheap + dear (0.55).
        Assert.Equal(new[] { "dear" }, p.Vms.Select(v => v.Type.Name));
        Assert.Equal(0.50, p.PricePerHour, 9);
        // With a 2 GiB type at 0.15 beside the one cheap VM, two servers win: the cheap one and one of those.
        var withMid = Catalogue(catalogue.VmTypes[0], new VmType("mid", 2 * GiB, 2, 0.15, null, 3, 0), catalogue.VmTypes[1]);
        var mixed = Place(withMid, 4 * GiB);
        Assert.Equal(new[] { "cheap", "mid" }, mixed.Vms.Select(v => v.Type.Name));
        Assert.Equal(0.20, mixed.PricePerHour, 9);
    }

    [Fact]
    public void RefusalsSayWhy()
    {
        var catalogue = Catalogue(new VmType("m", 4 * GiB, 2, 0.1, null, 2, 0));
        var (placement, refusal) = Placer.Place(new PlacementRequest(10 * GiB, 1, null), Offers(catalogue), catalogue);
        Assert.Null(placement);
        Assert.Contains("needs 10 regions of 1024 MiB", refusal!.Reason);
        Assert.Contains("have 8", refusal.Reason);
        (placement, refusal) = Placer.Place(new PlacementRequest(GiB, 3, null), Offers(catalogue), catalogue);
        Assert.Null(placement);
        Assert.Contains("at least 3 core(s)", refusal!.Reason);
        (_, refusal) = Placer.Place(new PlacementRequest(GiB, 1, null), Array.Empty<VmOffer>(), catalogue);
        Assert.Contains("no VM is available", refusal!.Reason);
    }

    [Fact]
    public void AHundredTypeCatalogueIsSearchedExactly()
    {
        var random = new Random(7);
        var types = Enumerable.Range(0, 100).Select(i =>
        {
            long memory = (1 + random.Next(64)) * GiB;
            return new VmType($"t{i}", memory, 1 + random.Next(16), 0.01 * (1 + random.Next(200)), random.Next(2) == 0 ? 0.005 * (1 + random.Next(100)) : null,
                              random.Next(5), random.Next(5));
        }).ToArray();
        var catalogue = Catalogue(types);
        for (int trial = 0; trial < 50; trial++)
        {
            long bytes = (1 + random.Next(100)) * GiB;
            int s = random.Next(4);
            TimeSpan? duration = random.Next(2) == 0 ? null : TimeSpan.FromHours(random.Next(1, 8));
            var offers = Offers(catalogue);
            var (placement, _) = Placer.Place(new PlacementRequest(bytes, s, duration), offers, catalogue);
            double? brute = BruteForce(catalogue, offers, bytes, s, duration);
            Assert.Equal(brute is null, placement is null);
            if (placement is not null)
            {
                Assert.Equal(brute!.Value, placement.PricePerHour, 9);
                Assert.True(placement.CapacityBytes >= bytes);
                Assert.All(placement.Vms, v => Assert.True(v.Type.Cores >= Math.Max(1, s) && catalogue.RegionsOf(v.Type) >= placement.RegionsPerServer));
            }
        }
    }

    // Every k and, for each, every eligible VM in price order: the definition, without the placer's shortcuts.
    private static double? BruteForce(VmCatalogue catalogue, List<VmOffer> offers, long bytes, int s, TimeSpan? duration)
    {
        long needed = (bytes + catalogue.RegionBytes - 1) / catalogue.RegionBytes;
        double? best = null;
        for (long k = 1; k <= needed; k++)
        {
            long share = (needed + k - 1) / k;
            var prices = offers.Where(o => o.Type.Cores >= Math.Max(1, s) && catalogue.RegionsOf(o.Type) >= share && share <= RemoteCacheOptions.MaxRegionsPerServer &&
                                           (!o.Spot || catalogue.SpotPolicy.Allows(duration, share * catalogue.RegionBytes)))
                               .SelectMany(o => Enumerable.Repeat(o.Type.PricePerHour(o.Spot), o.Count)).OrderBy(p => p).Take((int)k).ToList();
            if (prices.Count == k && (best is null || prices.Sum() < best))
                best = prices.Sum();
        }
        return best;
    }
}

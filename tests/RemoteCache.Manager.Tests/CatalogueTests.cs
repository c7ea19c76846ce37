using System;
using RemoteCache.Manager.Catalogue;
using RemoteCache.Manager.Security;
using Xunit;

namespace RemoteCache.Manager.Tests;

public sealed class CatalogueTests
{
    [Fact]
    public void ParsesAndRoundTrips()
    {
        var catalogue = VmCatalogue.Parse("""
            { "format": "remotecache-catalogue", "version": 1, "regionBytes": 67108864,
              "spot": { "maxDuration": "02:00:00", "reclaimNotice": "00:00:30", "migrationBytesPerSecond": 1e9 },
              "vmTypes": [ { "name": "a", "memoryBytes": 1073741824, "cores": 2, "onDemandPerHour": 0.1, "spotPerHour": 0.03, "available": 3, "spotAvailable": 1 } ] }
            """);
        Assert.Equal(16, catalogue.RegionsOf(catalogue.Find("a")!));
        Assert.Equal(TimeSpan.FromHours(2), catalogue.SpotPolicy.MaxDuration);
        Assert.Equal(catalogue.VmTypes, VmCatalogue.Parse(catalogue.ToJson()).VmTypes);
        Assert.Equal(1, catalogue.Find("a")!.Count(spot: true));
        Assert.Equal(0, (catalogue.Find("a")! with { SpotPerHour = null }).Count(spot: true));  // no spot price: no spot offer
        VmCatalogue.LocalDefault.Validate();
    }

    [Theory]
    [InlineData(@"{ ""vmTypes"": [] }", "vmTypes is empty")]
    [InlineData(@"{ ""format"": ""x"", ""vmTypes"": [] }", "format is 'x'")]
    [InlineData(@"{ ""regionBytes"": 1000, ""vmTypes"": [ { ""name"": ""a"", ""memoryBytes"": 1073741824, ""cores"": 1, ""onDemandPerHour"": 1, ""available"": 1 } ] }", "power of two")]
    [InlineData(@"{ ""vmTypes"": [ { ""name"": ""a"", ""memoryBytes"": 1024, ""cores"": 1, ""onDemandPerHour"": 1, ""available"": 1 } ] }", "less than one region")]
    [InlineData(@"{ ""vmTypes"": [ { ""name"": ""a"", ""memoryBytes"": 1073741824, ""cores"": 0, ""onDemandPerHour"": 1, ""available"": 1 } ] }", "cores 0")]
    [InlineData(@"{ ""vmTypes"": [ { ""name"": ""a"", ""memoryBytes"": 1073741824, ""cores"": 1, ""onDemandPerHour"": -1, ""available"": 1 } ] }", "prices")]
    [InlineData(@"{ ""vmTypes"": [ { ""name"": ""a"", ""memoryBytes"": 1073741824, ""cores"": 1, ""onDemandPerHour"": 1, ""available"": 1 },
                                   { ""name"": ""a"", ""memoryBytes"": 1073741824, ""cores"": 1, ""onDemandPerHour"": 1, ""available"": 1 } ] }", "listed twice")]
    [InlineData("not json", "not a catalogue")]
    public void RefusesWhatIsWrongAndSaysWhat(string json, string expected)
    {
        var e = Assert.Throws<FormatException>(() => VmCatalogue.Parse(json));
        Assert.Contains(expected, e.Message);
    }

    [Fact]
    public void ApiKeysMatchByHashAndQuotaIsTheSmallest()
    {
        string hash(string key) => Convert.ToHexString(System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(key)));
        var keys = new ApiKeyStore(new[]
        {
            new ApiKey("a", hash("key-a1"), new[] { Roles.Tenant }, 100),
            new ApiKey("a", hash("key-a2"), new[] { Roles.Tenant, Roles.Operator }, 50),
            new ApiKey("b", hash("key-b"), new[] { Roles.Tenant }, null),
        });
        Assert.Equal("a", keys.Find("key-a2")!.Tenant);
        Assert.Null(keys.Find("key-a3"));
        Assert.Equal(50, keys.QuotaOf("a"));
        Assert.Null(keys.QuotaOf("b"));
        Assert.Throws<FormatException>(() => new ApiKeyStore(new[] { new ApiKey("a", "zz", new[] { Roles.Tenant }, null) }));
        Assert.Throws<FormatException>(() => new ApiKeyStore(new[] { new ApiKey("a", hash("k"), new[] { "admin" }, null) }));
    }
}

using System;
using System.Collections.Generic;
using System.Security.Cryptography;
using System.Text;

namespace RemoteCache.Manager.Store;

/// <summary>
/// What managers sharing one state must have in common: the admission key (capabilities minted by one are checked by
/// the servers with it) and the catalogue (placements by one are priced and sized by it). Kept as SHA-256 digests, so the
/// key itself never leaves the manager.
/// </summary>
public sealed class StoreIdentity
{
    public StoreIdentity(ReadOnlySpan<byte> admissionKey, string catalogueJson)
    {
        Fingerprint = new Prints(Convert.ToHexString(SHA256.HashData(admissionKey)), Convert.ToHexString(SHA256.HashData(Encoding.UTF8.GetBytes(catalogueJson))));
    }

    public Prints Fingerprint { get; }

    /// <summary>The digests as stored.</summary>
    public sealed record Prints(string AdmissionKeySha256, string CatalogueSha256)
    {
        /// <summary>What differs from <paramref name="other"/>, in words ("admission key", "catalogue").</summary>
        public IReadOnlyList<string> Differences(Prints other)
        {
            var differ = new List<string>();
            if (AdmissionKeySha256 != other.AdmissionKeySha256)
                differ.Add("admission key");
            if (CatalogueSha256 != other.CatalogueSha256)
                differ.Add("catalogue");
            return differ;
        }
    }
}

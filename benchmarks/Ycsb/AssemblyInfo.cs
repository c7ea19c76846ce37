// The benchmark is Linux-only (shared memory, O_DIRECT, Samba), as the cache manager it starts.
[assembly: System.Runtime.Versioning.SupportedOSPlatform("linux")]

// The manager runs on Linux only (see src/RemoteCache.Manager/AssemblyInfo.cs).
[assembly: System.Runtime.Versioning.SupportedOSPlatform("linux")]

// The manager (HostTests start one in this process) runs on Linux only (see src/RemoteCache.Manager/AssemblyInfo.cs).
[assembly: System.Runtime.Versioning.SupportedOSPlatform("linux")]

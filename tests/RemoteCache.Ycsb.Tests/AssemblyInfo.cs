// The benchmark under test is Linux-only (see benchmarks/Ycsb/AssemblyInfo.cs).
[assembly: System.Runtime.Versioning.SupportedOSPlatform("linux")]

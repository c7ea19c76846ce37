// The manager runs where its servers run: Linux (local servers are processes in sessions of their own, signalled
// with kill(2); key files are owner-only by Unix mode).
[assembly: System.Runtime.Versioning.SupportedOSPlatform("linux")]

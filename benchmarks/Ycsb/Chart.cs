using System;
using System.Collections.Generic;
using System.IO;
using System.IO.Compression;
using System.Linq;

namespace RemoteCache.Benchmarks.Ycsb;

/// <summary>
/// The PNG chart of a run, after Redy's Fig. 18: throughput per device (bars, log scale), grouped by key
/// distribution, at the largest thread count. Drawn here with a built-in pixel font and written with the BCL's
/// zlib: no charting package restores from this machine's NuGet mirror (ScottPlot is missing).
/// </summary>
public static class Chart
{
    private static readonly (byte R, byte G, byte B)[] Palette =
    {
        (90, 90, 90), (214, 39, 40), (31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189),
    };

    public static void Write(string path, IReadOnlyList<RunResult> results, string title)
    {
        int threads = results.Max(r => r.Threads);
        var rows = results.Where(r => r.Threads == threads).ToList();
        var groups = rows.Select(r => r.Distribution).Distinct().ToList();
        var devices = rows.Select(r => r.Device).Distinct().ToList();
        const int W = 900, H = 520, Left = 90, Right = 20, Top = 60, Bottom = 90;
        var img = new Image(W, H);
        img.Fill(255, 255, 255);
        double max = rows.Max(r => r.OpsPerSecond), min = Math.Max(1, rows.Min(r => r.OpsPerSecond));
        double lo = Math.Pow(10, Math.Floor(Math.Log10(min))), hi = Math.Pow(10, Math.Ceiling(Math.Log10(max * 1.01)));
        int plotH = H - Top - Bottom, plotW = W - Left - Right;
        int Y(double v) => Top + plotH - (int)Math.Round((Math.Log10(Math.Max(v, lo)) - Math.Log10(lo)) / (Math.Log10(hi) - Math.Log10(lo)) * plotH);

        for (double v = lo; v <= hi * 1.001; v *= 10)
        {
            int y = Y(v);
            img.Line(Left, y, W - Right, y, 220, 220, 220);
            img.Text(Format(v), 8, y - 5, 2, 60, 60, 60);
        }
        img.Line(Left, Top, Left, Top + plotH, 0, 0, 0);
        img.Line(Left, Top + plotH, W - Right, Top + plotH, 0, 0, 0);
        img.Text(title.ToUpperInvariant(), Left, 15, 2, 0, 0, 0);
        img.Text($"OPS/S (LOG SCALE), {threads} THREAD{(threads > 1 ? "S" : "")}", Left, 35, 2, 90, 90, 90);

        int groupW = plotW / Math.Max(1, groups.Count);
        int barW = Math.Max(8, (groupW - 40) / Math.Max(1, devices.Count));
        for (int g = 0; g < groups.Count; g++)
        {
            int x0 = Left + g * groupW + 20;
            for (int d = 0; d < devices.Count; d++)
            {
                var r = rows.FirstOrDefault(x => x.Distribution == groups[g] && x.Device == devices[d]);
                if (r is null)
                    continue;
                var (cr, cg, cb) = Palette[d % Palette.Length];
                int x = x0 + d * barW, y = Y(r.OpsPerSecond);
                img.Rect(x + 2, y, barW - 4, Top + plotH - y, cr, cg, cb);
                img.Text(Format(r.OpsPerSecond), x + 2, y - 14, 1, 0, 0, 0);
            }
            img.Text(groups[g].ToUpperInvariant(), x0 + (devices.Count * barW) / 2 - groups[g].Length * 4, Top + plotH + 10, 2, 0, 0, 0);
        }
        for (int d = 0; d < devices.Count; d++)
        {
            var (cr, cg, cb) = Palette[d % Palette.Length];
            int x = Left + d * 160, y = H - 40;
            img.Rect(x, y, 14, 14, cr, cg, cb);
            img.Text(devices[d].ToUpperInvariant(), x + 20, y + 2, 2, 0, 0, 0);
        }
        Directory.CreateDirectory(Path.GetDirectoryName(Path.GetFullPath(path))!);
        File.WriteAllBytes(path, img.ToPng());
    }

    private static string Format(double v) =>
        v >= 1e6 ? $"{v / 1e6:0.##}M" : v >= 1e3 ? $"{v / 1e3:0.#}K" : $"{v:0}";

    private sealed class Image
    {
        private readonly byte[] _rgb;
        public Image(int width, int height)
        {
            Width = width;
            Height = height;
            _rgb = new byte[width * height * 3];
        }

        public int Width { get; }
        public int Height { get; }

        public void Fill(byte r, byte g, byte b) => Rect(0, 0, Width, Height, r, g, b);

        public void Set(int x, int y, byte r, byte g, byte b)
        {
            if (x < 0 || y < 0 || x >= Width || y >= Height)
                return;
            int i = (y * Width + x) * 3;
            _rgb[i] = r;
            _rgb[i + 1] = g;
            _rgb[i + 2] = b;
        }

        public void Rect(int x, int y, int w, int h, byte r, byte g, byte b)
        {
            for (int yy = y; yy < y + h; yy++)
                for (int xx = x; xx < x + w; xx++)
                    Set(xx, yy, r, g, b);
        }

        public void Line(int x0, int y0, int x1, int y1, byte r, byte g, byte b)
        {
            int n = Math.Max(Math.Abs(x1 - x0), Math.Abs(y1 - y0));
            for (int i = 0; i <= n; i++)
                Set(x0 + (n == 0 ? 0 : (x1 - x0) * i / n), y0 + (n == 0 ? 0 : (y1 - y0) * i / n), r, g, b);
        }

        public void Text(string text, int x, int y, int scale, byte r, byte g, byte b)
        {
            foreach (char c in text)
            {
                var rows = Font.Glyph(c);
                for (int row = 0; row < 5; row++)
                    for (int col = 0; col < 3; col++)
                        if ((rows[row] >> (2 - col) & 1) != 0)
                            Rect(x + col * scale, y + row * scale, scale, scale, r, g, b);
                x += 4 * scale;
            }
        }

        public byte[] ToPng()
        {
            using var png = new MemoryStream();
            png.Write(new byte[] { 0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A });
            var header = new byte[13];
            WriteBE(header, 0, (uint)Width);
            WriteBE(header, 4, (uint)Height);
            header[8] = 8;  // bit depth
            header[9] = 2;  // colour type: RGB
            Chunk(png, "IHDR", header);
            using var raw = new MemoryStream();
            using (var z = new ZLibStream(raw, CompressionLevel.Optimal, leaveOpen: true))
            {
                for (int y = 0; y < Height; y++)
                {
                    z.WriteByte(0);  // filter: none
                    z.Write(_rgb, y * Width * 3, Width * 3);
                }
            }
            Chunk(png, "IDAT", raw.ToArray());
            Chunk(png, "IEND", Array.Empty<byte>());
            return png.ToArray();
        }

        private static void Chunk(Stream s, string type, byte[] data)
        {
            var len = new byte[4];
            WriteBE(len, 0, (uint)data.Length);
            s.Write(len);
            var typed = new byte[4 + data.Length];
            for (int i = 0; i < 4; i++)
                typed[i] = (byte)type[i];
            data.CopyTo(typed, 4);
            s.Write(typed);
            var crc = new byte[4];
            WriteBE(crc, 0, Crc32(typed));
            s.Write(crc);
        }

        private static void WriteBE(byte[] b, int at, uint v)
        {
            b[at] = (byte)(v >> 24);
            b[at + 1] = (byte)(v >> 16);
            b[at + 2] = (byte)(v >> 8);
            b[at + 3] = (byte)v;
        }

        private static uint Crc32(byte[] data)
        {
            uint c = 0xFFFFFFFF;
            foreach (byte d in data)
            {
                c ^= d;
                for (int k = 0; k < 8; k++)
                    c = (c & 1) != 0 ? 0xEDB88320 ^ (c >> 1) : c >> 1;
            }
            return ~c;
        }
    }

    /// <summary>A 3x5 pixel font: digits, capitals and a little punctuation (each row is 3 bits, MSB left).</summary>
    private static class Font
    {
        private static readonly Dictionary<char, byte[]> Glyphs = new()
        {
            ['0'] = new byte[] { 7, 5, 5, 5, 7 }, ['1'] = new byte[] { 2, 6, 2, 2, 7 }, ['2'] = new byte[] { 7, 1, 7, 4, 7 },
            ['3'] = new byte[] { 7, 1, 7, 1, 7 }, ['4'] = new byte[] { 5, 5, 7, 1, 1 }, ['5'] = new byte[] { 7, 4, 7, 1, 7 },
            ['6'] = new byte[] { 7, 4, 7, 5, 7 }, ['7'] = new byte[] { 7, 1, 1, 1, 1 }, ['8'] = new byte[] { 7, 5, 7, 5, 7 },
            ['9'] = new byte[] { 7, 5, 7, 1, 7 }, ['A'] = new byte[] { 2, 5, 7, 5, 5 }, ['B'] = new byte[] { 6, 5, 6, 5, 6 },
            ['C'] = new byte[] { 7, 4, 4, 4, 7 }, ['D'] = new byte[] { 6, 5, 5, 5, 6 }, ['E'] = new byte[] { 7, 4, 6, 4, 7 },
            ['F'] = new byte[] { 7, 4, 6, 4, 4 }, ['G'] = new byte[] { 7, 4, 5, 5, 7 }, ['H'] = new byte[] { 5, 5, 7, 5, 5 },
            ['I'] = new byte[] { 7, 2, 2, 2, 7 }, ['J'] = new byte[] { 1, 1, 1, 5, 7 }, ['K'] = new byte[] { 5, 5, 6, 5, 5 },
            ['L'] = new byte[] { 4, 4, 4, 4, 7 }, ['M'] = new byte[] { 5, 7, 7, 5, 5 }, ['N'] = new byte[] { 6, 5, 5, 5, 5 },
            ['O'] = new byte[] { 7, 5, 5, 5, 7 }, ['P'] = new byte[] { 7, 5, 7, 4, 4 }, ['Q'] = new byte[] { 7, 5, 5, 7, 1 },
            ['R'] = new byte[] { 7, 5, 6, 5, 5 }, ['S'] = new byte[] { 7, 4, 7, 1, 7 }, ['T'] = new byte[] { 7, 2, 2, 2, 2 },
            ['U'] = new byte[] { 5, 5, 5, 5, 7 }, ['V'] = new byte[] { 5, 5, 5, 5, 2 }, ['W'] = new byte[] { 5, 5, 7, 7, 5 },
            ['X'] = new byte[] { 5, 5, 2, 5, 5 }, ['Y'] = new byte[] { 5, 5, 2, 2, 2 }, ['Z'] = new byte[] { 7, 1, 2, 4, 7 },
            ['.'] = new byte[] { 0, 0, 0, 0, 2 }, [','] = new byte[] { 0, 0, 0, 2, 4 }, ['-'] = new byte[] { 0, 0, 7, 0, 0 },
            ['/'] = new byte[] { 1, 1, 2, 4, 4 }, ['('] = new byte[] { 1, 2, 2, 2, 1 }, [')'] = new byte[] { 4, 2, 2, 2, 4 },
            [':'] = new byte[] { 0, 2, 0, 2, 0 }, ['%'] = new byte[] { 5, 1, 2, 4, 5 }, ['='] = new byte[] { 0, 7, 0, 7, 0 },
            [' '] = new byte[] { 0, 0, 0, 0, 0 }, ['_'] = new byte[] { 0, 0, 0, 0, 7 },
        };

        public static byte[] Glyph(char c) => Glyphs.TryGetValue(char.ToUpperInvariant(c), out var g) ? g : Glyphs['-'];
    }
}

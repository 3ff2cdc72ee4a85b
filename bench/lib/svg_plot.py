"""Hand-written SVG plots for the bench scripts (no plotting library: Debian's python3 only).

  /usr/bin/python3 bench/lib/svg_plot.py cdf OUT.svg TITLE LABEL=WAITS_FILE ...
      step lines of cumulative fractions against a log-scale x axis in ms; each WAITS_FILE has
      "seconds fraction" lines, sorted (bench/lib/fairness.py analyze --waits)
  /usr/bin/python3 bench/lib/svg_plot.py bars OUT.svg TITLE UNIT LABEL=VALUE ...
      horizontal bars, one per LABEL (e.g. fetch cost per job in µs)
"""
import math
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
W, H = 900, 520
L, R, T, B = 80, 30, 50, 130  # margins: the legend goes below the plot


def header(title):
    return ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'font-family="sans-serif" font-size="12">' % (W, H),
            '<rect width="100%" height="100%" fill="white"/>',
            '<text x="%d" y="25" text-anchor="middle" font-size="14">%s</text>'
            % (W // 2, escape(title))]


def cdf(out, title, series):
    data = []
    for label, path in series:
        pts = [tuple(map(float, line.split())) for line in open(path) if line.strip()]
        data.append((label, [(max(s * 1000, 0.01), f) for s, f in pts]))
    xs = [x for _, pts in data for x, _ in pts]
    lo = 10 ** math.floor(math.log10(min(xs)))
    hi = 10 ** math.ceil(math.log10(max(xs)))
    pw, ph = W - L - R, H - T - B

    def px(x):
        return L + (math.log10(x) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * pw

    def py(f):
        return T + (1 - f) * ph

    svg = header(title)
    d = lo
    while d <= hi * 1.0001:
        x = px(d)
        svg.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, T, x, T + ph))
        svg.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (x, T + ph + 16, d))
        d *= 10
    for i in range(0, 11, 2):
        y = py(i / 10)
        svg.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, y, L + pw, y))
        svg.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (L - 6, y + 4, i / 10))
    svg.append('<text x="%d" y="%d" text-anchor="middle">wait, enqueue to start (ms, log scale)'
               '</text>' % (L + pw // 2, T + ph + 36))
    svg.append('<text x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">'
               'fraction of small tenants\' jobs</text>' % (T + ph // 2, T + ph // 2))
    for k, (label, pts) in enumerate(data):
        c = COLORS[k % len(COLORS)]
        path, prev = [], 0.0
        for x, f in pts:
            path.append("%.1f,%.1f %.1f,%.1f" % (px(x), py(prev), px(x), py(f)))
            prev = f
        svg.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                   % (c, " ".join(path)))
        y = T + ph + 56 + 18 * k
        svg.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>'
                   % (L, y - 4, L + 30, y - 4, c))
        svg.append('<text x="%d" y="%d">%s</text>' % (L + 38, y, escape(label)))
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


def bars(out, title, unit, series):
    vals = [(label, float(v)) for label, v in series]
    top = max(v for _, v in vals) * 1.15
    left = 330
    pw = W - left - R
    bh = 26
    h = T + 40 + bh * 1.5 * len(vals)
    svg = header(title)
    svg[0] = svg[0].replace('height="%d"' % H, 'height="%d"' % h)
    for k, (label, v) in enumerate(vals):
        y = T + 10 + k * bh * 1.5
        w = v / top * pw
        svg.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                   % (left - 8, y + bh * 0.65, escape(label)))
        svg.append('<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"/>'
                   % (left, y, w, bh, COLORS[(k // 2) % len(COLORS)] if k % 2 else "#999"))
        svg.append('<text x="%.1f" y="%.1f">%g %s</text>' % (left + w + 6, y + bh * 0.65, v,
                                                             escape(unit)))
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


def pairs(args):
    return [tuple(a.split("=", 1)) for a in args]


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "cdf":
        cdf(sys.argv[2], sys.argv[3], pairs(sys.argv[4:]))
    elif len(sys.argv) >= 6 and sys.argv[1] == "bars":
        bars(sys.argv[2], sys.argv[3], sys.argv[4], pairs(sys.argv[5:]))
    else:
        sys.exit(__doc__)

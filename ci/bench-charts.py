#!/usr/bin/env python3
"""Charts of the bench scripts' results: one PNG per workload.

    python ci/bench-charts.py LOGDIR OUTDIR

LOGDIR holds what the bench scripts printed, one file per script named after its prefix, as
ci/test.sh's `script_step` saves them: bench-parquet.log, bench-metadata.log, bench-publish.log,
bench-listing.log, bench-shards-py.log, bench-mmap.log, bench-requests.log, bench-download.log,
and the cargo benches' smoke runs `logged_step` saves: bench-many-readers.log and
bench-many-readers-budget.log (one chart of both), bench-fuse-read.log (two charts: one large
file; the disk tier and passthrough), bench-fuse-write.log (writes), bench-micro.log (the
criterion medians of a run with `-- --bench`); and bench-fleet.log, the `figure:` lines
tests/shared_cache.rs appends to the file HUBFS_SHARED_FIGURES names (ci/test.sh: this one).
The scripts print markdown table rows (`| ... |`) or `figure:` lines; this reads those and writes
OUTDIR/<workload>.png, 800 x 450 pixels. A log or a row that is missing or unreadable skips that
chart with a note on stdout; the script never fails a run (exit status 0, also without matplotlib).
"""

import os
import re
import statistics
import sys
import textwrap

W, H, DPI = 8, 4.5, 100  # 800 x 450 pixels
WRITTEN = []
HUBFS, PEER, STOCK, OTHER = "#2b6cb0", "#dd6b20", "#718096", "#38a169"


def note(msg):
    try:
        print(f"bench-charts: {msg}", flush=True)
    except OSError:  # stdout closed: the charts still get written
        pass


def read_log(logdir, prefix, missing="chart skipped"):
    path = os.path.join(logdir, f"{prefix}.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        note(f"{prefix}: no log at {path}, {missing}")
        return None


def table_rows(lines, ncols):
    """Data rows of the markdown tables in LINES with NCOLS cells (header and rule rows left out)."""
    rows = []
    for line in lines:
        s = line.strip()
        if not (s.startswith("|") and s.endswith("|")):
            continue
        cells = [c.strip() for c in s[1:-1].split("|")]
        if len(cells) != ncols or set(cells[0]) <= set("-: "):
            continue
        rows.append(cells)
    # the first row of each table is its header: keep rows whose numeric cells parse
    return rows


def num(s):
    m = re.search(r"-?\d+(?:\.\d+)?", s.replace(",", ""))
    return float(m.group()) if m else None


def mean(xs):
    return statistics.fmean(xs) if xs else None


def figure(title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(W, H), dpi=DPI)
    ax.set_title(title, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return plt, fig, ax


def panels(title, width_ratios):
    """A figure of side-by-side axes, one per entry of WIDTH_RATIOS, under one title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(width_ratios), figsize=(W, H), dpi=DPI, width_ratios=width_ratios,
                             squeeze=False)
    axes = list(axes[0])
    fig.suptitle(title, fontsize=11)
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    return plt, fig, axes


def save(plt, fig, outdir, name, rect=(0, 0, 1, 1)):
    fig.tight_layout(rect=rect)
    path = os.path.join(outdir, f"{name}.png")
    fig.savefig(path, dpi=DPI, pil_kwargs={"optimize": True})
    plt.close(fig)
    WRITTEN.append(path)
    note(f"wrote {path}")


def label_bars(ax, bars, values, fmt):
    """Writes each bar's value on top of it (a None value: no label)."""
    for b, v in zip(bars, values):
        if v is not None:
            ax.annotate(fmt.format(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")


def grouped(ax, labels, series, fmt="{:.2g}"):
    """Bars of several series per label; SERIES is [(name, colour, [value or None per label])]."""
    n = len(series)
    width = 0.8 / n
    for i, (name, colour, values) in enumerate(series):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(labels))]
        vs = [v if v is not None else 0 for v in values]
        label_bars(ax, ax.bar(xs, vs, width, label=name, color=colour), values, fmt)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.legend(fontsize=8, frameon=False)


# --- one function per workload: (log prefix, chart name, builder) -------------------------------------


def parquet(lines, outdir):
    # | profile | pass | build | seconds | needed MiB | Hub MiB | Hub / needed | requests | peak RSS MiB |
    rows = [r for r in table_rows(lines, 9) if num(r[4]) is not None and num(r[5]) is not None]
    if not rows:
        return note("bench-parquet: no result rows, chart skipped")
    profile, build = rows[0][0], rows[0][2]
    rows = [r for r in rows if r[0] == profile and r[2] == build]
    # Per query: the default (PASS@direct, parquet opened with direct I/O) and, where it ran, the
    # same through the page cache (--direct-io none).
    kinds, default, paged = [], {}, {}
    for r in rows:
        kind = r[1].removesuffix("@direct")
        if kind not in kinds:
            kinds.append(kind)
        (default if r[1].endswith("@direct") else paged)[kind] = r
    def ratio(k):
        r = default.get(k) or paged[k]
        return f"{num(r[6]):.2f}×"
    labels = [k.replace(":", "\n") + "\n" + ratio(k) for k in kinds]
    needed = [num((default.get(k) or paged[k])[4]) for k in kinds]
    plt, fig, ax = figure(f"Sparse parquet reads ({profile}): bytes from the Hub against bytes needed")
    grouped(ax, labels, [("needed by the query", STOCK, needed),
                         ("hubfs (default: direct I/O)", HUBFS, [num(default[k][5]) if k in default else None for k in kinds]),
                         ("hubfs --direct-io none", PEER, [num(paged[k][5]) if k in paged else None for k in kinds])],
            fmt="{:.1f}")
    ax.set_yscale("log")
    ax.set_ylabel("MiB (log scale)")
    save(plt, fig, outdir, "parquet")


def metadata(lines, outdir):
    # | walk | hubfs s | mount CPU s | api calls | peak RSS MiB | [hf-mount s | CPU s | api | RSS MiB | ratio |]
    rows = [r for r in table_rows(lines, 10) if num(r[1]) is not None]
    peer = bool(rows)
    if not rows:
        rows = [r for r in table_rows(lines, 5) if num(r[1]) is not None]
    if not rows:
        return note("bench-metadata: no result rows, chart skipped")
    labels = [r[0] for r in rows]
    series = [("hubfs", HUBFS, [num(r[1]) for r in rows])]
    if peer:
        series.append(("hf-mount", PEER, [num(r[5]) for r in rows]))
    plt, fig, ax = figure("Tree walks over a fresh mount: wall time (lower is better)")
    grouped(ax, labels, series, fmt="{:.2f}")
    ax.set_ylabel("seconds")
    save(plt, fig, outdir, "metadata")


def publish(lines, outdir):
    # | shape | way | seconds | MB/s | commits | api calls | mount peak RSS MiB | vs upload_folder |
    rows = [r for r in table_rows(lines, 8) if num(r[2]) is not None]
    if not rows:
        return note("bench-publish: no result rows, chart skipped")
    shapes = list(dict.fromkeys(r[0] for r in rows))
    ways = list(dict.fromkeys(r[1] for r in rows))
    colours = {"upload_folder": STOCK, "close=upload": HUBFS, "close=stage": OTHER}
    series = []
    for w in ways:
        vals = [mean([num(r[2]) for r in rows if r[0] == s and r[1] == w]) for s in shapes]
        name = "upload_folder (stock client)" if w == "upload_folder" else f"hubfs cp -r, {w}"
        series.append((name, colours.get(w, PEER), vals))
    plt, fig, ax = figure("Publishing a folder until the Hub has every file (lower is better)")
    shape_names = {"mixed": "500 small files + 4 × 64 MiB", "small": "10,000 small files",
                   "huge": "10 small files + 2 × 1 GiB"}
    grouped(ax, [shape_names.get(s, s) for s in shapes], series, fmt="{:.1f}")
    ax.set_ylabel("seconds")
    save(plt, fig, outdir, "publish")


LISTING = re.compile(r"figure: (\S+), (\w)/ \((\w+)\), (\d+) ms, prefetch (\d+): ([\d.]+) files/s")
LISTING_PEER = re.compile(r"figure: hf-mount cp -r, d/ \(Xet\), 0 ms: ([\d.]+) files/s")


def listing(lines, outdir):
    runs, peer = {}, []
    for line in lines:
        m = LISTING.search(line)
        if m and m.group(2) == "d" and m.group(5) != "0":
            runs.setdefault((m.group(1), int(m.group(4))), []).append(float(m.group(6)))
        m = LISTING_PEER.search(line)
        if m:
            peer.append(float(m.group(1)))
    readers = [r for r in ("cp", "tar", "rsync", "py-shuf", "cat", "cat-shuf") if (r, 0) in runs or (r, 30) in runs]
    if not readers:
        return note("bench-listing: no `figure:` lines for the Xet folder, chart skipped")
    names = {"cp": "cp -r", "tar": "tar | tar", "rsync": "rsync -a", "py-shuf": "Python\nshuffled",
             "cat": "cat, listing\norder", "cat-shuf": "cat\nshuffled"}
    series = [("hubfs, loopback", HUBFS, [mean(runs.get((r, 0), [])) for r in readers]),
              ("hubfs, 30 ms per request", OTHER, [mean(runs.get((r, 30), [])) for r in readers])]
    if peer:
        series.append(("hf-mount, loopback", PEER, [mean(peer) if r == "cp" else None for r in readers]))
    plt, fig, ax = figure("Small files (4 KiB, Xet) read through a fresh mount: files/s (higher is better)")
    grouped(ax, [names[r] for r in readers], series, fmt="{:.0f}")
    ax.set_ylabel("files/s")
    save(plt, fig, outdir, "listing")


SHARDS = re.compile(r"figure: (\S+), ([\w-]+) \(\d+ threads?, [^)]*\): ([\d.]+) MB/s, Hub bytes ([\d.]+) x")


def shards(lines, outdir):
    runs = {}
    for line in lines:
        m = SHARDS.search(line)
        if m:
            runs.setdefault((m.group(1), m.group(2)), []).append(float(m.group(3)))
    if not runs:
        return note("bench-shards-py: no `figure:` lines, chart skipped")
    profiles = list(dict.fromkeys(p for p, _ in runs))
    kinds = list(dict.fromkeys(k for _, k in runs))
    names = {"serial": "one thread", "pool": "thread pool, one worker per shard",
             "pool-budget": "thread pool, --memory-limit 128M"}
    colours = [STOCK, HUBFS, OTHER, PEER]
    series = [(names.get(k, k), colours[i % 4], [mean(runs.get((p, k), [])) for p in profiles])
              for i, k in enumerate(kinds)]
    plt, fig, ax = figure("Sharded safetensors loaded from Python through a mount: MB/s (higher is better)")
    grouped(ax, ["30 ms per request, 200 Mbit/s" if p == "30ms" else p for p in profiles], series, fmt="{:.0f}")
    ax.set_ylabel("MB/s")
    save(plt, fig, outdir, "shards")


MMAP = re.compile(r"figure: ([^,:]+), (dd|safetensors|shuffled): (\d+) MB/s")


def mmap(lines, outdir):
    runs = {}
    for line in lines:
        m = MMAP.search(line)
        if m:
            runs.setdefault((m.group(1), m.group(2)), []).append(float(m.group(3)))
    if not runs:
        return note("bench-mmap: no `figure:` lines, chart skipped")
    profiles = list(dict.fromkeys(p for p, _ in runs))
    series = [(name, colour, [mean(runs.get((p, k), [])) for p in profiles]) for k, name, colour in (
        ("dd", "dd bs=1M", STOCK), ("safetensors", "safetensors, tensor order", HUBFS),
        ("shuffled", "safetensors, shuffled", OTHER)) if any((p, k) in runs for p in profiles)]
    plt, fig, ax = figure("safetensors loaded through mmap beside dd, cold: MB/s (higher is better)")
    grouped(ax, profiles, series, fmt="{:.0f}")
    ax.set_ylabel("MB/s")
    save(plt, fig, outdir, "mmap")


def download(lines, outdir):
    # | profile | way | seconds | Hub MiB | peak RSS MiB |
    rows = [r for r in table_rows(lines, 5) if num(r[2]) is not None]
    if not rows:
        return note("bench-download: no result rows, chart skipped")
    profiles = list(dict.fromkeys(r[0] for r in rows))
    ways = list(dict.fromkeys(r[1] for r in rows))
    colours = [STOCK, HUBFS, OTHER, PEER]
    series = [(w, colours[i % 4], [mean([num(r[2]) for r in rows if r[0] == p and r[1] == w]) for p in profiles])
              for i, w in enumerate(ways)]
    plt, fig, ax = figure("One file of a model repo, cold: seconds (lower is better)")
    grouped(ax, ["30 ms per request, 200 Mbit/s" if p == "30ms" else p for p in profiles], series, fmt="{:.2f}")
    ax.set_ylabel("seconds")
    save(plt, fig, outdir, "download")


def requests(lines, outdir):
    # after "workload api resolvers cas": NAME (may hold spaces) then three counts
    rows, inside = [], False
    for line in lines:
        parts = line.split()
        if parts[:4] == ["workload", "api", "resolvers", "cas"]:
            inside, rows = True, []
            continue
        if inside:
            if len(parts) >= 4 and all(p.isdigit() for p in parts[-3:]):
                rows.append((" ".join(parts[:-3]), [int(p) for p in parts[-3:]]))
            else:
                inside = False
    if not rows:
        return note("bench-requests: no result rows, chart skipped")
    labels = [name for name, _ in rows]
    series = [(bucket, colour, [max(v[i], 0.5) if v[i] else None for _, v in rows])
              for i, (bucket, colour) in enumerate([("api", HUBFS), ("resolvers", PEER), ("CAS", OTHER)])]
    plt, fig, ax = figure("Hub requests per workload, by the Hub's rate-limit bucket (lower is better)")
    grouped(ax, labels, series, fmt="{:.0f}")
    ax.set_yscale("log")
    ax.set_ylabel("requests (log scale)")
    save(plt, fig, outdir, "requests")


def profile_name(p):
    return "30 ms per request, 200 Mbit/s" if p == "30ms" else p


def variant_name(v):
    """`--memory-limit 128M` for a variant named limit128, `--memory-cache-size 8M` for tier8M."""
    m = re.fullmatch(r"limit(\d+[KMG]?)", v)
    if m:
        return f"--memory-limit {m.group(1)}{'' if m.group(1)[-1].isalpha() else 'M'}"
    m = re.fullmatch(r"tier(\d+[KMG]?)", v)
    if m:
        return f"--memory-cache-size {m.group(1)}"
    return "default options" if v == "default" else v


def many_readers(lines, outdir):
    # | hubfs | frontend | options | Hub | readers | files | aggregate MB/s | Hub bytes / distinct bytes read |
    #   Hub requests | mount peak RSS | mount CPU |   (both smoke runs' logs, one after the other)
    rows = [r for r in table_rows(lines, 11) if num(r[6]) is not None and num(r[7]) is not None]
    if not rows:
        return note("bench-many-readers: no result rows, chart skipped")
    shapes = list(dict.fromkeys((r[4], r[5]) for r in rows))
    groups = list(dict.fromkeys((r[3],) + ((r[4], r[5]) if len(shapes) > 1 else ()) for r in rows))
    kinds = list(dict.fromkeys((r[0], r[1], r[2]) for r in rows))
    builds = {k[0] for k in kinds}
    fronts = {k[1] for k in kinds}

    def key(r):
        return (r[3],) + ((r[4], r[5]) if len(shapes) > 1 else ())

    def label(g):
        if len(g) == 1:
            return profile_name(g[0]).replace(", ", "\n")
        return f"{'30 ms' if g[0] == '30ms' else g[0]}\n{g[1]} reader{'s' if g[1] != '1' else ''},\n{g[2]}"

    def kind_name(k):
        parts = ([k[0]] if len(builds) > 1 else []) + ([k[1].upper()] if len(fronts) > 1 else [])
        return ", ".join(parts + [variant_name(k[2])])

    colours = [HUBFS, OTHER, PEER, STOCK]

    def values(col):
        return [(kind_name(k), colours[i % 4],
                 [mean([num(r[col]) for r in rows if key(r) == g and (r[0], r[1], r[2]) == k]) for g in groups])
                for i, k in enumerate(kinds)]

    readers = f"{shapes[0][0]} readers" if len(shapes) == 1 else "Readers"
    what = f", files of {shapes[0][1]}" if len(shapes) == 1 else ""
    front = f" {next(iter(fronts)).upper()}" if len(fronts) == 1 else ""
    ratios = [num(r[7]) for r in rows]
    plt, fig, (left, right) = panels(f"{readers} at once through one{front} mount{what}\n"
                                     f"Hub bytes / bytes read: {min(ratios):.3f}–{max(ratios):.3f} in every run", [1, 1])
    labels = [label(g) for g in groups]
    grouped(left, labels, values(6), fmt="{:.0f}")
    left.set_title("aggregate MB/s (higher is better)", fontsize=9)
    left.set_ylabel("MB/s")
    grouped(right, labels, values(9), fmt="{:.0f}")
    right.set_title("mount peak RSS (MiB)", fontsize=9)
    right.set_ylabel("MiB")
    limits = sorted({int(m.group(1)) for k in kinds for m in [re.fullmatch(r"limit(\d+)M?", k[2])] if m})
    for mib in limits:
        right.axhline(mib, color="#c53030", linestyle="--", linewidth=1, label=f"the limit, {mib} MiB")
    left.get_legend().remove()
    right.get_legend().remove()
    handles, names = right.get_legend_handles_labels()  # one legend for both, under them
    ncol = min(len(names), 3)
    fig.legend(handles, names, fontsize=8, frameon=False, loc="lower center", ncol=ncol)
    save(plt, fig, outdir, "many-readers", rect=(0, 0.05 * -(-len(names) // ncol), 1, 1))


def passthrough_short(label):
    for prefix, short in (("cold read", "cold read"), ("b: first", "b: at once\n(join still\nrunning)"),
                          ("b: second", "b: again,\nafter the\njoin"), ("a: first", "a: after\nthe join"),
                          ("c: second mount", "c: second\nmount, same\ncache dir"),
                          ("d: same mount", "d: after\ndrop_caches"), ("d: the same again", "d: the\nsame again")):
        if label.startswith(prefix):
            return short
    return "\n".join(textwrap.wrap(label, 11))


def fuse_read(lines, outdir):
    # the disk tier's rows of `| measurement | figure | ratio / target |`, and
    # `| passthrough, order of events | auto GB/s | off GB/s | auto / off | ... |` (9 cells)
    disk = {}
    for r in table_rows(lines, 3):
        if r[0].startswith("cold sequential, CLI caches"):
            m = re.search(r"disk tier off \(([\d.]+) GB/s", r[2])
            disk["on"], disk["off"] = num(r[1]), float(m.group(1)) if m else None
        elif r[0].startswith("re-read from the disk tier"):
            disk["re-read"] = num(r[1])
    orders = [r for r in table_rows(lines, 9) if num(r[1]) is not None and num(r[2]) is not None]
    have_disk = disk.get("on") is not None
    if not have_disk and not orders:
        return note("bench-fuse-read: no disk tier or passthrough rows, chart skipped")
    ratios = [1, 4] if have_disk and orders else [1]
    plt, fig, axes = panels("The disk tier and FUSE passthrough: reads of one file, GB/s (higher is better)", ratios)
    dax = axes[0] if have_disk else None
    pax = axes[-1] if orders else None
    if dax is not None:
        grouped(dax, ["cold read", "re-read,\nfresh mount"],
                [("tier on", HUBFS, [disk["on"], disk.get("re-read")]),
                 ("tier off", STOCK, [disk["off"], None])], fmt="{:.2f}")
        dax.legend(fontsize=8, frameon=False, loc="upper left")
        dax.set_ylim(0, max(v for v in disk.values() if v is not None) * 1.3)  # room for the legend
        dax.set_title("disk tier", fontsize=9)
        dax.set_ylabel("GB/s")
    if pax is not None:
        grouped(pax, [passthrough_short(r[0]) for r in orders],
                [("passthrough on (auto)", HUBFS, [num(r[1]) for r in orders]),
                 ("passthrough off", STOCK, [num(r[2]) for r in orders])], fmt="{:.2f}")
        for t in pax.get_xticklabels():
            t.set_fontsize(7)
        pax.set_title("passthrough, by order of events", fontsize=9)
        if dax is None:
            pax.set_ylabel("GB/s")
    save(plt, fig, outdir, "fuse-read")


def bars(ax, labels, values, colours, fmt="{:.2g}"):
    """One bar per label, each in its own colour, its value written on it (None: no bar)."""
    bs = ax.bar(range(len(labels)), [v if v is not None else 0 for v in values], 0.6, color=colours)
    label_bars(ax, bs, values, fmt)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)


def measurement_rows(lines):
    """`| measurement | figure | notes |` rows of a cargo bench's table, by their first cell."""
    return {r[0]: r for r in table_rows(lines, 3)}


def large_file(lines, outdir):
    # fuse_read's rows: the ceiling, cold / warm sequential, random 4 KiB reads, cold at 30 ms
    rows = measurement_rows(lines)

    def figure_of(prefix):
        r = rows.get(prefix) or next((r for k, r in rows.items() if k.startswith(prefix)), None)
        return (num(r[1]), r) if r else (None, None)

    ceiling, _ = figure_of("FUSE ceiling")
    cold, _ = figure_of("hubfs cold sequential read")
    hub_cached, _ = figure_of("hubfs cold sequential read, the Hub's files")
    warm, _ = figure_of("hubfs warm re-read")
    slow, _ = figure_of("hubfs cold sequential, Hub at 30 ms")
    rand_cold, rand_row = figure_of("hubfs cold 4 KiB random reads")
    rand_warm, _ = figure_of("hubfs warm 4 KiB random reads")
    if cold is None and rand_cold is None:
        return note("bench-fuse-read: no cold sequential or random rows (HUBFS_BENCH_ONLY without seq, random), "
                    "chart skipped")
    m = next((re.search(r"(\d+) MiB Xet file", line) for line in lines if "FUSE read benchmark" in line), None)
    size = f" ({m.group(1)} MiB)" if m else ""
    seq = [(lab, v, c) for lab, v, c in (
        ("FUSE ceiling\n(memory\nfilesystem)", ceiling, STOCK), ("cold", cold, HUBFS),
        ("cold, the Hub's\nfiles in its\npage cache", hub_cached, HUBFS), ("warm re-read\n(hubfs cache)", warm, OTHER),
        ("cold, 30 ms,\n200 Mbit/s", slow, PEER)) if v is not None]
    rand = [(lab, v, c) for lab, v, c in (("cold", rand_cold, HUBFS), ("warm", rand_warm, OTHER)) if v is not None]
    plt, fig, axes = panels(f"One large Xet file{size} through a FUSE mount", [3, 1] if seq and rand else [1])
    if seq:
        ax = axes[0]
        bars(ax, [s[0] for s in seq], [s[1] for s in seq], [s[2] for s in seq], fmt="{:.2f}")
        ax.set_title("sequential 1 MiB reads, GB/s (higher is better)", fontsize=9)
        ax.set_ylabel("GB/s")
    if rand:
        ax = axes[-1]
        per_read = num(rand_row[2]) if rand_row else None
        labels = [f"cold\n{per_read:.2f} Hub\nrequests\na read" if lab == "cold" and per_read is not None else lab
                  for lab, _, _ in rand]
        bars(ax, labels, [r[1] for r in rand], [r[2] for r in rand], fmt="{:,.0f}")
        ax.set_yscale("log")
        ax.set_title("4 KiB random reads/s", fontsize=9)
        ax.set_ylabel("reads/s (log scale)")
    save(plt, fig, outdir, "large-file")


def writes(lines, outdir):
    # fuse_write's rows (`| 1. seq write … | 1.43 GB/s | … |`), numbered by the bench's part
    rows = measurement_rows(lines)

    def find(prefix, needle=""):
        return next((r for k, r in rows.items() if k.startswith(prefix) and needle in k), None)

    ceiling, staged = find("1. seq write", "ceiling"), find("1. seq write", "staging")
    close, pure = find("2. close latency"), find("2. hf-hub create_commit")
    rewrite, rss = find("3. identical rewrite"), find("5. peak RSS")
    stage, waits = find("4. cp -r", "stage mode"), find("4. cp -r", "close_waits")
    if not (staged or close or stage):
        return note("bench-fuse-write: no result rows, chart skipped")
    parts = [p for p in (staged, close, stage or waits) if p]
    big = re.search(r"(\d+) MiB write", rss[0]) if rss else None
    peak = f"; mount peak RSS writing {big.group(1)} MiB: {num(rss[1]):.0f} MiB" if rss and big else ""
    plt, fig, axes = panels("Writes into a writable FUSE mount" + peak, [1] * len(parts))
    axes = iter(axes)
    mib = re.search(r"(\d+) MiB", (staged or close or ["", ""])[0])
    if staged:
        ax = next(axes)
        labels, values, colours = [], [], []
        if ceiling:
            labels.append("plain file,\nsame disk")
            values.append(num(ceiling[1]))
            colours.append(STOCK)
        labels.append("the mount's\nstaging")
        values.append(num(staged[1]))
        colours.append(HUBFS)
        bars(ax, labels, values, colours, fmt="{:.2f}")
        ax.set_title(f"write() of {mib.group(1) if mib else 'a'} MiB\nin 1 MiB calls, GB/s", fontsize=8)
        ax.set_ylabel("GB/s")
    if close:
        ax = next(axes)
        size = re.search(r"(\d+) MiB", close[0])
        labels, values, colours = ["close(),\nnew file"], [num(close[1])], [HUBFS]
        if pure:
            labels.append("hf-hub crate,\nsame bytes")
            values.append(num(pure[1]))
            colours.append(STOCK)
        if rewrite:
            m = re.search(r"(?<!\.)close ([\d.]+) s", rewrite[2])  # not "open..close"
            if m:
                labels.append(f"close(),\nidentical\nrewrite,\n{rewrite[1].split('=')[0].strip()} sent")
                values.append(float(m.group(1)))
                colours.append(OTHER)
        bars(ax, labels, values, colours, fmt="{:.2f}")
        ax.set_title(f"{size.group(1) if size else 'one'} MiB until\ncommitted, seconds", fontsize=8)
        ax.set_ylabel("seconds")
    if stage or waits:
        ax = next(axes)
        labels, values, colours = [], [], []
        for r, how, colour in ((stage, "--close stage", HUBFS), (waits, "a commit\nper close", STOCK)):
            if r:
                n = re.search(r"cp -r (\d+) files", r[0])
                rate = re.search(r"([\d.]+) files/s", r[2])
                commits = re.search(r"(\d+) commits", r[1])
                count, made = n.group(1) if n else "?", commits.group(1) if commits else "?"
                labels.append(f"{count} files,\n{how},\n{made} commits")
                values.append(float(rate.group(1)) if rate else None)
                colours.append(colour)
        bars(ax, labels, values, colours, fmt="{:.0f}")
        ax.set_title("cp -r of small files until\nall are on the Hub, files/s", fontsize=8)
        ax.set_ylabel("files/s")
    save(plt, fig, outdir, "writes")


FLEET = re.compile(r"figure: shared tier, (\w+), (\d+) MiB: Hub only ([\d.]+) MiB/s, first node ([\d.]+) MiB/s, "
                   r"later nodes ([\d. ]+) MiB/s, Hub bytes ([\d.]+) x one after another, ([\d.]+) x with (\d+) nodes")


def fleet(lines, outdir):
    stores = {}
    for line in lines:
        m = FLEET.search(line)
        if m:
            stores[m.group(1)] = m  # a store measured twice: the last run
    if not stores:
        return note("bench-fleet: no `figure: shared tier` lines, chart skipped")
    order = [s for s in ("s3", "gs", "az") if s in stores] + [s for s in stores if s not in ("s3", "gs", "az")]
    names = {"s3": "SeaweedFS (S3)", "gs": "fake-gcs-server (GCS)", "az": "Azurite (Azure Blob)"}
    later = {s: [float(v) for v in stores[s].group(5).split()] for s in order}
    spread = {s: f"\nlater nodes {min(v):.0f}–{max(v):.0f}" if len(v) > 1 else "" for s, v in later.items()}
    labels = [names.get(s, s) + spread[s] for s in order]
    series = [("Hub only (no tier)", STOCK, [float(stores[s].group(3)) for s in order]),
              ("first node (fills the tier)", OTHER, [float(stores[s].group(4)) for s in order]),
              ("later nodes (from the tier), mean", HUBFS, [mean(later[s]) for s in order])]
    ratios = [float(stores[s].group(g)) for s in order for g in (6, 7)]
    size = stores[order[0]].group(2)
    plt, fig, ax = figure(f"Nodes sharing a cache tier, one {size} MiB file each: MiB/s (higher is better)\n"
                         f"Hub bytes / file: {min(ratios):.3f}–{max(ratios):.3f}, nodes one after another or at once")
    grouped(ax, labels, series, fmt="{:.0f}")
    ax.set_ylabel("MiB/s")
    save(plt, fig, outdir, "fleet")


UNITS_NS = {"ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}


def ns(text):
    m = re.fullmatch(r"([\d.]+) (ns|µs|us|ms|s)", text.strip())
    return float(m.group(1)) * UNITS_NS[m.group(2)] if m else None


def human_ns(v):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} ns"


def micro(lines, outdir):
    # `| \`group/id\` | median | what one iteration is |` and
    # `| readdir | snapshot | rebuilt per page | rebuilt / snapshot |` (printed by a measuring run)
    medians = [(r[0].strip("`"), ns(r[1])) for r in table_rows(lines, 3) if r[0].startswith("`") and ns(r[1])]
    readdir = [(r[0], ns(r[1]), ns(r[2])) for r in table_rows(lines, 4) if ns(r[1]) and ns(r[2])]
    others = [(k, v) for k, v in medians if not k.startswith("readdir")]
    if not medians and not readdir:
        return note("bench-micro: no medians (a run with `-- --bench` prints them), chart skipped")
    plt, fig, axes = panels("Micro-benchmarks: median time of one iteration (log scale, lower is better)",
                            [1, 1] if readdir and others else [1])
    if readdir:
        ax = axes[0]
        labels = []
        for label, s, r in readdir:
            m = re.match(r"(one page|whole listing), (\d+) entries", label)
            what = ("a page" if m.group(1) == "one page" else "listing") if m else label
            labels.append(f"{what}\n{int(m.group(2)):,}\n{r / s:.0f}×" if m else label)
        grouped(ax, labels, [("opendir snapshot", HUBFS, [s for _, s, _ in readdir]),
                             ("rebuilt per page", STOCK, [r for _, _, r in readdir])], fmt="")
        ax.set_yscale("log")
        ax.set_title("readdir of 100, 1,000, 5,000 entries:\none page, or the whole listing", fontsize=9)
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: human_ns(v)))
    if others:
        ax = axes[-1]
        ax.grid(axis="y", alpha=0)
        ax.grid(axis="x", alpha=0.3)
        ys = range(len(others))
        ax.barh(ys, [v for _, v in others], color=HUBFS, height=0.7)
        for y, (_, v) in zip(ys, others):
            ax.annotate(human_ns(v), (v, y), va="center", fontsize=6, xytext=(2, 0), textcoords="offset points")
        ax.set_yticks(list(ys))
        ax.set_yticklabels([k for k, _ in others], fontsize=6)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(right=max(v for _, v in others) * 30)  # room for the values
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: human_ns(v)))
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title("the other hot paths", fontsize=9)
    save(plt, fig, outdir, "micro")


CHARTS = [("bench-requests", requests), ("bench-parquet", parquet), ("bench-metadata", metadata), ("bench-publish", publish),
          ("bench-listing", listing), ("bench-shards-py", shards), ("bench-mmap", mmap),
          ("bench-download", download), (("bench-many-readers", "bench-many-readers-budget"), many_readers),
          ("bench-fuse-read", fuse_read), ("bench-fuse-read", large_file), ("bench-fuse-write", writes),
          ("bench-fleet", fleet), ("bench-micro", micro)]


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip())
        return 0 if len(argv) == 1 else 2
    logdir, outdir = argv[1], argv[2]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        note("matplotlib is not installed (tests/conformance/requirements.txt pins it); no charts")
        return 0
    try:
        os.makedirs(outdir, exist_ok=True)
    except OSError as e:
        note(f"cannot create {outdir}: {e}; no charts")
        return 0
    for prefixes, build in CHARTS:
        # a chart drawn from several logs takes what is there of them, one after another
        prefixes = prefixes if isinstance(prefixes, tuple) else (prefixes,)
        missing = "chart skipped" if len(prefixes) == 1 else "its chart drawn from the others"
        logs = [lines for lines in (read_log(logdir, p, missing) for p in prefixes) if lines is not None]
        if not logs:
            continue
        try:
            build([line for lines in logs for line in lines], outdir)
        except Exception as e:  # a chart that cannot be drawn is skipped, never the run
            note(f"{'+'.join(prefixes)}: chart skipped ({type(e).__name__}: {e})")
    note(f"{len(WRITTEN)} chart(s) in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

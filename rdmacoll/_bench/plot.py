"""--plot: busbw and time against size, one line per implementation and placement, one
row of two panels per collective, log axes, drawn from JSON rows (those of the run just
made, or a saved --json file: --plot FILE.png --from FILE.json). matplotlib is imported
here only, and only when a plot is asked for."""

from __future__ import annotations

import json
from types import SimpleNamespace

from .options import human


def title_of(rows: list[dict]) -> str:
    """What was run, from the rows themselves."""

    def listed(key):
        return ", ".join(dict.fromkeys(str(r.get(key, "?")) for r in rows))

    ops = ", ".join(dict.fromkeys(r["op"] for r in rows if r.get("op", "none") != "none"))
    return (
        f"rdmacoll-bench {listed('collective')}: {listed('ranks')} ranks on {listed('hosts')} host(s), "
        f"{listed('dtype')}{', ' + ops if ops else ''}; rdmacoll {listed('version')}, timing {listed('timing')}"
    )


def plot_saved(path: str, source: str) -> int:
    """--plot path --from source: redraw from a saved --json file; the number of rows."""
    with open(source) as f:
        rows = json.load(f)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{source}: not a list of rows as --json writes them")
    plot(path, rows)
    return len(rows)


def plot(path: str, rows: list[dict], title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    title = title or title_of(rows)
    # one line per implementation, and per placement, dtype and op where the rows have several
    varying = [k for k in ("placement", "dtype", "op") if len({r.get(k) for r in rows}) > 1]
    rows = [SimpleNamespace(**dict(r, impl=" ".join([r["impl"]] + [str(r[k]) for k in varying]))) for r in rows]
    colls = list(dict.fromkeys(r.collective for r in rows))
    impls = list(dict.fromkeys(r.impl for r in rows))
    colours = {impl: f"C{i}" for i, impl in enumerate(impls)}
    fig, axes = plt.subplots(len(colls) or 1, 2, figsize=(10, 3.4 * max(1, len(colls))), squeeze=False)
    for (bw, lat), coll in zip(axes, colls):
        shown = [r for r in rows if r.collective == coll and r.bytes > 0 and r.time_us > 0]
        for impl in impls:
            rs = sorted((r for r in shown if r.impl == impl), key=lambda r: r.bytes)
            if not rs:
                continue
            x = [r.bytes for r in rs]
            style = dict(marker="o", markersize=3, color=colours[impl], label=impl)
            bw.plot(x, [max(r.busbw, 1e-6) for r in rs], **style)
            lat.plot(x, [r.time_us for r in rs], **style)
        ticks = sorted({r.bytes for r in shown})
        if len(ticks) > 10:
            ticks = ticks[:: -(-len(ticks) // 10)]
        for ax, ylabel, what in (
            (bw, "busbw (GB/s)", "bus bandwidth, higher is better"),
            (lat, "time per call (us)", "time per call, lower is better"),
        ):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            if ticks:
                ax.set_xticks(ticks, [human(t) for t in ticks])
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{coll}: {what}", fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)

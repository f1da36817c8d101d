"""--plot: busbw and time against size, one line per implementation, one row of two
panels per collective, log axes. matplotlib is imported here only, and only when a plot
is asked for."""
from __future__ import annotations

from .options import human


def plot(path: str, rows, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

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
        for ax, ylabel, what in ((bw, "busbw (GB/s)", "bus bandwidth, higher is better"),
                                 (lat, "time per call (us)", "median time, lower is better")):
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

"""The table of ``peers_compare.py``: read one sitting from its results file (JSON lines written by
``benchmarks/peers.py``) and print, per workload, each system's median over reps (± half the min-max
spread) and the ratio Quasar / peer. Used by ``peers_compare.py`` after a sitting and by its ``--report``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

import click

#: Quasar runs: system label -> (peers.py adapter options, client label)
QUASAR = {
    "quasar-official": ({}, "pulsar-client (C++ core), batching, send_async"),
    "quasar-own": ({"client": "quasar"}, "quasar.client (blocking facade), batching, send_async"),
}


def load_sitting(path: Path, sitting: str | None) -> tuple[dict, list[dict]]:
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    heads = [r for r in recs if r.get("kind") == "peers_compare"]
    if not heads:
        raise click.ClickException(f"{path} holds no peers_compare sitting")
    head = next((h for h in heads if h["sitting"] == sitting), None) if sitting else heads[-1]
    if head is None:
        raise click.ClickException(f"no sitting {sitting!r} in {path}")
    return head, [r for r in recs if r.get("sitting") == head["sitting"] and "workload" in r]


def _lat(key: str) -> Callable[[dict], float | None]:
    return lambda r: (r.get("lat_send") or {}).get(key)


def _per_msg(r: dict) -> float | None:
    cpu = r.get("server_cpu_s")
    if cpu is None:
        return None
    count = (r.get("pub") or {}).get("sent") if r["workload"] == "lat" else r.get("n")
    return cpu * 1e6 / count if count else None


def _short(v: float, unit: str) -> str:
    if unit == "msg/s":
        return f"{v:,.0f}"
    return f"{v / 1000:.2f}" if unit == "ms" else f"{v:.1f}"


def rows(recs: list[dict]) -> list[tuple[str, str, Callable[[dict], bool], Callable[[dict], float | None]]]:
    """(label, unit, which records, value of one record) for each row of the table."""
    sizes = sorted({r["size"] for r in recs if r["workload"] in ("pub", "cons")})
    lat = [r for r in recs if r["workload"] == "lat"]
    at = f" @{lat[0]['rate']:,.0f}/s" if lat else ""
    workloads = [
        (f"{wl} {s} B" if s < 1024 else f"{wl} {s / 1024:g} KiB", _match(wl, s))
        for wl in ("pub", "cons")
        for s in sizes
    ]
    out: list = [(f"{name} msg/s", "msg/s", pick, _msg_s) for name, pick in workloads]
    out.append((f"lat p50 ms{at}", "ms", _match("lat"), _lat("p50_us")))
    out.append((f"lat p99 ms{at}", "ms", _match("lat"), _lat("p99_us")))
    workloads.append((f"lat{at}", _match("lat")))
    out += [(f"server µs/msg {name}", "µs", pick, _per_msg) for name, pick in workloads]
    return out


def _msg_s(r: dict) -> float | None:
    return r.get("msg_s")


def _match(wl: str, size: int | None = None) -> Callable[[dict], bool]:
    return lambda r: r["workload"] == wl and (size is None or r["size"] == size)


def _short_flag(r: dict) -> bool:
    if r["workload"] == "lat":
        return r.get("received", 0) < (r.get("pub") or {}).get("sent", 0)
    if r["workload"] == "pub":
        return r.get("acked", r["n"]) < r["n"]
    return r.get("received", r["n"]) < r["n"]


def cell(recs: list[dict], unit: str, value: Callable[[dict], float | None]) -> tuple[float | None, str]:
    vals = [v for v in (value(r) for r in recs) if v is not None]
    if not vals:
        return None, "-"
    med = statistics.median(vals)
    text = _short(med, unit)
    if len(vals) > 1 and med:
        text += f" ±{50 * (max(vals) - min(vals)) / med:.0f}%"
    if any(_short_flag(r) for r in recs):
        text += " †"
    return med, text


def table(head: dict, recs: list[dict]) -> str:
    systems = list(dict.fromkeys(r["system"] for r in recs))
    quasar = [s for s in systems if s in QUASAR]
    peers = [s for s in systems if s not in QUASAR]
    ratio_cols = [(q, p) for q in quasar for p in peers]
    names = {"quasar-official": "official", "quasar-own": "own"}
    header = ["row", *systems, *(f"{names[q]}/{p}" for q, p in ratio_cols)]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for label, unit, pick, value in rows(recs):
        meds: dict[str, float | None] = {}
        cells = []
        for s in systems:
            meds[s], text = cell([r for r in recs if r["system"] == s and pick(r)], unit, value)
            cells.append(text)
        for q, p in ratio_cols:
            a, b = meds[q], meds[p]
            cells.append(f"{a / b:.2f}x" if a is not None and b else "-")
        if any(m is not None for m in meds.values()):  # rows of workloads not run are left out
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    s = head["settings"]
    legend = [
        f"Sitting {head['sitting']} ({head['date']}), Quasar {head['quasar']}, {head['nproc']} cores, data on "
        f"{head['data_fs']}; load average before {fmt_load(head.get('loadavg_before'))}, after "
        f"{fmt_load(head.get('loadavg_after'))}; N = {s['n']} (1 KiB: {s['n_large']}), {s['reps']} rep(s) x "
        f"{s['rounds']} round(s), lat {s['rate']:,.0f} msg/s x {s['duration']} s.",
        "Cells: median over reps, ± half the min-max spread; † = fewer messages acknowledged/received than sent. "
        "Ratios: Quasar / peer (msg/s: higher is better for Quasar; ms and µs/msg: lower is).",
        "",
    ]
    for sys_ in systems:
        r = next(r for r in recs if r["system"] == sys_)
        legend.append(f"- {sys_}: {r.get('client')}; {r.get('durability')}")
    return "\n".join([*lines, "", *legend])


def fmt_load(load: list[float] | None) -> str:
    return "?" if not load else " / ".join(f"{x:.2f}" for x in load)


# -- command line -------------------------------------------------------------------------------------------------

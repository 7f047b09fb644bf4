"""Pareto fronts of minimised objectives: per model, and across models by summing each point's models.

A point dominates another when it is no worse in every objective and better in one. Equal points
do not dominate each other, so duplicates on the front are all kept.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether `a` is no worse than `b` everywhere and better somewhere (all objectives minimised)."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_front(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices (ascending) of the points no other point dominates.

    Points are visited in lexicographic order: a dominator always comes before what it dominates, and a
    dominated point is dominated by some front point, so each point is compared with the front so far
    only (O(n * front) with numpy rows)."""
    if len(points) == 0:
        return []
    values = np.asarray(points, dtype=float).reshape(len(points), -1)
    order = np.lexsort(values.T[::-1])
    front: list[int] = []
    for i in order:
        if front:
            kept = values[front]
            if np.any(np.all(kept <= values[i], axis=1) & np.any(kept < values[i], axis=1)):
                continue
        front.append(int(i))
    return sorted(front)


def across_models(rows: Sequence[Mapping[str, Any]], objectives: Sequence[str],
                  summed: Sequence[str]) -> list[dict[str, Any]]:
    """One row per design point that succeeded on every model: the `summed` objectives added over the
    models (running each model once), the others taken as they are (the same for every model, e.g.
    area), with `pareto` set on the front of those totals."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    by_point: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_point.setdefault(row["point"], []).append(row)
    totals = []
    for point, group in sorted(by_point.items()):
        if len(group) != len(models) or any(r["status"] != "ok" for r in group):
            continue
        total = {"point": point, "models": len(group)}
        for name in objectives:
            total[name] = sum(r[name] for r in group) if name in summed else group[0][name]
        totals.append(total)
    for i in pareto_front([[t[o] for o in objectives] for t in totals]):
        totals[i]["pareto"] = True
    for total in totals:
        total.setdefault("pareto", False)
    return totals

"""The decisions page's counts and their two charts (by status, by reason), drawn by the server as SVG: counts of
the whole store are cached per head; counts under other filters are drawn as images (`needs_own_counts`)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from compute_budget.core.policy.types import ComputeBudgetStatus
from compute_budget.store import BudgetStore
from compute_budget.store.browse import DecisionFilter
from compute_budget.web.queries import Query
from compute_budget.web.rows import status_class

LABEL_WIDTH, BAR_SPACE, ROW_HEIGHT = 230, 260, 26
BAR_COLOURS = {"allowed": "#1a7f37", "blocked": "#cf222e", "unassessable": "#9a6700", "zero": "#6e7781",
               "reason": "#0969da"}


class CountCache:
    """Counts of rows by (status, reason_code), kept per head seq: an append-only store's counts at a new head
    are the old counts plus those of the rows appended since, so only those are counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._counts: Counter[tuple[str, str]] = Counter()

    def get(self, store: BudgetStore) -> tuple[int, Counter[tuple[str, str]]]:
        """(head seq, counts) for the store's current head."""
        with self._lock:
            head = store.head_seq()
            if head < self._seq:  # fewer rows than before: the store was changed behind its back; recount
                self._seq, self._counts = 0, Counter()
            if head > self._seq:
                self._counts.update(store.counts(self._seq, head))
                self._seq = head
            return self._seq, Counter(self._counts)


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar of a chart: its label, count, link, and geometry in the SVG's user units."""

    label: str
    count: int
    href: str
    css: str
    y: int
    width: int
    selected: bool


@dataclass(frozen=True, slots=True)
class Chart:
    """A horizontal bar chart drawn by the server as SVG."""

    title: str
    ident: str
    bars: list[Bar]
    height: int
    label_width: int = LABEL_WIDTH
    bar_space: int = BAR_SPACE
    row_height: int = ROW_HEIGHT

    @property
    def width(self) -> int:
        """The SVG's width in user units (labels, bars, and room for the count)."""
        return self.label_width + self.bar_space + 90


def charts(counts: Counter[tuple[str, str]], query: Query) -> list[Chart]:
    """The status chart and the reason chart; each bar links to its filter. Each follows the other's filter: the
    status chart counts the rows with the reason chosen, the reason chart the rows with the status chosen (the
    counts are the whole store's, cached per head: the other filters are drawn separately, see `needs_own_counts`)."""
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    for (status, reason), count in counts.items():
        if query.where.reason_code in (None, reason):
            by_status[status] += count
        if query.where.status in (None, status):
            by_reason[reason] += count
    status_order = [status.value for status in ComputeBudgetStatus]
    statuses = sorted(by_status, key=lambda name: (status_order.index(name) if name in status_order else 99, name))
    reasons = sorted(by_reason, key=lambda name: (-by_reason[name], name))
    first = Query(DecisionFilter(), query.limit)
    of_reason = f" (reason {query.where.reason_code})" if query.where.reason_code else ""
    of_status = f" (status {query.where.status})" if query.where.status else ""
    return [
        _chart(
            "Decisions by status" + of_reason,
            "chart-status",
            [(name, by_status[name], first.href(status=name), status_class(name)) for name in statuses],
            query.where.status,
        ),
        _chart(
            "Decisions by reason" + of_status,
            "chart-reason",
            [(name, by_reason[name], first.href(reason=name), "reason") for name in reasons],
            query.where.reason_code,
        ),
    ]


def _chart(title: str, ident: str, items: list[tuple[str, int, str, str]], selected: str | None) -> Chart:
    largest = max((count for _, count, _, _ in items), default=0)
    row = ROW_HEIGHT
    space = BAR_SPACE
    bars = [
        Bar(
            label=label,
            count=count,
            href=href,
            css=css,
            y=index * row,
            width=max(1, round(space * count / largest)) if largest else 0,
            selected=label == selected,
        )
        for index, (label, count, href, css) in enumerate(items)
    ]
    return Chart(title, ident, bars, height=max(row, len(bars) * row))


def match_count(counts: Counter[tuple[str, str]], query: Query) -> int | None:
    """How many rows match the page's filters, when the counts can tell (status and reason filters only)."""
    where = query.where
    if any(value is not None for value in (where.gate_decision_id, where.policy_version, where.after_seq)):
        return None
    return sum(
        count
        for (status, reason), count in counts.items()
        if where.status in (None, status) and where.reason_code in (None, reason)
    )


def needs_own_counts(query: Query) -> bool:
    """True when the charts must count under filters the cached whole-store counts cannot apply (gate, policy
    version, a seq range): they are then drawn by `/charts/{which}.svg`, loaded as images beside the page."""
    where = query.where
    return any(value is not None for value in (where.gate_decision_id, where.policy_version, where.after_seq,
                                               where.before_seq))


def chart_svg(chart: Chart) -> str:
    """A chart as a standalone SVG document (colours as attributes: it is shown as an image, outside the CSS)."""
    rows = []
    for bar in chart.bars:
        fill = BAR_COLOURS.get(bar.css, "#8250df")
        weight = ' font-weight="bold"' if bar.selected else ""
        rows.append(
            f'<text x="{chart.label_width - 8}" y="{bar.y + 17}" text-anchor="end"{weight}>{escape(bar.label)}</text>'
            f'<rect x="{chart.label_width}" y="{bar.y + 4}" width="{bar.width}" height="{chart.row_height - 8}" '
            f'fill="{fill}"/><text x="{chart.label_width + bar.width + 6}" y="{bar.y + 17}">{bar.count:,}</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {chart.width} {chart.height}" '
        f'width="{chart.width}" height="{chart.height}" font-family="sans-serif" font-size="14" role="img" '
        f'aria-label={quoteattr(chart.title)}><title>{escape(chart.title)}</title>{"".join(rows)}</svg>'
    )


def counts_by_column(counts: Counter[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """The counts as the API gives them: by status and by reason."""
    by_status: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    for (status, reason), count in sorted(counts.items()):
        by_status[status] = by_status.get(status, 0) + count
        by_reason[reason] = by_reason.get(reason, 0) + count
    return {"status": by_status, "reason": by_reason}

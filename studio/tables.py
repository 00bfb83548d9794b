"""Tables whose every cell reads whole: each column as wide as its widest text, measured with the grid's own font;
where the columns together are wider than the page, the text columns wrapped onto taller rows; where even that does
not fit (headers that are wider together than the page: the grid never wraps a header), a static table.

``st.dataframe`` draws its cells on a canvas and cuts whatever does not fit its column (a fixed width, or a width
fitted to a sample of its first rows); nothing on the page then says that text is missing. :func:`show` sizes the
columns from the text they hold instead, so that no page keeps pixel widths of its own. The widths are measured with
the Source Sans font that Streamlit ships (the font the grid draws in), at the grid's sizes.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import streamlit as st

#: The grid's font size (px), its cells' horizontal and vertical padding, and its line height (glide-data-grid's
#: theme as Streamlit sets it).
FONT_PX = 14
PADDING_PX = 8
VERTICAL_PADDING_PX = 3
LINE_HEIGHT = 1.4
#: Width (px) inside a table's border in the main column of a 1440 px wide window, and inside an expander or a
#: bordered container there.
MAIN_PX = 976
BOXED_PX = 940
#: The tick column of a selectable table.
SELECTION_PX = 38
#: Streamlit wraps a text cell only when its rows are taller than 4 rem.
WRAPPING_ROW_PX = 65
#: The narrowest a wrapped text column is made (px), and the most lines a wrapped row holds before the table is
#: drawn static instead (taller rows hide most of the grid's rows).
MIN_WRAPPED_PX = 120
MAX_LINES = 4


@lru_cache(maxsize=2)
def _font(weight: int):
    """Streamlit's Source Sans (a variable font) at ``weight``, or None where it cannot be read."""
    from PIL import ImageFont

    media = Path(st.__file__).parent / "static" / "static" / "media"
    for path in sorted(media.glob("SourceSansVF-Upright*.woff2")):
        try:
            font = ImageFont.truetype(str(path), FONT_PX)
            font.set_variation_by_axes([weight])
            return font
        except (OSError, ValueError):
            continue
    return None


#: One font object serves every session's thread, and a FreeType face is not to be used from two threads at once.
_LAYOUT = threading.Lock()


@lru_cache(maxsize=20_000)
def text_width(text: str, bold: bool = False) -> float:
    """Width (px) of ``text`` in the grid's font (its headers are semi-bold): its widest line."""
    if "\n" in text:
        return max(text_width(line, bold) for line in text.split("\n"))
    font = _font(600 if bold else 400)
    if font is not None:
        try:
            with _LAYOUT:
                return float(font.getlength(text))
        except (OSError, RuntimeError, ValueError):  # a text the layout engine refuses
            pass
    return len(text) * FONT_PX * 0.62  # a generous average, wider than any Source Sans letter but W and M


def _lines(text: str, room: float) -> int:
    """Lines ``text`` takes when wrapped at spaces into ``room`` px, as the grid wraps it."""
    count = 0
    for paragraph in text.split("\n"):
        count += 1
        line = ""
        for word in paragraph.split(" "):
            candidate = f"{line} {word}" if line else word
            if line and text_width(candidate) > room:
                count += 1
                line = word
            else:
                line = candidate
    return count


def _number_format(config: Mapping[str, Any] | None) -> str | None:
    options = (config or {}).get("type_config") or {}
    fmt = options.get("format")
    return fmt if isinstance(fmt, str) and "%" in fmt else None


def _shown(value: Any, fmt: str | None) -> str:
    """The text the grid draws for ``value`` (numbers at their column's printf format, else at up to 4 decimals)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "None"
    if isinstance(value, (bool, np.bool_)):
        return ""  # a check box
    if isinstance(value, (int, np.integer)) and not fmt:
        return str(value)
    if isinstance(value, (float, np.floating, int, np.integer)):
        if fmt:
            try:
                return fmt % value
            except (TypeError, ValueError):
                pass
        return f"{float(value):.4f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _is_text(column: pd.Series) -> bool:
    return all(isinstance(v, str) for v in column.dropna().tolist())


def _wrappable(texts: Iterable[str], room: float) -> bool:
    """Text with spaces whose longest word fits ``room``: it can be wrapped."""
    texts = [t for t in texts if t]
    return bool(texts) and any(" " in t for t in texts) and all(
        text_width(word) <= room for t in texts for word in t.split())


@dataclass
class Layout:
    """How a table shows every cell whole: its column configuration (with pixel widths) and row height (None: one
    line) in the grid, or ``static``: as a static table, whose headers and cells wrap (the grid's headers never do)."""

    column_config: dict[str, Any]
    row_height: int | None = None
    static: bool = False


def layout(frame: pd.DataFrame, column_config: Mapping[str, Any] | None = None, *, room: float = MAIN_PX,
           column_order: Iterable[str] | None = None, selectable: bool = False, index: bool = False) -> Layout:
    """Each column as wide as its widest text or header; where they do not fit ``room`` px together, the text
    columns share what the others leave and wrap onto rows of at most :data:`MAX_LINES` lines; where even that
    does not fit, a static table."""
    config = {name: dict(c) if isinstance(c, Mapping) else c for name, c in (column_config or {}).items()}
    names = [c for c in (column_order if column_order is not None else frame.columns) if c in frame.columns]
    texts, need, header = {}, {}, {}
    for name in names:
        own = config.get(name) if isinstance(config.get(name), Mapping) else {}
        texts[name] = [_shown(v, _number_format(own)) for v in frame[name].tolist()]
        header[name] = math.ceil(text_width(own.get("label") or str(name), bold=True) + 4 + 2 * PADDING_PX + 2)
        need[name] = max([math.ceil(text_width(t) + 2 * PADDING_PX + 2) for t in texts[name]] + [header[name]])
    if index:
        room -= max([text_width(str(i)) for i in frame.index] + [0]) + 2 * PADDING_PX + 2
    if selectable:
        room -= SELECTION_PX
    widths, row_height, static = dict(need), None, False
    if sum(need.values()) > room:
        floor = {n: max(MIN_WRAPPED_PX, header[n]) for n in names}
        wrapped = [n for n in names if need[n] > floor[n] and _is_text(frame[n])
                   and _wrappable(texts[n], floor[n] - 2 * PADDING_PX)]
        left = room - sum(need[n] for n in names if n not in wrapped)
        if wrapped and left >= sum(floor[n] for n in wrapped):
            # the text columns share what is left: the narrow ones whole, the widest cut to one common width
            share, rest = {}, sorted(wrapped, key=need.get)
            while rest:
                cap = math.floor((left - sum(share.values())) / len(rest))
                if need[rest[0]] > cap:
                    share.update({n: max(cap, floor[n]) for n in rest})
                    break
                narrow = rest.pop(0)
                share[narrow] = need[narrow]
            if sum(share.values()) <= left:
                widths.update(share)
        static = sum(widths.values()) > room and not selectable
    # text that wraps (narrowed columns, or lines of its own) takes rows tall enough for its most lines
    lines = max([_lines(t, widths[n] - 2 * PADDING_PX) for n in names if _is_text(frame[n]) for t in texts[n] if t]
                + [1])
    if lines > MAX_LINES:
        static = static or not selectable  # a table whose rows are picked stays a grid, however tall its rows
        lines = min(lines, MAX_LINES * 3)
    if lines > 1:
        row_height = max(WRAPPING_ROW_PX,
                         math.ceil(FONT_PX * (1 + LINE_HEIGHT * (lines - 1)) + 4 * VERTICAL_PADDING_PX))
    for name in names:
        own = config.get(name)
        own = dict(own) if isinstance(own, Mapping) else {}
        own["width"] = int(widths[name])
        config[name] = own
    return Layout(config, row_height, static)


def fitted(frame: pd.DataFrame, column_config: Mapping[str, Any] | None = None,
           **where) -> tuple[dict[str, Any], int | None]:
    """The grid's column configuration and row height of :func:`layout` (for ``st.data_editor``, always a grid)."""
    shown = layout(frame, column_config, **where)
    return shown.column_config, shown.row_height


def _static(frame: pd.DataFrame, shown: Layout, column_order: list[str] | None, hide_index: bool):
    """``frame`` as a static table shows it: the grid's number formats and labels, no index unless asked for."""
    names = [c for c in (column_order if column_order is not None else frame.columns) if c in frame.columns]
    labels = {n: (shown.column_config.get(n) or {}).get("label") or n for n in names}
    formats = {n: _number_format(shown.column_config.get(n)) for n in names}
    text = pd.DataFrame({labels[n]: ["" if _shown(v, None) == "None" else _shown(v, formats[n])
                                     for v in frame[n].tolist()] for n in names}, index=frame.index)
    style = text.style
    return style.hide(axis="index") if hide_index else style


def show(frame: pd.DataFrame, *, key: str | None = None, column_config: Mapping[str, Any] | None = None,
         room: float = MAIN_PX, column_order: Iterable[str] | None = None, hide_index: bool = True, **options):
    """``frame`` with every cell whole (:func:`layout`): ``st.dataframe`` (``options`` go to it), or ``st.table``
    where its columns cannot fit the page in the grid."""
    column_order = list(column_order) if column_order is not None else None
    shown = layout(frame, column_config, room=room, column_order=column_order,
                   selectable=options.get("on_select", "ignore") != "ignore", index=not hide_index)
    if shown.static:
        return st.table(_static(frame, shown, column_order, hide_index))
    if shown.row_height:
        options.setdefault("row_height", shown.row_height)
    return st.dataframe(frame, key=key, hide_index=hide_index, width="stretch", column_config=shown.column_config,
                        column_order=column_order, **options)

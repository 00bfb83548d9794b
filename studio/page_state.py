"""What a page shows is derived from the inputs it shows: the one place a page names which of its results
depend on which inputs, so that changing an input drops (or lets the page recompute) everything that depends on
it, and a table's ticked row is the item the page has open.

Each page calls these once, near its top, with its own dependency table; results are never checked for
staleness where they are drawn.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping, Sequence

import streamlit as st


def _fingerprint(value: Any) -> Hashable:
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


def clear_when_changed(name: str, inputs: Any, derived: Sequence[str]) -> bool:
    """Drop the session keys ``derived`` when ``inputs`` differ from those of the last run that called this with
    ``name``; returns whether they were dropped (False on a page's first run, which has nothing to drop)."""
    memo = f"_inputs_{name}"
    now = _fingerprint(inputs)
    before = st.session_state.get(memo, now)
    st.session_state[memo] = now
    if before == now:
        return False
    for key in derived:
        st.session_state.pop(key, None)
    return True


def keep_current(state_key: str, current: Mapping[str, Hashable], made_from: Callable[[Any], Hashable]) -> list[str]:
    """In the dict ``st.session_state[state_key]`` (item -> result), keep only the results whose inputs
    (``made_from(result)``) are the item's inputs now (``current[item]``); returns the items dropped."""
    results = st.session_state.get(state_key)
    if not results:
        return []
    stale = [k for k, v in results.items() if k not in current or _fingerprint(made_from(v)) != _fingerprint(current[k])]
    if stale:
        st.session_state[state_key] = {k: v for k, v in results.items() if k not in stale}
    return stale


def synced_selection(table_key: str, rows: Sequence[str], open_key: str) -> str | None:
    """A single-row-selection table (``table_key``, one item id per row, in ``rows``) and the picker of the open
    item (``open_key``, rendered after the table) name the same item: a row ticked since the last run opens its
    item; otherwise the table's tick is moved to the open item (none where it is filtered out). Call before
    rendering either; returns the open item."""
    shown_key, synced_key = f"_rows_{table_key}", f"_synced_{table_key}"
    before_rows = st.session_state.get(shown_key) or []
    state = st.session_state.get(table_key)
    ticked = None
    try:
        picked = list(state["selection"]["rows"]) if state is not None else []
    except (KeyError, TypeError):
        picked = []
    if picked and picked[0] < len(before_rows):
        ticked = before_rows[picked[0]]
    if ticked is not None and ticked != st.session_state.get(synced_key):
        st.session_state[open_key] = ticked  # the user ticked a row: it opens
    chosen = st.session_state.get(open_key)
    if chosen not in rows:  # nothing open yet, or filtered out: the first row opens, as the picker would show it
        chosen = rows[0] if len(rows) else None
        st.session_state[open_key] = chosen
    st.session_state[table_key] = {"selection": {"rows": [list(rows).index(chosen)] if chosen is not None else [],
                                                 "columns": []}}
    st.session_state[synced_key] = chosen
    st.session_state[shown_key] = list(rows)
    return chosen

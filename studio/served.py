"""What the studio allows, locally and when served to other people's browsers: one place, no Streamlit.

``make run`` binds the app to 127.0.0.1: one user, on their own machine. ``make serve`` binds it to
every interface and sets ``GRADE_SERVED=1``; so does any ``--server.address`` that is not a loopback
address. Served, the studio treats every browser as a stranger:

* **models**: only the embedded ones, and models inside the folders the operator lists in
  ``GRADE_MODEL_DIRS`` (separated by ``:``); no hub ids, and one message for every refused path,
  whether it exists or not;
* **work per request**: caps on the answer length, the reasoning trace (characters, tokens, steps),
  the generated chain of thought, uploads (bytes; a feature file's rows and decoded size, read from
  its Parquet metadata first) and the rows extracted or trained on; every page that analyses applies
  the same caps (Probes -> Extract checks each labelled row with :func:`check_labelled_row`); a cap
  that bites is said in a message, never applied silently;
* **files**: probes are saved and uploaded into a folder of the user's own (a quota each), the shared
  probes are read-only, names are sanitised and an existing probe is never overwritten silently;
* **errors**: no traceback, no server path; an unexpected error shows a reference that the
  operator finds in the server's log.

Every cap can be changed by the operator with ``GRADE_LIMIT_<NAME>`` (e.g. ``GRADE_LIMIT_TRACE_STEPS=20``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import os
import re
import shutil
import time
import unicodedata
import uuid
from dataclasses import dataclass, fields, replace
from pathlib import Path

from grade.gradients.memory import DEFAULT_STEP_MEMORY_MB
from grade.common.errors import InputError, ModelLoadError

SERVED_ENV = "GRADE_SERVED"
MODEL_DIRS_ENV = "GRADE_MODEL_DIRS"

MB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Per-request caps (every user gets them) and per-user storage quotas."""

    question_chars: int = 4000
    context_chars: int = 16000
    answer_tokens: int = 512  # the Home page's greedy answer
    cot_tokens: int = 512  # a chain of thought generated on the Reasoning trace page
    trace_chars: int = 6000
    trace_tokens: int = 1024
    # Steps cost more the longer the prefix: SmolLM2 on the shared 2-core VM (under load) took 57 s for 12 steps of
    # ~31 tokens, 98 s for 16, 212 s for 20 and did not finish 32 (1,006 tokens) in 580 s (bench/RESULTS.md section 13).
    trace_steps: int = 20
    # A trace's analysis stops with a message (steps done of all) past this many seconds; 0: no time bound.
    trace_seconds: float = 300
    step_memory_mb: int = DEFAULT_STEP_MEMORY_MB  # Δ a step-wise analysis holds at once (grade.analyze's bound)
    # Past this estimate an exact analysis runs layer by layer (grade.analyze's memory_mb): a cap-size Qwen request
    # then peaks under 3 GB above the loaded model instead of 16.9 GB (bench/RESULTS.md section 14).
    analysis_memory_mb: int = 1024
    upload_mb: int = 200  # one uploaded file
    upload_rows: int = 1_000_000  # rows of an uploaded feature file, read from its Parquet metadata first
    upload_decoded_mb: int = 4000  # an uploaded feature file decoded (Parquet metadata), before it is read
    extract_rows: int = 400  # labelled questions turned into features in the app
    train_rows: int = 50000
    user_probes: int = 50  # probes one user may keep (saved + uploaded)
    user_mb: int = 200  # bytes one user may keep
    served_mb: int = 2000  # all users together; the least recently used users' files go first


LOCAL_LIMITS = Limits()
# Served: one analysis of the embedded model on a busy 2-core CPU stays within about a minute
# (a 10-step trace took 165 s there before these caps; 40 steps did not finish in 600 s).
SERVED_LIMITS = Limits(
    question_chars=2000, context_chars=6000, answer_tokens=128, cot_tokens=256, trace_chars=2000,
    trace_tokens=384, trace_steps=12, trace_seconds=120, upload_mb=8, upload_rows=20_000, upload_decoded_mb=200, extract_rows=50, train_rows=5000, user_probes=10, user_mb=20,
    served_mb=500,
)


@dataclass(frozen=True)
class Settings:
    served: bool
    limits: Limits
    model_dirs: tuple[Path, ...]  # allow-listed model folders (served mode only)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.1, ::1, localhost (and None / "", which the caller treats as unset)."""
    if not address or address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class SettingError(InputError, ValueError):
    """An environment variable that does not hold the number it must (a ValueError too, as callers expect of a
    bad setting)."""


def env_number(name: str, default: float, *, whole: bool = False, minimum: float = 0) -> float:
    """The number in the environment variable ``name``, ``default`` when it is unset or blank; anything that is
    not a finite number (a whole one where ``whole``) of at least ``minimum`` raises one line."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise SettingError(f"{name}={raw!r} is not a {'whole number' if whole else 'number'}") from None
    if value < minimum:
        raise SettingError(f"{name}={raw!r} must be at least {minimum:g}")
    return value


def _limits_from_env(base: Limits) -> Limits:
    changes = {}
    for f in fields(Limits):
        name = f"GRADE_LIMIT_{f.name.upper()}"
        if os.environ.get(name, "").strip():
            changes[f.name] = env_number(name, getattr(base, f.name), whole=True, minimum=1)
    return replace(base, **changes)


def settings(server_address: str | None = None) -> Settings:
    """The mode and caps, from the environment (and Streamlit's ``server.address`` when given).

    Served when ``GRADE_SERVED`` is on, or when the server listens on an address other than the
    loopback one: serving to others is an explicit choice, and choosing it brings the caps.
    """
    served = _truthy(os.environ.get(SERVED_ENV)) or (bool(server_address) and not is_loopback(server_address))
    limits = _limits_from_env(SERVED_LIMITS if served else LOCAL_LIMITS)
    folders = tuple(_absolute(Path(p).expanduser()) for p in os.environ.get(MODEL_DIRS_ENV, "").split(os.pathsep)
                    if p.strip())
    return Settings(served=served, limits=limits, model_dirs=folders)


# ------------------------------------------------------------------------------------------- models


def _absolute(path: Path) -> Path:
    """``path`` made absolute with every ``..`` removed; symlinks are kept as they are (only the
    operator can put one into an allowed folder, and may want to)."""
    return Path(os.path.normpath(os.path.abspath(path)))


def check_model_source(source: str, config: Settings, embedded: tuple[str, ...]) -> str:
    """The model reference to load, or ModelLoadError when this server does not load it.

    Locally everything :func:`grade.load_model` takes is allowed. Served, only ``embedded`` names and
    folders or ``.gguf`` files inside ``config.model_dirs``; the refusal is the same sentence whether
    the path exists or not, so the message tells a stranger nothing about the server's files.
    """
    source = (source or "").strip()
    if not config.served or source in embedded:
        return source
    refusal = ModelLoadError(
        "this server loads only the embedded models"
        + (" and the models its operator has put in the allowed folders" if config.model_dirs else "")
        + f" ({', '.join(embedded)}" + (", or a folder name from the allowed folders)" if config.model_dirs else ")")
    )
    if not source or not config.model_dirs or "\x00" in source:
        raise refusal
    candidates = []
    path = Path(source).expanduser()
    if path.is_absolute():
        candidates.append(path)
    else:  # a name relative to an allowed folder
        candidates += [folder / path for folder in config.model_dirs]
    for candidate in candidates:
        path = _absolute(candidate)  # '..' is gone before the check: no way out of an allowed folder
        if not any(path != folder and path.is_relative_to(folder) for folder in config.model_dirs):
            continue
        try:
            if (path.is_dir() and (path / "config.json").is_file()) or (path.suffix == ".gguf" and path.is_file()):
                return str(path)
        except OSError:
            continue
    raise refusal


# ---------------------------------------------------------------------------------- request caps


def _cap(value: int, cap: int, what: str, unit: str) -> int:
    if value > cap:
        raise InputError(f"{what} is {value:,} {unit}, over this studio's limit of {cap:,}.")
    return value


def check_answer_tokens(tokens: int, limits: Limits) -> int:
    if tokens < 1:
        raise InputError("The answer length must be at least 1 token.")
    return _cap(int(tokens), limits.answer_tokens, "The answer length", "tokens")


def check_cot_tokens(tokens: int, limits: Limits) -> int:
    if tokens < 1:
        raise InputError("The number of tokens to generate must be at least 1.")
    return _cap(int(tokens), limits.cot_tokens, "The number of tokens to generate", "tokens")


def check_trace(n_chars: int, n_tokens: int, n_steps: int, limits: Limits) -> None:
    """A reasoning trace within the caps: each step costs a backward pass and a spectrum per layer."""
    _cap(n_chars, limits.trace_chars, "The reasoning trace", "characters")
    _cap(n_tokens, limits.trace_tokens, "The reasoning trace", "tokens")
    if n_steps > limits.trace_steps:
        raise InputError(f"The reasoning trace has {n_steps} steps; this studio analyses at most {limits.trace_steps} "
                         "(each step costs a backward pass). Shorten it or merge steps.")


def check_question(question: str, limits: Limits, context: str | None = None) -> None:
    """A question (and its document) within the character caps: counted before anything is tokenised."""
    _cap(len((question or "").strip()), limits.question_chars, "The question", "characters")
    _cap(len((context or "").strip()), limits.context_chars, "The document", "characters")


def check_trace_text(question: str, response: str, tokenizer, limits: Limits) -> list[int]:
    """Every cap of a reasoning trace, checked before any model reads it (the step verifier's pass, the queued
    analysis): the question's and the trace's characters first, so that an over-long paste is refused without
    being tokenised; then its tokens and steps with ``tokenizer``. Returns the trace's token ids."""
    from grade.gradients.losses import steps_for_response

    check_question(question, limits)
    text = (response or "").strip()
    if len(text) > limits.trace_chars:
        check_trace(len(text), 0, 0, limits)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    check_trace(len(text), len(ids), len(steps_for_response(tokenizer, ids, 0, text)), limits)
    return ids


def check_upload(name: str, size: int, limits: Limits) -> None:
    if size > limits.upload_mb * MB:
        raise InputError(f"{safe_display_name(name)} is {size / MB:.1f} MB; this studio accepts files of at most "
                         f"{limits.upload_mb} MB.")


#: Files one probe upload may hold: its weights and its metadata.
PROBE_UPLOAD_FILES = 2


def check_probe_upload_count(count: int) -> None:
    if count > PROBE_UPLOAD_FILES:
        raise InputError(f"{count} files were uploaded; a probe is {PROBE_UPLOAD_FILES} files, one .safetensors "
                         "and one .json. Remove the others.")


def check_labelled_row(row: dict, tokenizer, loss: str, limits: Limits) -> None:
    """A labelled row (Probes -> Extract) within the caps every analysing page applies: the question
    and document lengths (Home), and under ``pos`` the response it is scored on: as a reasoning trace
    (characters, tokens, steps: each step is a backward pass) where the row's task is scored step by
    step, as an answer (tokens) otherwise; the length of an answer the model would generate for it.
    Characters are counted before anything is tokenised."""
    from grade.batch.features import given_response
    from grade.tasks.tasks import answer_format, scored_stepwise

    question, context = str(row.get("question") or ""), str(row.get("context") or "")
    _cap(len(question), limits.question_chars, "The question", "characters")
    _cap(len(context), limits.context_chars, "The document", "characters")
    if loss != "pos":
        return
    task = str(row.get("task") or "qa")
    response = given_response(row)
    if response is None:  # the model generates the answer it is scored on
        try:
            default = answer_format(task).max_new_tokens
        except Exception:  # an unknown task: the row's own length, else the short-answer one
            default = answer_format("qa").max_new_tokens
        length = row.get("max_new_tokens")
        check_answer_tokens(length if isinstance(length, int) and not isinstance(length, bool) and length > 0
                            else default, limits)
        return
    text = str(response).strip()
    if scored_stepwise(task):
        from grade.gradients.losses import steps_for_response

        if len(text) > limits.trace_chars:  # before tokenising a text that may be huge
            check_trace(len(text), 0, 0, limits)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        check_trace(len(text), len(ids), len(steps_for_response(tokenizer, ids, 0, text)), limits)
        return
    _cap(len(text), limits.trace_chars, "The response", "characters")
    _cap(len(tokenizer(text, add_special_tokens=False)["input_ids"]), limits.answer_tokens, "The response", "tokens")


def check_parquet_upload(data: bytes, name: str, limits: Limits, columns: tuple[str, ...] = ()) -> None:
    """Refuse an uploaded Parquet file from its metadata alone, before a row is decoded: more rows than
    ``upload_rows``, more decoded bytes than ``upload_decoded_mb`` or than the package's caps allow
    (:func:`grade.common.bounded.check_parquet`), or a missing column of ``columns``. (A few hundred KB of
    Parquet can hold tens of millions of rows.)"""
    import io

    from grade.common.bounded import check_parquet

    shown = safe_display_name(name)
    parquet = check_parquet(io.BytesIO(data), shown, stored=len(data), max_rows=limits.upload_rows,
                            max_decoded_mb=limits.upload_decoded_mb)
    names = set(parquet.schema_arrow.names)
    missing = [c for c in columns if c not in names]
    if missing:
        raise InputError(f"The features in {shown} lack the column(s) {', '.join(missing)}: not features written by "
                         "`grade extract`")


# ----------------------------------------------------------------------------------------- probes


def _name_char(char: str) -> bool:
    """A character a probe's file name keeps: a letter or combining mark of any script, a decimal digit, ``_ . -``."""
    return char in "_.-" or unicodedata.category(char)[0] in "LM" or unicodedata.category(char) == "Nd"


def safe_probe_name(text: str) -> str:
    """A file name for a probe from what the user typed, NFKC-normalised: letters of any script (``проба-1`` stays
    ``проба-1``), digits, ``_ - .``, every other run of characters one ``-``; no leading dot (so never ``.``, ``..``
    or a hidden file), no folder, at most 80 characters and 200 UTF-8 bytes (file systems allow 255)."""
    typed = unicodedata.normalize("NFKC", Path(str(text or "")).name.strip())
    kept = ("" if unicodedata.category(c) == "Cf" else c if _name_char(c) else "-" for c in typed)  # U+200B: dropped
    name = re.sub(r"-+", "-", "".join(kept))
    name = name.lstrip(".-")[:80]
    while len(name.encode("utf-8")) > 200:
        name = name[:-1]
    name = name.rstrip(".-")
    for suffix in (".safetensors", ".json"):
        name = name.removesuffix(suffix)
    if not name or not any(unicodedata.category(c)[0] == "L" or unicodedata.category(c) == "Nd" for c in name):
        raise InputError("Give the probe a name with at least one letter or digit.")
    return name


def safe_display_name(text: str) -> str:
    """A user-given file name as it may be shown: no folders, printable, short."""
    name = Path(str(text or "")).name
    return re.sub(r"[^\w .()+-]", "_", name)[:80] or "file"


def user_folder(root: Path, user_key: str) -> Path:
    """The folder of one user's files under ``root``: a hash of the user key, so that a name, an
    e-mail address or a session id never becomes a path."""
    return root / hashlib.sha256(user_key.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _files(folder: Path) -> list[Path]:
    return [f for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []


def _probe_files(folder: Path) -> list[Path]:
    return [f for f in _files(folder) if f.suffix == ".safetensors"]


def check_quota(folder: Path, new_bytes: int, limits: Limits, *, replacing: Path | None = None) -> None:
    """Refuse a write that would take one user past their probe count or bytes."""
    files = _files(folder)
    probes = [f for f in _probe_files(folder) if f != replacing]
    used = sum(f.stat().st_size for f in files if replacing is None or f.with_suffix("") != replacing.with_suffix(""))
    if len(probes) + 1 > limits.user_probes:
        raise InputError(f"You keep {len(probes)} probes here, the most this studio allows; delete one first.")
    if used + new_bytes > limits.user_mb * MB:
        raise InputError(f"This would take your files to {(used + new_bytes) / MB:.1f} MB; this studio allows "
                         f"{limits.user_mb} MB per user. Delete a probe first.")


def prune_users(root: Path, limits: Limits, keep: Path) -> list[Path]:
    """Remove whole user folders, least recently used first, while ``root`` holds more than
    ``limits.served_mb``; ``keep`` (the current user's) stays. Returns what was removed."""
    if not root.is_dir():
        return []
    users = [(max([f.stat().st_mtime for f in _files(u)] + [u.stat().st_mtime]), u) for u in root.iterdir() if u.is_dir()]
    total = sum(f.stat().st_size for _, u in users for f in _files(u))
    removed = []
    for _, folder in sorted(users):
        if total <= limits.served_mb * MB:
            break
        if folder == keep:
            continue
        total -= sum(f.stat().st_size for f in _files(folder))
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def save_probe(probe, folder: Path, name: str, *, replace_existing: bool = False,
               quota: tuple[Path, Limits] | None = None) -> Path:
    """Save ``probe`` as ``folder/<safe name>`` atomically; an existing probe of that name is replaced
    only when asked. ``quota``: (the user's folder, limits) to check the user's storage against.
    Returns the weights path."""
    from grade.verdict.probe import probe_paths

    name = safe_probe_name(name)
    weights, meta = probe_paths(folder / name)
    exists = weights.exists() or meta.exists()
    if exists and not replace_existing:
        raise InputError(f"A probe named {name!r} exists already; choose another name, or tick 'Replace'.")
    if quota is not None:
        size = sum(t.numel() * t.element_size() for t in probe.tensors().values()) + 64 * 1024
        check_quota(quota[0], size, quota[1], replacing=weights if exists else None)
    folder.mkdir(parents=True, exist_ok=True)
    probe.save(folder / name)
    return weights


def upload_path(weights: bytes, metadata: bytes, name: str, folder: Path) -> Path:
    """The weights path an uploaded probe pair is stored under: ``folder/<content hash>/<safe name>.safetensors``."""
    from grade.verdict.probe import probe_paths

    digest = hashlib.sha1(weights + b"\0" + metadata).hexdigest()[:16]
    try:
        stem = safe_probe_name(Path(str(name)).stem)
    except InputError:
        stem = "probe"
    return probe_paths(folder / digest / stem)[0]


def store_upload(weights: bytes, metadata: bytes, name: str, folder: Path, *,
                 quota: tuple[Path, Limits] | None = None) -> Path:
    """Write an uploaded probe pair under ``folder/<content hash>/`` atomically (within ``quota``, see
    :func:`save_probe`) and return its weights path; the same upload twice is stored once."""
    from grade.common.io import atomic_paths
    from grade.verdict.probe import probe_paths

    weights_path, meta_path = probe_paths(upload_path(weights, metadata, name, folder))
    if weights_path.exists() and meta_path.exists():
        return weights_path
    if quota is not None:
        check_quota(quota[0], len(weights) + len(metadata), quota[1])
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_paths(weights_path, meta_path) as (w_tmp, m_tmp):
        w_tmp.write_bytes(weights)
        m_tmp.write_bytes(metadata)
    return weights_path


def is_inside(path: Path, folders: list[Path]) -> bool:
    """Whether ``path`` (symlinks followed) lies inside one of ``folders``."""
    try:
        resolved = Path(path).resolve()
    except (OSError, RuntimeError):
        return False
    return any(resolved.is_relative_to(Path(f).resolve()) for f in folders)


# ------------------------------------------------------------------------------------------ errors

_PATH = re.compile(r"(?<![\w.:/])(?:~|[A-Za-z]:)?(?:/|\\\\)[^\s'\"()\[\],;:]*")


def redact_paths(message: str) -> str:
    """``message`` with every absolute path cut to its last part (``/home/x/y/probe.json`` -> ``probe.json``)."""

    def last(match: re.Match) -> str:
        parts = [p for p in re.split(r"[/\\]", match.group(0)) if p and p != "~" and not p.endswith(":")]
        return parts[-1] if parts else "…"

    return _PATH.sub(last, message)


def error_reference() -> str:
    """A short reference shown to a remote user instead of the details, and logged with them."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"

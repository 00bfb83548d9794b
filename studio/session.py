"""Streamlit glue shared by the pages: the sidebar model picker, cached resources, the active probe,
error display and downloads.

Results live in ``st.session_state`` (one per browser session); only the model registry and loaded
probes are shared, through ``st.cache_resource``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import pandas as pd
import streamlit as st

import grade
from grade.common.errors import GradeError, ProbeError
from grade.models.generation import answer_engine

from . import loading
from . import served as served_mode
from .analysis_cache import AnalysisCache
from .resources import (
    PROBES_DIR,
    REFERENCE_FEATURES,
    ModelRegistry,
    ModelSpec,
    ProbeInfo,
    DETECTORS_DIR,
    default_probe,
    detectors_version,
    list_probes,
    load_detectors,
    load_probe,
    probe_metadata_path,
    read_probe_info,
    shared_registry,
    user_data_dir,
)
from .queue import AnalysisQueue, shared_queue

log = logging.getLogger("grade.studio")
if not log.handlers:  # the operator's log (the server's stderr): error references and released sessions
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)

OTHER_MODEL = "__other__"
DTYPES = ("auto", "float32", "bfloat16", "float16")

# Session-state keys (one place, so pages agree on them).
ANALYSIS = "analysis"  # studio.workflows.QuestionAnalysis of the last Home analysis
PINNED = "pinned_analysis"  # a Home result kept to compare the next question with (Home, Spectra)
PROBE_PATH = "probe_path"  # str path of the probe the user picked (None: the default for the model)

# Widgets whose value should survive a visit to another page take **KEEP (Streamlit >= 1.67).
KEEP = {"persist_state": "session"}


# ------------------------------------------------------------------------------------ served mode


@functools.lru_cache(maxsize=1)
def _settings(address: str | None) -> served_mode.Settings:
    return served_mode.settings(address)


def config() -> served_mode.Settings:
    """Local or served, and the caps that go with it (:mod:`studio.served`), read once per process."""
    return _settings(st.get_option("server.address"))


def limits() -> served_mode.Limits:
    return config().limits


def apply_served_options() -> None:
    """Served: Streamlit itself shows no error details either (tracebacks name server paths)."""
    if config().served:
        st.set_option("client.showErrorDetails", "none")


def user_key() -> str:
    """Who this browser is: the logged-in user where Streamlit authentication is configured, else this
    browser session (its files then last as long as the session, or until the storage cap prunes them)."""
    try:
        if st.user.is_logged_in:
            return f"user:{st.user.get('email') or st.user.get('sub')}"
    except Exception:  # no authentication configured
        pass
    # A random id kept in this session's server-side state (no widget writes this key).
    return "session:" + st.session_state.setdefault("_grade_user_id", uuid.uuid4().hex)


def served_root() -> Path:
    return user_data_dir() / "served-users"


def user_root() -> Path:
    """This user's own folder: served, one per user (hashed key); locally, the one user's data folder."""
    if config().served:
        return served_mode.user_folder(served_root(), user_key())
    return user_data_dir()


def own_probe_folder() -> Path:
    """Where this user's trained probes are saved."""
    return user_root() / "probes"


def upload_folder() -> Path:
    return user_root() / ("uploads" if config().served else "uploaded-probes")


def quota() -> tuple[Path, served_mode.Limits] | None:
    """(folder, limits) that this user's writes are checked against; None locally (no quota)."""
    return (user_root(), limits()) if config().served else None


def probe_folders() -> list[Path]:
    """Folders whose probes this user may list and use: the shipped ones and their own."""
    return [PROBES_DIR, user_root()]


def after_user_write() -> None:
    """Keep all served users' files within the overall cap (least recently used users go first)."""
    if config().served:
        served_mode.prune_users(served_root(), limits(), keep=user_root())


# ------------------------------------------------------------------------------- shared resources


def model_registry() -> ModelRegistry:
    """The process's one model registry (:func:`studio.resources.shared_registry`, created under a lock)."""
    return shared_registry()


def verifier_reader(lm: grade.LoadedModel) -> grade.LoadedModel | None:
    """The model that reads traces of ``lm`` for the step verifier (:func:`grade.steps.verifier.load_reader`):
    ``lm`` itself where it is the reader, else the reader from the shared model registry (loaded once for every
    session); None where no verifier is shipped."""
    from grade.steps.verifier import load_reader

    return load_reader(lm, loader=lambda name, device, dtype: model_registry().get(ModelSpec(name, device, dtype)))


def ray_backend():
    """The Ray Serve backend named by ``GRADE_BACKEND`` (:mod:`studio.ray_serve`), None to analyse in this process."""
    from .ray_serve import shared_backend

    return shared_backend()


def analysis_queue() -> AnalysisQueue:
    """The process's queue of analyses (:mod:`studio.queue`): one bounded queue per model, shared by all sessions."""
    return shared_queue()


def require_router() -> None:
    """Run a page only under app.py's router (first line of every page).

    With a ``pages/`` folder beside app.py, Streamlit routes by that folder, running ``pages/<name>.py``
    without app.py, until some session's run of app.py has called ``st.navigation``: the first request of a fresh
    server for ``/traces`` would get the Traces page, which app.py does not offer when served (it reads server
    paths), without app.py's served options either. Such a run switches Streamlit to app.py's navigation and starts
    again, through app.py. (``AppTest`` runs pages that way on purpose, by the file it was given: left alone.)"""
    from streamlit.runtime.pages_manager import PagesManager

    from .session_end import served_by_streamlit

    if PagesManager.uses_pages_directory and served_by_streamlit():
        PagesManager.uses_pages_directory = False  # what st.navigation sets, process-wide
        st.rerun()


def session_ends():
    """The process's :class:`studio.session_end.SessionEnds` (its sweeper started once), this session noted.
    A session counts as ended once Streamlit can no longer resume it (``server.disconnectedSessionTTL``)."""
    from . import session_end

    sweep = served_mode.env_number("GRADE_SESSION_SWEEP_S", session_end.SWEEP_S, minimum=0.1)
    grace = float(st.get_option("server.disconnectedSessionTTL"))
    return session_end.watch(sweep, grace, analysis_queue().cancel)


@st.cache_resource(show_spinner=False)
def analysis_cache() -> AnalysisCache:
    """Home's analyses, shared by all sessions of this process and bounded by
    ``GRADE_ANALYSIS_CACHE_ENTRIES`` / ``GRADE_ANALYSIS_CACHE_MB`` (:mod:`studio.analysis_cache`)."""
    return AnalysisCache.from_environment()


def _file_version(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return 0, 0
    return stat.st_mtime_ns, stat.st_size


def analysis_key(lm: grade.LoadedModel, probe_info: ProbeInfo | None, request: dict, detectors_stamp: int,
                 shared: bool = True) -> tuple:
    """What an analysis depends on: the model (as picked: source, device, dtype), the question and document,
    the settings (task, answer length, the answer-length cap), the probe file (path and version) and the
    detectors' files. Equal keys give the same analysis.

    Served, a question that is not ``shared`` (one of Home's examples) is cached for its user only, so that
    nobody learns from a cached hint what someone else asked."""
    spec = st.session_state.get("model_spec")
    probe = None
    if probe_info is not None:
        path = Path(probe_info.path)
        probe = (str(path), _file_version(path), _file_version(probe_metadata_path(path)))
    context = (request.get("context") or "").strip() or None
    owner = user_key() if config().served and not shared else None
    return (
        owner, (spec.source, spec.device, spec.dtype) if spec is not None else None, lm.name,
        (request.get("question") or "").strip(), context, request.get("task", "qa"),
        int(request.get("max_new_tokens") or 0), limits().answer_tokens, probe, detectors_stamp,
    )


@st.cache_resource(show_spinner=False, max_entries=16)
def _probe_cached(path: str, mtime_ns: int, size: int):
    return load_probe(path)  # a ProbeError is raised, never cached


def cached_probe(path: str | Path):
    """Load a probe once per file version (path, modification time, size)."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        raise ProbeError(f"probe file {path} does not exist") from None
    stat_json = probe_metadata_path(path).stat().st_mtime_ns if probe_metadata_path(path).exists() else 0
    return _probe_cached(str(path), stat.st_mtime_ns + stat_json, stat.st_size)


@st.cache_resource(show_spinner=False, max_entries=4)
def _read_features(path: str, version: int) -> pd.DataFrame:
    # cache_resource, not cache_data: the frame is read-only here and large (hidden states), so one
    # shared copy beats a pickled copy per session.
    from grade.batch.features import load_features

    return load_features(path)


def _version(path: Path) -> int:
    files = [path] if path.is_file() else sorted(path.glob("*.parquet"))
    return sum(f.stat().st_mtime_ns + f.stat().st_size for f in files)


def reference_frame(path: Path = REFERENCE_FEATURES) -> pd.DataFrame | None:
    """The shipped reference feature set (a Parquet file or feature-store folder), or None if absent."""
    if not path.exists():
        return None
    try:
        return _read_features(str(path), _version(path))
    except (GradeError, OSError, ValueError) as exc:
        st.warning(f"The reference feature set {path.name} could not be read: {user_message(exc)}")
        return None


# ---------------------------------------------------------------------------------- model picker


def _device_options() -> list[str]:
    import torch

    options = ["cpu"]
    if torch.cuda.is_available():
        options += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return options


#: The model the picker starts on: ``$GRADE_START_MODEL`` (an embedded model's name; ``make run`` sets it),
#: else the package's default. Tests leave it unset and get the small default model.
START_MODEL_VARIABLE = "GRADE_START_MODEL"


def start_model() -> str:
    wanted = os.environ.get(START_MODEL_VARIABLE, "").strip()
    if wanted and wanted not in grade.EMBEDDED_MODELS:
        st.warning(f"{START_MODEL_VARIABLE}={wanted!r} is not an embedded model "
                   f"({', '.join(grade.EMBEDDED_MODELS)}); starting on {grade.DEFAULT_MODEL}.")
    return wanted if wanted in grade.EMBEDDED_MODELS else grade.DEFAULT_MODEL


def model_picker() -> ModelSpec | None:
    """Sidebar widgets; returns what the user asked for (None while a custom path is still empty)."""
    with st.sidebar:
        st.subheader("Model")
        names = list(grade.EMBEDDED_MODELS) + [OTHER_MODEL]
        choice = st.selectbox(
            "Model", names, key="model_choice", index=names.index(start_model()),
            format_func=lambda n: f"{n} (embedded)" if n in grade.EMBEDDED_MODELS
            else "Other: folder, .gguf file or hub id",
            help="The embedded models work offline. A hub id needs a network or a filled Hugging Face cache.",
        )
        source = choice
        if choice in grade.EMBEDDED_MODELS:
            st.caption(grade.EMBEDDED_MODELS[choice].description)
        if choice == OTHER_MODEL:
            if config().served:
                source = st.text_input("Model folder or .gguf file (in the folders this server allows)",
                                       key="model_path", placeholder="name of a model folder").strip()
            else:
                source = st.text_input("Folder, .gguf file or hub id", key="model_path",
                                       placeholder="/path/to/model or org/name").strip()
        col1, col2 = st.columns(2)
        device = col1.selectbox("Device", _device_options(), key="model_device")
        if config().served:  # one dtype per model: sessions picking others would each hold a copy
            dtype = "auto"
            col2.selectbox("dtype", ["auto"], key="model_dtype_served", disabled=True,
                           help="This server loads every model in one dtype (float32 on CPU, bfloat16 on a GPU), "
                                "so that all users share one copy")
        else:
            dtype = col2.selectbox("dtype", DTYPES, key="model_dtype",
                                   help="auto: float32 on CPU, bfloat16 on a GPU")
    presentation_toggle()
    if not source:
        return None
    return ModelSpec(source=source, device=device, dtype=dtype)


def load_current_model() -> grade.LoadedModel | None:
    """Load (or fetch from the shared registry) the sidebar's model, showing progress and errors in the sidebar."""
    spec = model_picker()
    if spec is None:
        st.sidebar.info("Type a model folder, a .gguf file or a hub id.")
        return None
    registry = model_registry()
    try:
        allowed = served_mode.check_model_source(spec.source, config(), tuple(grade.EMBEDDED_MODELS))
        spec = ModelSpec(source=allowed, device=spec.device, dtype=spec.dtype)
        if spec in registry.loaded():
            lm = registry.get(spec)
        else:
            name = shown_path(spec.source)
            with loading.model_loading(spec.source, name) as shown, \
                    st.sidebar.status(f"Loading {name} ...", expanded=True) as status:
                lm = registry.get(spec, progress=lambda line: (status.write(user_text(line)), shown(user_text(line))))
                status.update(label=f"Loaded {name}", state="complete", expanded=False)
    except GradeError as exc:
        message = user_message(exc)
        st.sidebar.error(f"Model failed to load: {message}")
        st.session_state["model_error"] = message
        st.session_state["model_spec"] = None
        return None
    st.session_state.pop("model_error", None)
    st.session_state["model_spec"] = spec
    st.sidebar.caption(f"{lm.n_layers} layers · context {lm.max_context:,} tokens · "
                       f"{'chat template' if lm.is_chat else 'base model (no chat template)'} · {spec.device}, "
                       f"{str(lm.dtype).replace('torch.', '')} · answers by {answer_engine(lm)}")
    return lm


def current_model() -> grade.LoadedModel | None:
    """The model picked in the sidebar if it is loaded (the router in app.py loads it before any page runs)."""
    spec = st.session_state.get("model_spec")
    if spec is None:
        return None
    try:
        return model_registry().get(spec)
    except GradeError:
        return None


def selected_model_name() -> str | None:
    """The name of the model picked in the sidebar, read from this session's state without loading anything:
    an embedded model's name, else a loaded model's own name; None when neither is known (pages that only
    need the name, such as Benchmarks, use this)."""
    spec = st.session_state.get("model_spec")
    if spec is not None:
        if spec.source in grade.EMBEDDED_MODELS:
            return spec.source
        registry = model_registry()
        return registry.get(spec).name if spec in registry.loaded() else None
    choice = st.session_state.get("model_choice")
    return choice if choice in grade.EMBEDDED_MODELS else None


def no_model_message() -> None:
    reason = st.session_state.get("model_error")
    st.info("No model is loaded. Pick one in the sidebar." + (f" (Last error: {reason})" if reason else ""))


# --------------------------------------------------------------------------------------- probes


def active_probe(lm: grade.LoadedModel | None, task: str | None = None) -> tuple[object | None, ProbeInfo | None, str | None]:
    """(probe, info, problem): the user's probe if they picked one, else the shipped one for the model and
    the kind of question (``task``).

    ``problem`` is a one-line reason when there is no usable probe (nothing fits, or the file is broken).
    """
    chosen = st.session_state.get(PROBE_PATH)
    if chosen and config().served and not served_mode.is_inside(Path(chosen), probe_folders()):
        st.session_state.pop(PROBE_PATH, None)  # e.g. a user folder pruned since: back to the default
        chosen = None
    if chosen:
        info = read_probe_info(chosen) or ProbeInfo(Path(chosen), {})
    elif lm is not None:
        info = default_probe(lm.name, list_probes(), task=task)
        if info is None:
            return None, None, f"no shipped probe fits {lm.name}; train or load one on the Probes page."
    else:
        return None, None, "no model loaded."
    try:
        probe = cached_probe(info.path)
    except GradeError as exc:
        return None, info, user_message(exc)
    return probe, info, None


@st.cache_resource(show_spinner=False, max_entries=8)
def _detectors_cached(model_name: str, folder: str, version: int):
    return load_detectors(model_name, Path(folder))


def active_detectors(lm: grade.LoadedModel | None) -> tuple[list, str | None]:
    """(detectors, problem): the detectors shown beside the probe's verdict for the loaded model, loaded
    once per version of their files; ``problem`` says in one line why some or all are missing."""
    if lm is None:
        return [], "no model loaded."
    return _detectors_cached(lm.name, str(DETECTORS_DIR), detectors_stamp(lm))


def detectors_stamp(lm: grade.LoadedModel) -> int:
    """The version of the loaded model's detector files (part of an analysis' cache key)."""
    return detectors_version(lm.name, DETECTORS_DIR)


# ------------------------------------------------------------------------------- errors, downloads


def user_text(text: str) -> str:
    """Text for the page: served, with server paths cut to their last part."""
    return served_mode.redact_paths(text) if config().served else text


def user_message(exc: BaseException) -> str:
    """The one line a user is shown for a problem they caused."""
    return user_text(str(exc))


def show_error(exc: BaseException, what: str = "") -> None:
    """A user-caused problem as one red line; anything else as a short message plus details (served:
    a reference instead of the details, which go to the server's log)."""
    prefix = f"{what}: " if what else ""
    if isinstance(exc, GradeError):
        st.error(prefix + user_message(exc))
    elif config().served:
        reference = served_mode.error_reference()
        log.error("unexpected error, reference %s", reference, exc_info=exc)
        st.error(f"{prefix}something went wrong on the server (reference {reference}); its log has the details.")
    else:
        st.error(f"{prefix}unexpected {type(exc).__name__}: {exc}")
        with st.expander("Details"):
            st.exception(exc)


def shown_path(path: str | Path) -> str:
    """A path as the user may see it: whole locally, its name only when served."""
    return Path(path).name if config().served else str(path)


def plain(text: str) -> str:
    """Model output shown as it is: markdown and LaTeX characters escaped, line breaks kept."""
    escaped = re.sub(r"([\\`*_{}\[\]()#+\-.!|>~$<])", r"\\\1", text)
    return escaped.replace("\n", "  \n")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "figure"


def png_export_available() -> bool:
    """kaleido renders PNGs with a local Chrome/Chromium; both must be present (no download at run time)."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    browser = os.environ.get("BROWSER_PATH") or shutil.which("chromium") or shutil.which("google-chrome") \
        or shutil.which("chromium-browser")
    if browser and "BROWSER_PATH" not in os.environ:
        os.environ["BROWSER_PATH"] = browser
    return bool(browser)


PRESENTATION_KEY = "presentation_mode"


def presentation_mode() -> bool:
    """Whether the sidebar's presentation toggle is on (larger fonts, one figure per screen)."""
    return bool(st.session_state.get(PRESENTATION_KEY))


def presentation_toggle() -> None:
    """The sidebar's toggle for a projector: every figure's fonts larger and one figure per screen
    (:func:`studio.figures.presented`), the page's text larger too."""
    with st.sidebar:
        st.toggle("Presentation mode", key=PRESENTATION_KEY,
                  help="For a projector: larger fonts in every figure and on the page, one figure per screen")
    if presentation_mode():
        st.html("<style>.stMainBlockContainer { font-size: 1.3rem; } "
                ".stMainBlockContainer p, .stMainBlockContainer li { font-size: 1.3rem; }</style>")


def show_figure(fig, name: str, *, key: str, downloads: bool = True) -> None:
    """An interactive Plotly chart with HTML (always) and PNG (when kaleido + Chromium work) downloads."""
    from .figures import PLOTLY_CONFIG, for_display

    st.plotly_chart(for_display(fig, presentation_mode()), width="stretch", key=f"chart_{key}", config=PLOTLY_CONFIG)
    if not downloads:
        return
    row = st.container(horizontal=True)
    row.download_button("HTML", data=lambda: fig.to_html(include_plotlyjs=True, full_html=True),
                            file_name=f"{_slug(name)}.html", mime="text/html", key=f"html_{key}", on_click="ignore",
                            help="Interactive figure as a self-contained web page (works offline)")
    if png_export_available():
        row.download_button("PNG", data=lambda: fig.to_image(format="png", scale=2, width=1000,
                                                                 height=fig.layout.height or 450),
                                file_name=f"{_slug(name)}.png", mime="image/png", key=f"png_{key}", on_click="ignore",
                                help="Static image rendered with kaleido and the local Chromium (takes a few seconds)")

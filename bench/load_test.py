"""A class at once: N headless-Chromium sessions against the served studio on 127.0.0.1 (issue 24, item 5).

    python -m bench.load_test [--sessions 8] [--model smollm2-135m-instruct] [--out bench/results/load_test]
    python -m bench.load_test --model qwen2.5-coder-1.5b-instruct --sessions 4   # the Qwen check (needs ~10 GB)

Starts the app as ``make serve`` does (``GRADE_SERVED=1``, the same server flags) but on the loopback address
and a free port only, with the analysis cache off (``GRADE_ANALYSIS_CACHE_ENTRIES=0``) so that every analysis
is computed. Then, side by side in one run:

1. **one after another**: one browser session analyses the N questions in turn (click to verdict, summed);
2. **all at once**: N browser sessions (each its own Chromium profile) type their own question, then click
   Analyze at the same moment; every session's page is read every ~0.3 s for its queue position until its
   verdict appears.

Before both, one analysis of another question warms the server up (untimed; its time is reported). Reported per
session: the queue positions its page showed, its wait (click to verdict), and in queue order its job's own work and
when the server handed its page the result (from the server's log, ``studio.queue``) beside when the page showed it;
its answer and
GRADE number against the one-after-another run of the same question (no mixing), and the server's peak RSS
(sampled every 0.2 s over the whole run). The checks (SmolLM2, 8 sessions): all complete with their own
question's result; every page that waited showed its position; the last finishes within 1.5x the
one-after-another total; peak RSS under 3 GB. Qwen, 4 sessions: all complete, none mixed, peak RSS under 10 GB.

The browsers (Chromium and its driver) and this harness run at the lowest CPU priority (``--browser-nice``,
default 19), every thread of them, held there for the whole run (:class:`KeepLow`: Chromium puts its renderers
back to normal priority itself): a class's browsers run on its own machines, not on the server's cores, and on a
2-core VM eight Chromium processes at normal priority took the server's time (``--browser-nice 0`` measures that
way; ``--browser-idle`` puts the browsers under SCHED_IDLE, on the cycles the server leaves, where a page draws
only when the server pauses, so its positions may never be seen). The
server's CPU seconds in each run are reported beside the wall times: more CPU for the same analyses together
than one after another is work the server adds under load.

Bounded: at most 16 sessions, ``--timeout`` seconds in all (default 900); it talks to 127.0.0.1 only.
Needs Debian's chromium and chromium-driver (``make browser``) and selenium.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only, never any other address
MAX_SESSIONS = 16
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
QUESTIONS = (
    "What is the capital of France?",
    "Who wrote the novel Pride and Prejudice?",
    "What is the largest planet in the solar system?",
    "In which year did World War II end?",
    "What is the chemical symbol for gold?",
    "Who painted the Mona Lisa?",
    "What is the boiling point of water in degrees Celsius?",
    "Which ocean lies between Africa and Australia?",
    "What is the square root of 144?",
    "Who was the first person to walk on the Moon?",
    "What is the longest river in South America?",
    "How many legs does a spider have?",
    "What language is spoken in Brazil?",
    "Which element has the atomic number 1?",
    "What is the capital of Japan?",
    "Who developed the theory of general relativity?",
)
#: Analysed once before either run, untimed (not one of QUESTIONS).
WARM_UP = "What is the capital of Italy?"
#: What the issue asks of each model: (sessions, peak RSS bound in GB, ratio to one-after-another or None).
CHECKS = {"smollm2-135m-instruct": (8, 3.0, 1.5), "qwen2.5-coder-1.5b-instruct": (8, 10.0, 1.5)}


@dataclass
class Session:
    question: str
    positions: list[int] = field(default_factory=list)  # every queue position its page showed
    saw_running: bool = False
    clicked: float = 0.0  # seconds since the common start
    finished: float | None = None
    settled: float | None = None  # when its page had also finished drawing the result (its script run ended)
    answer: str = ""
    grade: str = ""
    question_box: str = ""
    error: str | None = None

    @property
    def wait_s(self) -> float | None:
        return None if self.finished is None else self.finished - self.clicked


# ------------------------------------------------------------------------------------------ server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start_server(model: str, port: int, log, *, served: bool = True, env: dict | None = None) -> subprocess.Popen:
    """The studio on ``port``: served (``make serve``'s options, no analysis cache) or as ``make run`` starts it;
    ``env``: variables set on top."""
    base = ({"GRADE_SERVED": "1", "GRADE_ANALYSIS_CACHE_ENTRIES": "0"} if served else {})
    env = {**os.environ, **base, "GRADE_START_MODEL": model, "TRANSFORMERS_VERBOSITY": "error", **(env or {})}
    options = (["--server.maxUploadSize", "8", "--client.showErrorDetails", "none", "--server.enableXsrfProtection",
                "true"] if served else [])
    return subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", HOST, "--server.port", str(port),
         "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         *options], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()


def wait_healthy(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the server did not answer at {url} in {timeout} s")


class PeakRSS(threading.Thread):
    """The largest resident set of a process and its children, sampled every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        import psutil

        self.process, self.every, self.peak, self._halt = psutil.Process(pid), every, 0, threading.Event()

    def run(self) -> None:
        import psutil

        while not self._halt.is_set():
            try:
                total = self.process.memory_info().rss + sum(
                    c.memory_info().rss for c in self.process.children(recursive=True))
                self.peak = max(self.peak, total)
            except psutil.Error:
                pass
            self._halt.wait(self.every)

    def stop(self) -> int:
        self._halt.set()
        self.join(5)
        return self.peak


# ----------------------------------------------------------------------------------------- browser


def new_driver(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def lower_priority(pid: int, nice: int, idle: bool = False) -> int:
    """Set ``nice`` (and with ``idle`` the SCHED_IDLE policy) on every thread of a process and of every process
    under it; the number of threads changed. Thread by thread: on Linux both are a thread's, not a process's
    (a renice of the process id alone left a renderer's other threads at normal priority)."""
    import psutil

    try:
        root, changed = psutil.Process(pid), 0
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:  # the browser has ended
        return 0
    for p in processes:
        try:
            threads = [t.id for t in p.threads()]
        except psutil.Error:
            continue
        for tid in threads:
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) != nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                    changed += 1
                if idle and os.sched_getscheduler(tid) != os.SCHED_IDLE:
                    os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                    changed += 1
            except OSError:  # the thread has ended
                pass
    return changed


class KeepLow(threading.Thread):
    """Holds every thread of the browsers' processes at ``nice`` for the whole run, every ``every`` seconds.

    Why: Chromium sets the priority of its renderer processes itself (a page in front goes back to nice 0, as
    root it may), so a renice at start left eight renderers at normal priority beside the server (top showed
    them at NI 0, 5-8 % of a core each, while the server's threads waited for a core). ``changed`` counts the
    threads put back (the report's ``browser_processes_reniced``)."""

    def __init__(self, nice: int, idle: bool = False, every: float = 0.5):
        super().__init__(daemon=True)
        self.idle = idle
        self.nice, self.every, self.pids, self.changed, self._halt = nice, every, [], 0, threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.every):
            for pid in list(self.pids):
                self.changed += lower_priority(pid, self.nice, self.idle)

    def stop(self) -> int:
        self._halt.set()
        self.join(5)
        return self.changed


def _cpu_s(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _css(driver, selector: str):
    return driver.find_elements("css selector", selector)


def _until(driver, condition, timeout: float, what: str):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.3,
                         ignored_exceptions=[StaleElementReferenceException]).until(condition, what)


def _idle(driver) -> bool:
    return not _css(driver, '[data-testid="stStatusWidget"]')


def open_and_type(driver, url: str, question: str, timeout: float) -> None:
    from selenium.webdriver.common.keys import Keys

    driver.get(url)
    _until(driver, lambda d: _css(d, ".st-key-question textarea"), timeout, "the question box")
    time.sleep(1.0)
    _until(driver, _idle, timeout, "the model to load")
    set_question(driver, question, timeout)


def set_question(driver, question: str, timeout: float) -> None:
    set_text(driver, ".st-key-question textarea", question, timeout)


def set_text(driver, selector: str, text: str, timeout: float, settle_s: float = 1.0) -> None:
    """Replace the text of the box at ``selector`` as a user types it, leave the box (Streamlit commits a text
    area when it loses focus) and wait for the page's run that takes it."""
    from selenium.webdriver.common.keys import Keys

    box = _until(driver, lambda d: next(iter(_css(d, selector)), None), 60, selector)
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)
    box.send_keys(Keys.TAB)
    time.sleep(settle_s)
    _until(driver, _idle, timeout, f"the page to take the text of {selector}")


def click_analyze(driver) -> None:
    _until(driver, lambda d: next((b for b in _css(d, ".st-key-analyze button") if b.is_enabled()), None), 60,
           "the Analyze button").click()


def _answer(driver) -> str:
    return next((e.text for e in _css(driver, ".st-key-answer")), "")


def read_result(driver, session: Session) -> None:
    session.answer = _answer(driver)
    session.grade = next((m.text for m in _css(driver, '[data-testid="stMetric"]') if m.text.startswith("GRADE")), "")
    session.question_box = next((t.get_attribute("value") for t in _css(driver, ".st-key-question textarea")), "")


#: What Home's verdict box says once its verdict is in (read by :func:`_verdict_shown` and :func:`follow`).
VERDICT_TEXT = "Probability that the model can answer"


def _verdict_shown(driver) -> bool:
    return any(VERDICT_TEXT in v.text for v in _css(driver, ".st-key-verdict")) \
        and not _css(driver, ".st-key-queue_status")


#: What :func:`follow` reads of a page, in one script run: the queue box's text, whether a verdict is shown and the
#: first error's text. One call a poll, not one WebDriver command an element: with eight pages read every
#: 0.3 s the commands alone kept the harness, the drivers and the renderers busy beside the server.
_PAGE_STATE = """
const text = s => { const e = document.querySelector(s); return e ? e.innerText : null; };
const verdicts = [...document.querySelectorAll('.st-key-verdict')].map(e => e.innerText);
return {queue: text('.st-key-queue_status'),
        verdict: verdicts.some(v => v.includes(arguments[0])),
        error: text('[data-testid="stException"], [data-testid="stAlertContentError"]')};
"""


def follow(driver, session: Session, start: float, timeout: float, every: float = 0.3) -> None:
    """Read the page every ``every`` seconds until its verdict shows, noting every queue position it displayed."""
    from selenium.common.exceptions import JavascriptException, TimeoutException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = driver.execute_script(_PAGE_STATE, VERDICT_TEXT)
        except (TimeoutException, JavascriptException):  # a renderer too busy to answer within WebDriver's
            time.sleep(every)  # script timeout (30 s), or a page between two drawings: read again, as a person
            continue  # would look again
        if state["queue"]:
            found = re.search(r"position (\d+)", state["queue"])
            if found:
                session.positions.append(int(found.group(1)))
            if "Analyzing" in state["queue"]:
                session.saw_running = True
        elif state["verdict"]:
            session.finished = time.monotonic() - start
            time.sleep(0.5)
            _until(driver, _idle, 60, "the page to settle")
            session.settled = time.monotonic() - start
            read_result(driver, session)
            return
        if state["error"]:
            session.error = state["error"][:300]
            return
        time.sleep(every)
    session.error = f"no verdict within {timeout:.0f} s"


# -------------------------------------------------------------------------------------------- runs


def one_after_another(driver, questions, start: float, timeout: float) -> list[Session]:
    done = []
    for question in questions:
        session = Session(question)
        set_question(driver, question, timeout)
        before = _answer(driver)
        session.clicked = time.monotonic() - start
        click_analyze(driver)
        # the cache is off, so every analysis passes the queue: its box first, so that the last verdict is not
        # read as this one's; or a new answer, where the box came and went between two reads (a fast model,
        # and a renderer at low priority that drew it late or not at all)
        _until(driver, lambda d: _css(d, ".st-key-queue_status") or _answer(d) not in ("", before), 60,
               "the queue box or a new answer")
        follow(driver, session, start, timeout)
        done.append(session)
    return done


def all_at_once(drivers, url: str, questions, timeout: float, at_start=lambda: None) -> tuple[list[Session], float]:
    """The sessions' results and the common start; ``at_start`` is called at that start (after the typing)."""
    sessions = [Session(q) for q in questions]
    for driver, question in zip(drivers, questions):  # opened and typed one by one, before the clock starts
        open_and_type(driver, url, question, timeout)
    barrier = threading.Barrier(len(drivers) + 1)
    start_box: list[float] = []

    def run(driver, session):
        barrier.wait()
        session.clicked = time.monotonic() - start_box[0]
        try:
            click_analyze(driver)
            follow(driver, session, start_box[0], timeout)
        except Exception as exc:  # recorded, the others go on
            session.error = f"{type(exc).__name__}: {str(exc)[:200]}"

    threads = [threading.Thread(target=run, args=(d, s)) for d, s in zip(drivers, sessions)]
    for thread in threads:
        thread.start()
    at_start()
    start_box.append(time.monotonic())
    barrier.wait()
    for thread in threads:
        thread.join(timeout + 60)
    return sessions, start_box[0]


#: The server's line for each result a page took from the queue (studio.queue.Ticket.result).
_DELIVERED = re.compile(r"analysis delivered: queue position (\d+), waited ([\d.]+) s, its work ([\d.]+) s, "
                        r"taken ([\d.]+) s after it ended")


def deliveries(log_text: str, n: int) -> list[dict]:
    """The server's last ``n`` deliveries (the all-at-once run's), in the order they were taken: each one's queue
    position when it was asked, its wait on the server (ask to result taken), its job's own work and how long the
    page's script took to take it after the job ended."""
    found = [{"position": int(m[1]), "server_wait_s": float(m[2]), "work_s": float(m[3]), "taken_after_s": float(m[4])}
             for m in _DELIVERED.finditer(log_text)]
    return found[-n:]


def per_position(rows: list[dict], delivered: list[dict]) -> list[dict]:
    """Each session's wait as its page saw it beside the server's side of it, in queue order: the pages in the
    order their verdicts came on the server (one worker serves the queue in order) matched to the sessions by the
    first position their page showed (the session served first showed none)."""
    order = sorted(rows, key=lambda r: (min(r["positions"]) if r["positions"] else 0, r["wait_s"] or float("inf")))
    return [{"queue_order": k + 1, "question": r["question"], "positions_shown": sorted(set(r["positions"])),
             "page_wait_s": r["wait_s"], **d} for k, (r, d) in enumerate(zip(order, sorted(delivered, key=lambda d: d["server_wait_s"])))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load_test", description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=None, help="simultaneous sessions (default: the check's)")
    parser.add_argument("--model", default="smollm2-135m-instruct", choices=sorted(CHECKS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "load_test")
    parser.add_argument("--browser-nice", type=int, default=19,
                        help="CPU priority (nice) of the browsers and this harness; 0: as the server (default 19)")
    parser.add_argument("--browser-idle", action="store_true",
                        help="run the browsers (not this harness) under SCHED_IDLE: only on cores the server leaves idle")
    parser.add_argument("--tag", default="", help="added to the result's file name")
    args = parser.parse_args(argv)
    wanted, rss_bound, ratio_bound = CHECKS[args.model]
    n = args.sessions or wanted
    if not 1 <= n <= MAX_SESSIONS:
        parser.error(f"--sessions must be between 1 and {MAX_SESSIONS}")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        parser.error("headless Chromium is missing: run `make browser`")
    questions = QUESTIONS[:n]
    deadline = time.monotonic() + args.timeout
    left = lambda: max(30.0, deadline - time.monotonic())  # noqa: E731

    port = _free_port()
    url = f"http://{HOST}:{port}"
    log = tempfile.NamedTemporaryFile(prefix="grade-load-test-", suffix=".log", delete=False)
    server = start_server(args.model, port, log)
    profiles, drivers = [], []
    report: dict = {"model": args.model, "sessions": n, "host": HOST, "cpus": os.cpu_count(),
                    "browser_nice": args.browser_nice, "browser_sched_idle": args.browser_idle,
                    "queue_workers": os.environ.get("GRADE_QUEUE_WORKERS", "default"),
                    "load_before": os.getloadavg()}
    try:
        wait_healthy(url, server)
        rss = PeakRSS(server.pid)
        rss.start()
        if args.browser_nice:  # the server started at normal priority; the harness and its browsers go below it
            os.nice(args.browser_nice - os.nice(0))
        keeper = KeepLow(args.browser_nice, args.browser_idle)
        for _ in range(n):
            profiles.append(tempfile.mkdtemp(prefix="grade-load-chromium-"))
            drivers.append(new_driver(profiles[-1]))
            keeper.pids.append(drivers[-1].service.process.pid)
            lower_priority(keeper.pids[-1], args.browser_nice, args.browser_idle)
        keeper.start()
        # 1. one after another, in the first session (it also loads the model, before any clock starts), after
        # one analysis of a question of neither run: the server's first analysis pays one-off costs (up to a
        # minute with Qwen: the generation backend's start) that belong to neither run
        open_and_type(drivers[0], url, WARM_UP, left())
        warm = one_after_another(drivers[0], [WARM_UP], time.monotonic(), left())[0]
        report["warm_up_s"] = warm.wait_s
        start, cpu0 = time.monotonic(), _cpu_s(server.pid)
        serial = one_after_another(drivers[0], questions, start, left())
        cpu1 = _cpu_s(server.pid)
        print("one after another:", [(s.question[:30], s.wait_s, s.error) for s in serial], flush=True)
        serial_total = sum(s.wait_s or float("nan") for s in serial)
        # 2. all at once: fresh sessions (a reload gives the first browser a new one too)
        marks = []
        together, _ = all_at_once(drivers, url, questions, left(), at_start=lambda: marks.append(_cpu_s(server.pid)))
        report["server_cpu_s"] = {"one_after_another": cpu1 - cpu0, "all_at_once": _cpu_s(server.pid) - marks[0]}
        report["peak_rss_gb"] = rss.stop() / 1024 ** 3
        report["browser_processes_reniced"] = keeper.stop()
    finally:
        for driver in drivers:
            try:
                driver.quit()
            except Exception:
                pass
        for profile in profiles:
            shutil.rmtree(profile, ignore_errors=True)
        stop_server(server)
    report["load_after"] = os.getloadavg()

    by_question = {s.question: s for s in serial}
    last = max((s.finished for s in together if s.finished is not None), default=float("nan"))
    # the same to the moment each page had drawn its whole result (work the server does for every analysis, which
    # one after another happens before the next click and all at once beside the next analyses)
    serial_settled = sum((s.settled - s.clicked) if s.settled is not None else float("nan") for s in serial)
    last_settled = max((s.settled for s in together if s.settled is not None), default=float("nan"))
    rows = []
    for s in together:
        alone = by_question[s.question]
        rows.append({**asdict(s), "wait_s": s.wait_s, "alone_s": alone.wait_s,
                     "own_result": (s.error is None and s.question_box == s.question and s.answer == alone.answer
                                    and s.grade == alone.grade and alone.error is None)})
    queue_order = per_position(rows, deliveries(Path(log.name).read_text(errors="replace"), n))
    waited = [r for r in rows if r["positions"]]
    checks = {
        "all_complete": all(r["finished"] is not None and r["error"] is None for r in rows),
        "own_results": all(r["own_result"] for r in rows),
        # with one worker, all but the first page to be served wait; each of them must show its position
        "waiting_pages_show_position": len(waited) >= n - int(os.environ.get("GRADE_QUEUE_WORKERS") or 1),
        "peak_rss_under_bound": report["peak_rss_gb"] < rss_bound,
    }
    if ratio_bound is not None:
        checks["last_within_ratio"] = last <= ratio_bound * serial_total
    if queue_order:  # the session served first sees its verdict within 1.5x its own work
        first = queue_order[0]
        checks["first_within_1_5x_its_work"] = first["page_wait_s"] is not None and \
            first["page_wait_s"] <= 1.5 * first["work_s"]
    report.update({"serial": [asdict(s) | {"wait_s": s.wait_s} for s in serial], "serial_total_s": serial_total,
                   "together": rows, "queue_order": queue_order, "last_finished_s": last, "ratio_last_to_serial": last / serial_total,
                   "serial_settled_total_s": serial_settled, "last_settled_s": last_settled,
                   "ratio_settled": last_settled / serial_settled,
                   "rss_bound_gb": rss_bound, "ratio_bound": ratio_bound, "checks": checks, "server_log": log.name})
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"load_{args.model}_{n}{'_' + args.tag if args.tag else ''}.json"
    out.write_text(json.dumps(report, indent=2))

    print(f"\n{n} sessions on the served studio ({args.model}), {os.cpu_count()} CPUs, "
          f"load average before {report['load_before'][0]:.1f}")
    print("| session | question | positions shown | wait (s) | alone (s) | own result |")
    print("|---|---|---|---:|---:|---|")
    for i, r in enumerate(rows):
        shown = ",".join(str(p) for p in dict.fromkeys(r["positions"])) or "-"
        print(f"| {i + 1} | {r['question'][:40]} | {shown} | {r['wait_s'] or float('nan'):.1f} | "
              f"{r['alone_s'] or float('nan'):.1f} | {'yes' if r['own_result'] else 'NO: ' + str(r['error'])} |")
    print("\n| queue order | positions shown | own work (s) | server: result taken after (s) | page saw it after (s) |")
    print("|---:|---|---:|---:|---:|")
    for q in queue_order:
        print(f"| {q['queue_order']} | {','.join(map(str, q['positions_shown'])) or '-'} | {q['work_s']:.1f} | "
              f"{q['server_wait_s']:.1f} | {q['page_wait_s'] or float('nan'):.1f} |")
    print(f"\none after another: {serial_total:.1f} s in all; all at once: the last finished after {last:.1f} s "
          f"(ratio {last / serial_total:.2f}, bound {ratio_bound}); to the pages' last drawing: {serial_settled:.1f} s "
          f"and {last_settled:.1f} s (ratio {last_settled / serial_settled:.2f}); server peak RSS {report['peak_rss_gb']:.2f} GB "
          f"(bound {rss_bound} GB); server CPU {report['server_cpu_s']['one_after_another']:.0f} s one after "
          f"another, {report['server_cpu_s']['all_at_once']:.0f} s all at once; "
          f"browsers at nice {args.browser_nice}")
    print("checks:", json.dumps(checks))
    print(f"written to {out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

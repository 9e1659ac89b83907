"""A test past its time limit fails alone, and the run goes on (loaded by tests/conftest.py).

The limits stay pytest-timeout's (``timeout`` in pyproject.toml, ``--timeout``, ``@pytest.mark.timeout``);
this plugin carries them out through pytest-timeout's ``pytest_timeout_set_timer`` hook. A watchdog thread
per test waits for the limit, then takes every thread's stack and interrupts the main thread with SIGUSR1,
whose handler fails the test with those stacks. Signals, not pytest-timeout's methods: its signal method's
SIGALRM timer is set and cleared by Airflow's task timeouts (a run once hung CI for 90 minutes), and its
thread method ends the whole process (every later test lost, the processes the test started left running).
SIGUSR1 is used by neither Airflow's task runs nor the libraries the tests call (Airflow's scheduler, a
process of its own, is the only user). The failure is ``pytest.fail``'s, a ``BaseException``: no
``except Exception`` swallows it, and the test's fixtures tear down as after any failure.

The handler raises only inside a test's setup, call or teardown (pytest turns an exception there into that
phase's failure), and once a test. What it cannot interrupt (a C call that never returns) is left to a last
resort at ``timeout_backstop_factor`` times the limit: the processes the run started are killed, then
pytest-timeout's thread method prints every stack and ends the process. Processes a timed-out test started
and its teardown left running are stopped when the session ends (after every fixture's teardown: a module's
server started in that test may still serve the next tests).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psutil
import pytest
import pytest_timeout

SIGNAL = signal.SIGUSR1
#: How often a watchdog past its limit signals again while the main thread is between phases or in C code.
RESEND_SECONDS = 0.5
BACKSTOP_FACTOR_INI = "timeout_backstop_factor"


@dataclass
class _Phase:
    """Whether the main thread is inside a test's setup, call or teardown (where an exception is its failure)."""

    active: bool = False
    watch: _Watch | None = None


_PHASE = _Phase()
_LEFT: list[psutil.Process] = []  # processes timed-out tests left running, stopped at the session's end
_WATCH = pytest.StashKey["_Watch"]()
_PREVIOUS = pytest.StashKey[Any]()  # the signal's handler before the session


#: multiprocessing's own helpers, which end with this process (a test starting the forkserver is not a leak).
HELPERS = ("from multiprocessing.forkserver import main", "from multiprocessing.resource_tracker import main")


def _descendants(since: float = 0.0) -> list[psutil.Process]:
    """This process's descendants started at ``since`` (epoch seconds) or later."""
    found = []
    try:
        for process in psutil.Process().children(recursive=True):
            try:
                command = " ".join(process.cmdline())
                if process.create_time() >= since and not any(helper in command for helper in HELPERS):
                    found.append(process)
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return found


def _stop(processes: list[psutil.Process]) -> list[str]:
    """TERM, then KILL what is still there after a bounded wait; the descriptions of those that were running."""
    running = []
    for process in processes:
        try:
            running.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
            process.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(processes, timeout=5)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=5)
    return running


def _stacks(skip: set[int | None]) -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    stacks = [
        f"--- thread {names.get(ident, '?')} ({ident}):\n{''.join(traceback.format_stack(frame))}"
        for ident, frame in sys._current_frames().items()
        if ident not in skip
    ]
    return "\n".join(stacks) or "(none)"


@dataclass(eq=False)
class _Watch:
    item: pytest.Item
    settings: Any  # pytest_timeout.Settings
    backstop: float
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    fired: bool = False  # the limit passed
    raised: bool = False  # the main thread took the failure
    message: str = ""
    main: int = field(default_factory=threading.get_ident)

    def start(self) -> None:
        self.started, self.started_at = time.monotonic(), time.time()
        thread = threading.Thread(target=self._run, name=f"watchdog {self.item.nodeid}", daemon=True)
        self.thread = thread
        thread.start()

    def stop(self) -> None:
        with self.lock:  # no signal is sent after this; one sent before is ignored by the handler
            self.done.set()
        self.thread.join()
        if self.fired:
            _LEFT.extend(_descendants(since=self.started_at - 1))  # create_time is rounded

    def _run(self) -> None:
        limit = float(self.settings.timeout)
        if self.done.wait(limit):
            return
        if not self.settings.disable_debugger_detection and pytest_timeout.is_debugging():
            return
        self.message = (
            f"Timeout: {self.item.nodeid} passed its limit of {limit:g} s; the watchdog (tests/watchdog.py) "
            f"stopped it and the run goes on. The main thread's stack is the traceback below; the other threads':\n"
            f"{_stacks(skip={threading.get_ident(), self.main})}"
        )
        self.fired = True
        deadline = self.started + self.backstop
        while not self.done.wait(min(RESEND_SECONDS, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                self._backstop()
                return
            with self.lock:
                ours = signal.getsignal(SIGNAL) is _interrupt  # a test that took the signal over: the backstop
                if not self.done.is_set() and not self.raised and _PHASE.active and ours:
                    signal.pthread_kill(self.main, SIGNAL)

    def _backstop(self) -> None:
        """The main thread never took the failure: stop every process the run started, then end the run."""
        _stop(_descendants())
        pytest_timeout.timeout_timer(self.item, self.settings._replace(timeout=self.backstop))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    __tracebackhide__ = True
    watch = _PHASE.watch
    if watch is None or not watch.fired or watch.raised or not _PHASE.active:
        return  # between phases, or a signal the test's end overtook: the watchdog sends again if needed
    watch.raised = True
    pytest.fail(watch.message, pytrace=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(BACKSTOP_FACTOR_INI, "The last resort ends the run at this many times a test's limit", default="3")


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is threading.main_thread():
        config.stash[_PREVIOUS] = signal.signal(SIGNAL, _interrupt)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PREVIOUS in config.stash:
        signal.signal(SIGNAL, config.stash[_PREVIOUS])


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    if threading.current_thread() is not threading.main_thread():
        return None  # a signal reaches only the main thread: pytest-timeout's own methods then
    signal.signal(SIGNAL, _interrupt)  # again, in case a test took it over
    factor = float(item.config.getini(BACKSTOP_FACTOR_INI))
    watch = _Watch(item, settings, backstop=float(settings.timeout) * factor)
    item.stash[_WATCH] = watch
    _PHASE.watch = watch
    watch.start()
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    watch = item.stash.get(_WATCH, None)
    if watch is None:
        return None
    del item.stash[_WATCH]
    _PHASE.watch = None
    watch.stop()
    return True


def _in_phase() -> Any:
    _PHASE.active = True
    try:
        return (yield)
    finally:
        _PHASE.active = False


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    return (yield from _in_phase())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    return (yield from _in_phase())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    return (yield from _in_phase())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After every fixture's teardown: stop what timed-out tests started and nothing stopped since."""
    left = [p for p in dict.fromkeys(_LEFT) if p.is_running()]
    _LEFT.clear()
    stopped = _stop(left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if stopped and reporter is not None:
        reporter.write("\n")
        reporter.write_line(f"watchdog: stopped {len(stopped)} process(es) left by timed-out tests:", red=True)
        for line in stopped:
            reporter.write_line(f"  {line}")

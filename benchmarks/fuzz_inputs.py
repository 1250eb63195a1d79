"""Mutation fuzzing of readers of outside bytes (no robo imports): mutate valid inputs, read each under a time
limit, classify the outcome.

    rng = case_rng(seed, index)                  # one generator per input: input ``index`` is reproducible alone
    data = mutate(valid, rng)                    # 1-4 byte mutations (bit flips, bytes set, cuts, inserts, ...)
    text = mutate_json(valid_json, rng)          # 1-4 mutations, structured (a key deleted, a wrong type, huge,
                                                 # negative or NaN numbers) while the text still parses, else bytes
    tally = fuzz(target, range(300), seed=0)     # in this process (signal.setitimer limits each input)
    tally = fuzz_isolated(make_target, 10000)    # in a worker process, restarted after a crash or a stuck input

A *target* has ``name``, ``case(rng) -> (label, read)`` (one mutated input, and the call that reads it: it returns
``False`` where the reader drops the input without raising, as a stream parser does, anything else where it
read it), ``refused(exc) -> bool`` (whether ``exc`` is one of the reader's documented refusals) and ``close()``.

Outcomes: ``read``; ``refused`` (``refused(exc)`` and a one-line message, or ``read()`` returned ``False``);
``other`` (any other exception, a multi-line message, or a crash of the worker process); ``hang`` (longer
than ``limit`` s, or stuck where the time limit's signal cannot interrupt it).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

OUTCOMES = ("read", "refused", "other", "hang")
LIMIT = 5.0  # s an input may take
INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
               2**63 - 1, 2**64 - 1)


def case_rng(seed: int, index: int) -> random.Random:
    """The generator of input ``index`` of run ``seed``."""
    return random.Random(seed * 2**32 + index)


# byte mutations --------------------------------------------------------------------------------------------
def _flip_bits(b: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)


def _replace_bytes(b: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] = rng.randrange(256)


def _truncate(b: bytearray, rng: random.Random) -> None:
    del b[rng.randrange(len(b)):]


def _insert(b: bytearray, rng: random.Random) -> None:
    i = rng.randint(0, len(b))
    b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))


def _delete(b: bytearray, rng: random.Random) -> None:
    i = rng.randrange(len(b))
    del b[i:i + rng.randint(1, 16)]


def _duplicate(b: bytearray, rng: random.Random) -> None:
    i = rng.randrange(len(b))
    chunk = b[i:i + rng.randint(1, 64)]
    j = rng.randint(0, len(b))
    b[j:j] = chunk


def _extreme_byte(b: bytearray, rng: random.Random) -> None:
    b[rng.randrange(len(b))] = rng.choice((0x00, 0xFF))


def _extreme_int(b: bytearray, rng: random.Random) -> None:
    """A 1/2/4/8-byte little-endian field set to a boundary value (sizes, counts, offsets)."""
    n = rng.choice((1, 2, 4, 8))
    if len(b) < n:
        return
    i = rng.randrange(len(b) - n + 1)
    b[i:i + n] = (rng.choice(INTERESTING) % 2 ** (8 * n)).to_bytes(n, "little")


BYTE_MUTATIONS = (_flip_bits, _replace_bytes, _truncate, _insert, _delete, _duplicate, _extreme_byte, _extreme_int)


def mutate_bytes_once(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    if not b:
        _insert(b, rng)
    else:
        rng.choice(BYTE_MUTATIONS)(b, rng)
    return bytes(b)


def mutate(data: bytes, rng: random.Random, n: int | None = None) -> bytes:
    """``data`` after ``n`` (default 1-4) random byte mutations."""
    for _ in range(n or rng.randint(1, 4)):
        data = mutate_bytes_once(data, rng)
    return data


# JSON mutations --------------------------------------------------------------------------------------------
WRONG_TYPES = (None, True, "x", "", [], {}, [1, "a"], {"a": 1}, 0, 1.5)
NUMBERS = (10**20, 2**63, 2**64 + 1, 10**400, 1e308, -1, -(10**9), -1.5, 0, float("nan"), float("inf"),
           float("-inf"))


def _nodes(doc, path=()):
    """Every (path, value) in a JSON document, the root included."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _nodes(v, (*path, i))


def _edit(doc, rng: random.Random):
    """One structured edit of ``doc``: a key or item deleted, or a value set to a wrong type or an extreme number."""
    nodes = list(_nodes(doc))
    path, value = rng.choice(nodes)
    kind = rng.choice(("delete", "wrong type", "number"))
    if kind == "delete" and path:
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        del parent[path[-1]]
        return doc
    new = rng.choice(WRONG_TYPES) if kind == "wrong type" else rng.choice(NUMBERS)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and kind == "number" and rng.random() < 0.3:
        new = -value if value else -1  # the value negated
    if not path:
        return new
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = new
    return doc


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    """A JSON document after 1-4 mutations: structured edits (60 %) while it still parses, else byte mutations."""
    for _ in range(rng.randint(1, 4)):
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            doc = None
        if doc is not None and rng.random() < 0.6:
            data = json.dumps(_edit(doc, rng), indent=rng.choice((None, 4))).encode()
        else:
            data = mutate_bytes_once(data, rng)
    return data


# running and classifying ------------------------------------------------------------------------------------
class Timeout(BaseException):
    """Raised in the main thread when an input runs past its limit (a BaseException: readers' ``except
    Exception`` blocks do not swallow it)."""


def _alarm(signum, frame):
    raise Timeout()


@dataclass
class Result:
    outcome: str
    seconds: float
    label: str
    message: str = ""


def one_line(exc: BaseException) -> bool:
    text = str(exc)
    return bool(text.strip()) and "\n" not in text and "\r" not in text


def run_case(target, rng: random.Random, limit: float = LIMIT) -> Result:
    """Make one input of ``target`` and read it under ``limit`` s (a SIGALRM timer where this is the main thread)."""
    label, read = target.case(rng)
    timed = threading.current_thread() is threading.main_thread()
    if timed:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
    t0 = time.perf_counter()
    try:
        try:
            accepted = read()
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        seconds = time.perf_counter() - t0
        outcome = "hang" if seconds > limit else "read" if accepted is not False else "refused"
        return Result(outcome, seconds, label)
    except Timeout:
        return Result("hang", time.perf_counter() - t0, label, f"over {limit} s")
    except Exception as e:  # noqa: BLE001 - classifying every exception is the point
        seconds = time.perf_counter() - t0
        message = f"{type(e).__name__}: {e}"
        if seconds > limit:
            return Result("hang", seconds, label, message)
        return Result("refused" if target.refused(e) and one_line(e) else "other", seconds, label, message)


@dataclass
class Tally:
    """Outcome counts of one target, the slowest input and examples of the bad outcomes (index, label, message)."""

    name: str
    counts: dict = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    max_seconds: float = 0.0
    examples: list = field(default_factory=list)
    max_examples: int = 20

    def add(self, index: int, r: Result) -> None:
        self.counts[r.outcome] += 1
        self.max_seconds = max(self.max_seconds, r.seconds)
        if r.outcome in ("other", "hang") and len(self.examples) < self.max_examples:
            self.examples.append((index, r.label, r.message[:300]))

    @property
    def inputs(self) -> int:
        return sum(self.counts.values())

    @property
    def bad(self) -> int:
        return self.counts["other"] + self.counts["hang"]

    def row(self) -> dict:
        return {"reader": self.name, "inputs": self.inputs, **self.counts, "max s": self.max_seconds}


def fuzz(target, indices: Iterable[int], seed: int = 0, limit: float = LIMIT) -> Tally:
    """Inputs ``indices`` of ``target``, in this process."""
    tally = Tally(target.name)
    for i in indices:
        tally.add(i, run_case(target, case_rng(seed, i), limit))
    return tally


def _worker(make_target: Callable, seed: int, start: int, stop: int, limit: float, memory_gb: float, conn) -> None:
    import resource

    if memory_gb:  # a reader that would allocate without bound raises MemoryError instead of swapping the machine
        resource.setrlimit(resource.RLIMIT_AS, (int(memory_gb * 2**30), resource.RLIM_INFINITY))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped: still close the target (its files)
    target = make_target()
    conn.send(("ready", target.name))
    try:
        for i in range(start, stop):
            conn.send((i, run_case(target, case_rng(seed, i), limit)))
    finally:
        target.close()
        conn.close()


def fuzz_isolated(make_target: Callable, inputs: int, seed: int = 0, limit: float = LIMIT, memory_gb: float = 8.0,
                  setup_timeout: float = 300.0, budget: float = math.inf) -> Tally:
    """Inputs 0 .. ``inputs`` - 1 of ``make_target()`` (a picklable factory) in a worker process, started again
    after the input it died on (counted ``other``: a crash) or stuck on past ``limit`` + 10 s (``hang``); stops
    early after ``budget`` s (``Tally.inputs`` then says how many ran)."""
    ctx = multiprocessing.get_context("spawn")
    tally, i, t0 = None, 0, time.monotonic()
    while i < inputs and time.monotonic() - t0 < budget:
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(make_target, seed, i, inputs, limit, memory_gb, send), daemon=True)
        proc.start()
        send.close()
        if not receive.poll(setup_timeout):
            proc.kill()
            raise RuntimeError(f"the fuzz worker did not start within {setup_timeout} s")
        try:
            _, name = receive.recv()
        except EOFError:
            proc.join()
            raise RuntimeError(f"the fuzz worker died while setting up (exit code {proc.exitcode})") from None
        tally, stuck = tally or Tally(name), False
        while i < inputs and time.monotonic() - t0 < budget:
            if not receive.poll(limit + 10.0):
                tally.add(i, Result("hang", limit + 10.0, f"input {i}", "stuck: the time limit did not interrupt it"))
                i, stuck = i + 1, True
                break
            try:
                index, result = receive.recv()
            except EOFError:
                proc.join()
                tally.add(i, Result("other", 0.0, f"input {i}", f"crash: the worker exited with code {proc.exitcode}"))
                i += 1
                break
            tally.add(index, result)
            i = index + 1
        if not stuck:  # done (the worker closes its target and exits), or out of budget (it is told to)
            if i < inputs:
                proc.terminate()
            proc.join(30)
        if proc.is_alive():
            proc.kill()
        proc.join()
        receive.close()
    return tally

"""Crash rounds: run the writer, SIGKILL it at a random moment, reopen the store and check it.

A ``CrashHarness`` owns one store that accumulates across rounds, and the set of every message
acknowledged so far (by writers and by the checker's own writes). One round:

1. (power-loss mode) make the shadow an exact copy of the closed store: the disk as the writer
   starts (``DirMirror`` copies only the files that changed since the last round).
2. Start ``python -m tests.crash.writer`` and read its acknowledgements until a random moment,
   then SIGKILL it and read what it had already written. The moment: in one round out of ten
   a random time after the spawn, which may fall before or during the open (recovery);
   otherwise a random time 0.05..1.5 s after the open or, sooner, a number of
   acknowledgements (log-uniform in half the rounds: many short rounds, some long ones).
   A third of the rounds use a paced writer (sleeps between puts): long rounds, few messages,
   so the background flushers and the checkpoint run before the kill. Half the rounds send to
   only 1-3 of the 12 topic/queue pairs: hot queues whose segments roll quickly.
3. (power-loss mode) in half the rounds, write back a random subset of the pages the writer
   dirtied but never synced (``_write_back``): torn records and entries for recovery to cut.
4. Keep a copy of the store as the kill left it in ``pristine/``, for post-mortems.
5. Reopen, in this process, the store (process crash) or the shadow (power loss) and check:
   a. every acknowledged message is there: at its physical offset and by its msg id, with the
      same key, an intact body with the acknowledged digest, topic, queue and queue offset;
      through its queue at its queue offset; and by key (``query_message``, exactly one hit);
   b. every consume queue is dense from its min to its max offset, each entry leads to an
      intact record that carries that queue offset, physical offsets increase, and no key
      appears twice: nothing corrupt or unreadable is exposed, acknowledged or not;
   c. the store takes new writes (a single put, and a batch that must continue its queue's
      offsets densely) and they read back; then it closes cleanly.
   (a) covers this round's messages and a sample of older ones, (b) the queues from where the
   previous round's check ended; every ``full_every`` rounds and in the last round (a) covers
   every acknowledged message and (b) every queue from offset 0. Lookups by key are made for
   this round's messages and the sample (each one walks the index files newer than the message).
6. (power-loss mode) the checked shadow is the store of the next round.

A failure raises ``CrashFailure`` naming the mode, the round, the seeds, the kill moment, what
recovery reported and every problem found (the first 25); the store and ``pristine/`` stay on
disk.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import rocketstore
from rocketstore import GetStatus, Message, MessageStore, PutStatus
from rocketstore.recovery import RecoveryReport
from tests.crash.writer import (
    PROBE_TOPIC,
    SHADOW_TMP_SUFFIX,
    TOPICS,
    Ack,
    check_body,
    crash_config,
    make_body,
    parse_ack,
)

__all__ = ["CrashFailure", "CrashHarness", "DirMirror", "RoundResult", "env_int"]

REPO_ROOT = Path(__file__).resolve().parents[2]
GROUP = "crash-check"
QUERY_SLACK_MS = 10_000  # index times are whole seconds past the file's begin time
MAX_PROBLEMS_SHOWN = 25
READY_TIMEOUT_S = 60.0
PAGE = 4096


class CrashFailure(AssertionError):
    """The reopened store broke a promise: the message names the round, the seeds and what."""


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


@dataclass
class RoundResult:
    mode: str
    round: int
    seed: int
    kill: str
    acks: int
    expected: int
    checked: int
    full: bool
    abnormal: bool
    recovery: RecoveryReport | None
    seconds: float
    times: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        rec = self.recovery
        how = (
            f"recovery {'abnormal' if rec.abnormal else 'normal'} from {rec.scan_start} to {rec.end_offset} "
            f"({rec.stop}{', ' + rec.damage if rec.damage else ''}), {rec.records_scanned} records, "
            f"reput from {rec.reput_from}, {rec.queue_entries_dropped} queue entries dropped"
            if rec is not None
            else "no recovery report"
        )
        return (
            f"{self.mode} round {self.round} seed {self.seed}: killed {self.kill}; {self.acks} acks, "
            f"{self.checked} checked{' (full)' if self.full else ''} of {self.expected}; {how}; "
            f"{self.seconds:.2f}s ({', '.join(f'{k} {v:.2f}' for k, v in self.times.items())})"
        )


@dataclass
class _WriterRun:
    lines: list[str] = field(default_factory=list)
    acks: int = 0
    ready_at: float | None = None
    opening: bool = False
    partial: str = ""


@dataclass
class _Verification:
    abnormal: bool = False
    recovery: RecoveryReport | None = None
    checked: int = 0
    problems: list[str] = field(default_factory=list)


class CrashHarness:
    """Crash rounds against one store directory (see the module docstring)."""

    def __init__(
        self,
        workdir: Path,
        flush: str,
        *,
        power_loss: bool = False,
        threads: int = 4,
        base_seed: int = 1,
        segment_size: int = 65536,
        cq_entries: int = 100,
        max_acks: int = 2000,
        max_seconds: float = 1.5,
        sample: int = 300,
        full_every: int = 20,
        write_back_index: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.workdir = workdir
        self.flush = flush
        self.power_loss = power_loss
        self.threads = threads
        self.base_seed = base_seed
        self.segment_size = segment_size
        self.cq_entries = cq_entries
        self.max_acks = max_acks
        self.max_seconds = max_seconds
        self.sample = sample
        self.full_every = max(1, full_every)
        self.write_back_index = write_back_index
        self.log = log or (lambda text: None)
        self.mode = f"{flush}{' power-loss' if power_loss else ' kill'}"
        # power-loss mode: two directories that swap roles each round (the checked shadow
        # becomes the store), kept equal by copying only what changed
        self.store_dir = workdir / ("disk-a" if power_loss else "store")
        self.shadow_dir = workdir / "disk-b"
        self.pristine_dir = workdir / "pristine"
        self.mirror = DirMirror()
        self.config = crash_config(flush, segment_size, cq_entries)
        self.expected: dict[str, Ack] = {}
        self.verified_max: dict[tuple[str, int], int] = {}  # queue max offsets after the last clean close
        self.positions: dict[str, tuple[str, int, int, int]] = {}  # key -> (topic, qid, qo, phys) seen
        self.results: list[RoundResult] = []

    # --- rounds --------------------------------------------------------------------------------
    def run(self, rounds: int) -> list[RoundResult]:
        for r in range(rounds):
            self.run_round(r, full=(r == rounds - 1 or (r + 1) % self.full_every == 0))
        return self.results

    def round_seed(self, round_no: int) -> int:
        return self.base_seed * 100_000 + round_no

    def run_round(self, round_no: int, *, full: bool = False) -> RoundResult:
        seed = self.round_seed(round_no)
        rng = random.Random(seed)
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.power_loss:
            self.store_dir.mkdir(exist_ok=True)
            self.mirror.sync(self.store_dir, self.shadow_dir)
        times = {"prepare": time.monotonic() - started}
        since_ns = time.time_ns()
        mark = time.monotonic()
        run, kill = self._run_writer(round_no, seed, rng)
        times["writer"] = time.monotonic() - mark
        mark = time.monotonic()
        acks = [parse_ack(line, round_no) for line in run.lines if line.startswith("A\t")]
        for ack in acks:
            if ack.key in self.expected:
                raise CrashFailure(f"{self._where(round_no, seed, kill)}: key {ack.key} acknowledged twice")
            self.expected[ack.key] = ack
        target = self.shadow_dir if self.power_loss else self.store_dir
        for leftover in target.rglob("*" + SHADOW_TMP_SUFFIX):
            leftover.unlink()  # a snapshot the kill interrupted: not part of the simulated disk
        if self.power_loss:
            kill += "; " + self._write_back(rng, since_ns - 2_000_000_000)
        if target.exists():
            self.mirror.sync(target, self.pristine_dir)
        times["copy"] = time.monotonic() - mark
        mark = time.monotonic()
        check, by_key = self._check_set(acks, rng, full)
        v = self._verify(target, round_no, seed, check, by_key, full, ready=run.ready_at is not None, rng=rng)
        if v.problems:
            shown = "\n  ".join(v.problems[:MAX_PROBLEMS_SHOWN])
            more = len(v.problems) - MAX_PROBLEMS_SHOWN
            raise CrashFailure(
                f"{self._where(round_no, seed, kill)}: {len(v.problems)} problem(s) after reopening "
                f"{target} ({len(acks)} acks this round, {len(self.expected)} expected in all; "
                f"abnormal={v.abnormal}; {v.recovery}); state before recovery kept in "
                f"{self.pristine_dir}; rerun with ROCKETSTORE_CRASH_SEED={self.base_seed} "
                f"ROCKETSTORE_CRASH_ROUNDS={round_no + 1}:\n  {shown}"
                + (f"\n  ... and {more} more" if more > 0 else "")
            )
        times["check"] = time.monotonic() - mark
        if self.power_loss:
            self.store_dir, self.shadow_dir = self.shadow_dir, self.store_dir
        result = RoundResult(
            self.mode,
            round_no,
            seed,
            kill,
            len(acks),
            len(self.expected),
            v.checked,
            full,
            v.abnormal,
            v.recovery,
            time.monotonic() - started,
            times,
        )
        self.results.append(result)
        self.log(result.summary())
        return result

    def _where(self, round_no: int, seed: int, kill: str) -> str:
        return f"[{self.mode} round {round_no} seed {seed} base seed {self.base_seed}, killed {kill}]"

    def _check_set(self, acks: list[Ack], rng: random.Random, full: bool) -> tuple[list[Ack], set[str]]:
        """The acknowledged messages to check: this round's, and a sample of the older ones (all
        of them in a full check); and the keys to look up by key: this round's and a sample
        (walking the index of a large store for every old key would dominate the run time)."""
        fresh = {a.key for a in acks}
        older = [a for k, a in self.expected.items() if k not in fresh]
        sample = rng.sample(older, min(self.sample, len(older)))
        by_key = fresh | {a.key for a in sample}
        return (list(self.expected.values()) if full else acks + sample), by_key

    # --- the writer ----------------------------------------------------------------------------
    def _run_writer(self, round_no: int, seed: int, rng: random.Random) -> tuple[_WriterRun, str]:
        """Start the writer, SIGKILL it at a random moment, return what it printed."""
        # The moment: one round in ten at a random time after the spawn (perhaps before or
        # during the open); else a random time after the open or, sooner, a number of
        # acknowledgements (half the rounds log-uniform in 1..max_acks: many short rounds).
        early = rng.random() < 0.1
        if rng.random() < 0.5:
            ack_target = int(math.exp(rng.uniform(0.0, math.log(self.max_acks))))
        else:
            ack_target = self.max_acks
        delay = rng.uniform(0.0, 0.8) if early else rng.uniform(0.05, self.max_seconds)
        pace_ms = rng.uniform(0.5, 20.0) if rng.random() < 0.35 else 0.0  # a slow writer, long rounds
        routes = rng.choice((1, 2, 3, 12, 12, 12))  # few routes: hot queues whose segments roll fast
        cmd = [
            sys.executable,
            "-m",
            "tests.crash.writer",
            str(self.store_dir),
            "--flush",
            self.flush,
            "--threads",
            str(self.threads),
            "--seed",
            str(seed),
            "--segment-size",
            str(self.segment_size),
            "--cq-entries",
            str(self.cq_entries),
            "--pace-ms",
            f"{pace_ms:.3f}",
            "--routes",
            str(routes),
        ]
        if self.power_loss:
            cmd += ["--shadow", str(self.shadow_dir)]
        env = dict(os.environ)
        src = str(Path(rocketstore.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), src, env.get("PYTHONPATH")) if p)
        err_path = self.workdir / f"writer-{round_no}.stderr"
        run = _WriterRun()
        enough = threading.Event()
        with err_path.open("wb") as err:
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=err)
            spawned = time.monotonic()
            assert proc.stdout is not None
            stdout = proc.stdout

            def read() -> None:
                for raw in stdout:
                    line = raw.decode(errors="replace")
                    if not line.endswith("\n"):
                        run.partial = line  # the process died mid-write: not a whole acknowledgement
                        break
                    run.lines.append(line)
                    if line.startswith("A\t"):
                        run.acks += 1
                        if run.acks >= ack_target:
                            enough.set()
                    elif line.startswith("READY"):
                        run.ready_at = time.monotonic()
                    elif line.startswith("OPENING"):
                        run.opening = True
                enough.set()  # EOF: the writer is gone

            reader = threading.Thread(target=read, name="crash-writer-stdout", daemon=True)
            reader.start()
            if early:
                time.sleep(delay)
            else:
                deadline = spawned + READY_TIMEOUT_S
                while run.ready_at is None and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.002)
                if run.ready_at is None:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                    reader.join(10)
                    raise CrashFailure(
                        f"{self._where(round_no, seed, 'never')}: the writer did not open the store "
                        f"(exit {proc.returncode}); stderr:\n{_tail(err_path)}"
                    )
                enough.wait(max(0.0, run.ready_at + delay - time.monotonic()))
            alive = proc.poll() is None
            if alive:
                os.kill(proc.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            proc.wait()
            reader.join(30)
            stdout.close()
        if run.ready_at is not None:
            kill = f"{killed_at - run.ready_at:.3f}s after open"
        else:
            kill = f"{killed_at - spawned:.3f}s after spawn, {'during' if run.opening else 'before'} open"
        kill += f" (pace {pace_ms:.1f} ms, {routes} routes, ack target {ack_target}), {run.acks} acks"
        if not alive or proc.returncode != -signal.SIGKILL:
            raise CrashFailure(
                f"{self._where(round_no, seed, kill)}: the writer exited by itself with status "
                f"{proc.returncode} before the kill; stderr:\n{_tail(err_path)}"
            )
        errors = _tail(err_path, 100_000)
        if "UNMIRRORED-SYNC" in errors:
            raise CrashFailure(
                f"{self._where(round_no, seed, kill)}: the store made a file durable outside the points "
                f"the power-loss simulation mirrors (tests/crash/writer.py PowerLossShadow):\n"
                f"{errors[errors.index('UNMIRRORED-SYNC') :][:3000]}"
            )
        if err_path.stat().st_size == 0:
            err_path.unlink()
        return run, kill

    def _write_back(self, rng: random.Random, since_ns: int) -> str:
        """Power-loss mode, half the rounds: before the cut the kernel had written back some of
        the pages the writer dirtied but never synced. Each 4 KiB page of a commitlog or
        consume-queue file (index files too when ``write_back_index``) that differs between
        the store the writer left and the shadow is copied to the shadow with probability p.
        Pages go back whole and in any order, so records and entries can be torn at page
        boundaries: recovery must cut them."""
        if rng.random() < 0.5:
            return "no write-back"
        p = rng.choice((0.1, 0.5, 1.0))
        dirs = ["commitlog", "consumequeue"] + (["index"] if self.write_back_index else [])
        pages = 0
        for sub in dirs:
            for real in sorted((self.store_dir / sub).rglob("*")):
                if not real.is_file() or not real.name.isdigit() or real.stat().st_mtime_ns < since_ns:
                    continue
                shadow = self.shadow_dir / real.relative_to(self.store_dir)
                if not shadow.is_file() or shadow.stat().st_size != real.stat().st_size:
                    continue
                new, old = real.read_bytes(), shadow.read_bytes()
                if new == old:
                    continue
                fd = os.open(shadow, os.O_WRONLY)
                try:
                    for pos in range(0, len(new), PAGE):
                        page = new[pos : pos + PAGE]
                        if page != old[pos : pos + PAGE] and rng.random() < p:
                            os.pwrite(fd, page, pos)
                            pages += 1
                finally:
                    os.close(fd)
        return f"{pages} unsynced pages written back (p={p})"

    # --- checking ------------------------------------------------------------------------------
    def _verify(
        self,
        path: Path,
        round_no: int,
        seed: int,
        check: list[Ack],
        by_key: set[str],
        full: bool,
        *,
        ready: bool,
        rng: random.Random,
    ) -> _Verification:
        v = _Verification()
        maxima: dict[tuple[str, int], int] = {}
        try:
            store = MessageStore.open(path, self.config)
        except Exception as exc:
            v.problems.append(f"the store does not reopen: {exc!r}")
            return v
        try:
            v.abnormal = store.abnormal_shutdown_detected
            v.recovery = store.recovery
            if ready and not v.abnormal:
                v.problems.append(
                    "the writer had the store open when killed, yet no abnormal shutdown detected"
                )
            if not store.wait_dispatched(60):
                v.problems.append("dispatch did not catch up within 60 s after reopening")
            found = self._scan_queues(store, full, v.problems)
            v.checked = len(check)
            for ack in check:
                self._check_ack(store, ack, found, v.problems, by_key=ack.key in by_key)
            if not v.problems:
                self._check_writes(store, round_no, seed, rng, v.problems)
            maxima = {
                (topic, qid): store.max_offset_in_queue(topic, qid)
                for topic, qids in store.topics().items()
                for qid in qids
            }
        except Exception:
            v.problems.append(f"checking the reopened store raised:\n{traceback.format_exc()}")
        finally:
            try:
                store.close()
            except Exception as exc:
                v.problems.append(f"close after the checks failed: {exc!r}")
        if not v.problems:
            self.verified_max = maxima
        return v

    def _scan_queues(
        self, store: MessageStore, full: bool, problems: list[str]
    ) -> dict[tuple[str, int, int], int]:
        """Read every queue from where it was last verified (from its min offset when ``full``):
        dense offsets, intact records, increasing physical offsets, every key once.
        Returns (topic, queue, offset) -> physical offset of what was read."""
        found: dict[tuple[str, int, int], int] = {}
        topics = store.topics()
        for (topic, qid), verified in self.verified_max.items():
            if qid not in topics.get(topic, []):
                problems.append(f"queue {topic}/{qid} (verified up to offset {verified}) is gone")
        for topic, qids in sorted(topics.items()):
            for qid in sorted(qids):
                lo = store.min_offset_in_queue(topic, qid)
                hi = store.max_offset_in_queue(topic, qid)
                verified = self.verified_max.get((topic, qid), 0)
                where = f"queue {topic}/{qid} [{lo}, {hi})"
                if lo != 0:
                    problems.append(
                        f"{where}: min offset is {lo}, expected 0 (nothing expires in these tests)"
                    )
                if hi < verified:
                    problems.append(
                        f"{where}: max offset {hi} is below {verified}, what the previous round's check "
                        "saw before its clean close"
                    )
                start = lo if full else max(lo, min(verified, hi))
                self._scan_queue(store, topic, qid, start, hi, where, found, problems)
        return found

    def _scan_queue(
        self,
        store: MessageStore,
        topic: str,
        qid: int,
        start: int,
        end: int,
        where: str,
        found: dict[tuple[str, int, int], int],
        problems: list[str],
    ) -> None:
        off = start
        last_phys = -1
        if start > 0:
            prev = store.get_message(GROUP, topic, qid, start - 1, 1)
            if prev.messages:
                last_phys = prev.messages[0].physical_offset
        bad = 0
        while off < end and bad < 5:
            res = store.get_message(GROUP, topic, qid, off, 32)
            if res.status is not GetStatus.FOUND or not res.messages:
                problems.append(
                    f"{where}: offset {off} is unreadable: {res.status.name}, next begin offset "
                    f"{res.next_begin_offset}"
                )
                bad += 1
                off = max(off + 1, res.next_begin_offset)
                continue
            for m in res.messages:
                phys = m.physical_offset
                at = f"{where}: offset {off} (commitlog offset {phys})"
                try:
                    body = m.body
                    key = check_body(body)
                    qo, mtopic, mqid, keys = m.queue_offset, m.topic, m.queue_id, m.keys
                except Exception as exc:
                    problems.append(f"{at}: corrupt message exposed: {exc!r}")
                    bad += 1
                    off += 1
                    continue
                if qo != off:
                    problems.append(f"{at}: the record says queue offset {qo} (key {key})")
                    bad += 1
                    off = qo + 1 if qo > off else off + 1
                    continue
                if (mtopic, mqid) != (topic, qid):
                    problems.append(f"{at}: the record belongs to {mtopic}/{mqid} (key {key})")
                    bad += 1
                if key not in keys:
                    problems.append(f"{at}: body of {key} but KEYS {keys}")
                if phys <= last_phys:
                    problems.append(f"{at}: physical offset not above the previous entry's {last_phys}")
                last_phys = phys
                seen = self.positions.get(key)
                here = (topic, qid, off, phys)
                if seen is not None and seen != here:
                    problems.append(f"{at}: key {key} was seen before at {seen}: duplicate or moved")
                self.positions[key] = here
                found[(topic, qid, off)] = phys
                off += 1
            if res.next_begin_offset != off and off < end:
                problems.append(
                    f"{where}: get from offset {off} returned next begin offset {res.next_begin_offset}"
                )
                bad += 1
        if bad >= 5:
            problems.append(f"{where}: stopped reading after 5 problems")

    def _check_ack(
        self,
        store: MessageStore,
        ack: Ack,
        found: dict[tuple[str, int, int], int],
        problems: list[str],
        *,
        by_key: bool = True,
    ) -> None:
        what = (
            f"acknowledged {ack.key} (round {ack.round}, {ack.topic}/{ack.queue_id} queue offset "
            f"{ack.queue_offset}, commitlog offset {ack.physical_offset})"
        )
        m = store.look_message_by_offset(ack.physical_offset)
        if m is None:
            problems.append(
                f"{what}: lost -- no message at its commitlog offset (the log now ends at "
                f"{store.max_phy_offset()})"
            )
            return
        try:
            body = m.body
            if hashlib.sha256(body).hexdigest() != ack.sha256:
                key = check_body(body)
                problems.append(f"{what}: another body at its offset (that of {key})")
                return
            check_body(body)
            mismatch: list[tuple[str, object, object]] = [
                (name, got, want)
                for name, got, want in (
                    ("topic", m.topic, ack.topic),
                    ("queue", m.queue_id, ack.queue_id),
                    ("queue offset", m.queue_offset, ack.queue_offset),
                    ("msg id", m.msg_id, ack.msg_id),
                )
                if got != want
            ]
            if ack.key not in m.keys:
                mismatch.append(("keys", m.keys, [ack.key]))
        except Exception as exc:
            problems.append(f"{what}: corrupt at its offset: {exc!r}")
            return
        if mismatch:
            problems.append(f"{what}: fields differ (name, stored, acknowledged): {mismatch}")
        by_id = store.view_message_by_id(ack.msg_id)
        if by_id is None or by_id.physical_offset != ack.physical_offset:
            problems.append(f"{what}: view_message_by_id({ack.msg_id}) gives {by_id!r}")
        phys = found.get((ack.topic, ack.queue_id, ack.queue_offset))
        if phys is None:
            res = store.get_message(GROUP, ack.topic, ack.queue_id, ack.queue_offset, 1)
            phys = res.messages[0].physical_offset if res.messages else None
            if phys is None:
                problems.append(f"{what}: not readable through its queue: {res.status.name}")
                return
        if phys != ack.physical_offset:
            problems.append(f"{what}: its queue offset leads to commitlog offset {phys}")
        if not by_key:
            return
        hits = store.query_message(ack.topic, ack.key, begin=max(0, ack.store_timestamp - QUERY_SLACK_MS))
        offsets = [h.physical_offset for h in hits]
        if offsets != [ack.physical_offset]:
            problems.append(f"{what}: query_message by key gives commitlog offsets {offsets}")

    def _check_writes(
        self, store: MessageStore, round_no: int, seed: int, rng: random.Random, problems: list[str]
    ) -> None:
        """(c): the recovered store takes a single put and a batch that continues a queue."""
        topic, qid = rng.choice(TOPICS), rng.randrange(4)
        first_qo = store.max_offset_in_queue(topic, qid)
        keyed: list[tuple[str, Message]] = []
        for i, (t, q) in enumerate([(PROBE_TOPIC, 0)] + [(topic, qid)] * 5):
            key = f"probe{seed}-{i}"
            keyed.append((key, Message(t, make_body(key, rng), tags="probe", keys=[key], queue_id=q)))
        results = [store.put_message(keyed[0][1]), *store.put_messages([m for _, m in keyed[1:]])]
        for (key, _msg), res in zip(keyed, results):
            if res.status is not PutStatus.PUT_OK:
                problems.append(f"probe put {key} after recovery: {res.status.name}")
                return
        offsets = [r.queue_offset for r in results[1:]]
        if offsets != list(range(first_qo, first_qo + 5)):
            problems.append(
                f"probe batch to {topic}/{qid} got queue offsets {offsets}, the queue ended at {first_qo}"
            )
        if not store.wait_dispatched(30):
            problems.append("probe writes were not dispatched within 30 s")
            return
        acks = [
            Ack(
                key,
                r.topic,
                r.queue_id,
                r.physical_offset,
                r.queue_offset,
                r.msg_id or "",
                r.store_timestamp,
                hashlib.sha256(msg.body).hexdigest(),
                round_no,
            )
            for (key, msg), r in zip(keyed, results)
        ]
        before = len(problems)
        for ack in acks:
            self._check_ack(store, ack, {}, problems)
        if len(problems) == before:
            for ack in acks:
                self.expected[ack.key] = ack

    # --- reporting -----------------------------------------------------------------------------
    def totals(self) -> str:
        return summarize(self.mode, self.results, len(self.expected))


def summarize(mode: str, results: Iterable[RoundResult], expected: int) -> str:
    rs = list(results)
    if not rs:
        return f"{mode}: no rounds"
    secs = [r.seconds for r in rs]
    return (
        f"{mode}: {len(rs)} rounds, {sum(r.acks for r in rs)} acks, {expected} messages expected at the end, "
        f"{sum(1 for r in rs if r.abnormal)} abnormal recoveries, "
        f"{sum(1 for r in rs if r.recovery is not None and r.recovery.stop == 'corrupt')} torn tails cut; "
        f"round time mean {sum(secs) / len(secs):.2f}s, max {max(secs):.2f}s, total {sum(secs):.1f}s"
    )


Signature = tuple[int, int, int, int]


def _signatures(root: Path) -> dict[str, Signature]:
    sigs: dict[str, Signature] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            sigs[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return sigs


class DirMirror:
    """Makes a directory an exact copy of another, copying only the files that changed.

    Every file seen in a sync gets a content id, remembered with its (inode, size, mtime,
    ctime); a file whose signature is unchanged since still has that content, anything else
    gets a new id. A sync copies each file whose id differs on the two sides. Writes through
    a shared mapping update mtime (the first write to a page of a new mapping faults, and
    the fault updates the time), as do write(2), truncation and rename-over.
    """

    def __init__(self) -> None:
        self._known: dict[Path, dict[str, tuple[Signature, int]]] = {}
        self._next_id = 0

    def _ids(self, root: Path, sigs: dict[str, Signature]) -> dict[str, int]:
        known = self._known.get(root, {})
        ids: dict[str, int] = {}
        for rel, sig in sigs.items():
            seen = known.get(rel)
            if seen is not None and seen[0] == sig:
                ids[rel] = seen[1]
            else:
                self._next_id += 1
                ids[rel] = self._next_id
        return ids

    def sync(self, src: Path, dst: Path) -> int:
        """Make ``dst`` equal to ``src``; returns how many files were copied."""
        dst.mkdir(parents=True, exist_ok=True)
        src_sigs, dst_sigs = _signatures(src), _signatures(dst)
        src_ids, dst_ids = self._ids(src, src_sigs), self._ids(dst, dst_sigs)
        for rel in dst_sigs.keys() - src_sigs.keys():
            (dst / rel).unlink()
        copied = 0
        for rel in src_sigs:
            if dst_ids.get(rel) != src_ids[rel]:
                target = dst / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / rel, target)
                copied += 1
        for dirpath, dirs, _ in os.walk(dst, topdown=False):
            for name in dirs:
                d = Path(dirpath) / name
                if not (src / d.relative_to(dst)).is_dir():
                    shutil.rmtree(d)
        for dirpath, dirs, _ in os.walk(src):
            for name in dirs:
                (dst / Path(dirpath).relative_to(src) / name).mkdir(parents=True, exist_ok=True)
        new_dst_sigs = _signatures(dst)
        self._known[src] = {rel: (sig, src_ids[rel]) for rel, sig in src_sigs.items()}
        self._known[dst] = {rel: (new_dst_sigs[rel], src_ids[rel]) for rel in src_sigs}
        return copied


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no stderr: {exc})"
    return text[-limit:] or "(empty)"

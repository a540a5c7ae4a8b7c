"""Background jobs: one outcome however often it is read, owned by one
user, dropped `ttl` after it ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from sage_engine.config import Config
from sage_engine.errors import Cancelled, InvalidInput, NotFound
from sage_engine.services.jobs import Jobs, Ledger, memory_key


def test_a_job_runs_once_and_every_reader_gets_its_one_outcome():
    jobs, release, runs = Jobs(ttl_s=60), threading.Event(), []

    def work(progress, cancel):
        runs.append(1)
        progress(1, 2, "halfway")
        release.wait(30)
        return "stored"

    job = jobs.start("evaluation", work, owner="alice", attempt_id=7)
    assert not job.wait(0) and job.state == "working"
    release.set()
    assert job.wait(30) and job.outcome() == "stored" and job.state == "completed"
    assert jobs.for_attempt(7) is job and jobs.get(job.id, owner="alice").outcome() == "stored"
    assert runs == [1] and job.progress == (1.0, 2, "halfway")


def test_someone_elses_job_is_as_absent_as_a_made_up_one():
    jobs = Jobs(ttl_s=60)
    job = jobs.start("evaluation", lambda progress, cancel: None, owner="alice")
    job.wait(30)
    with pytest.raises(NotFound):
        jobs.get(job.id, owner="bob")
    assert jobs.owned_by("bob") == [] and jobs.owned_by("alice") == [job]


def test_a_finished_job_is_dropped_ttl_after_it_ended_and_a_running_one_never():
    jobs, release = Jobs(ttl_s=60), threading.Event()
    running = jobs.start("evaluation", lambda progress, cancel: release.wait(30), owner="alice", attempt_id=2)
    done = jobs.start("evaluation", lambda progress, cancel: "x", owner="alice", attempt_id=1)
    done.wait(30)
    running.updated_at -= 3600  # long idle, still working
    done.updated_at -= 61  # ended more than its ttl ago
    assert jobs.owned_by("alice") == [running]
    assert jobs.for_attempt(1) is None and jobs.for_attempt(2) is running
    with pytest.raises(NotFound):
        jobs.get(done.id)
    release.set()


def test_a_cancelled_job_ends_cancelled_and_a_refused_one_failed_with_its_error():
    jobs = Jobs(ttl_s=60)

    def stops(progress, cancel):
        cancel.wait(30)
        raise Cancelled("the evaluation was cancelled; nothing was recorded")

    job = jobs.start("evaluation", stops, owner="alice")
    job.cancel.set()
    assert job.wait(30) and job.state == "cancelled"
    with pytest.raises(Cancelled):
        job.outcome()

    def refuses(progress, cancel):
        raise InvalidInput("no such backend")

    failed = jobs.start("evaluation", refuses, owner="alice")
    assert failed.wait(30) and failed.state == "failed" and isinstance(failed.error, InvalidInput)


def test_a_listener_that_fails_is_dropped_and_the_job_goes_on():
    jobs, release = Jobs(ttl_s=60), threading.Event()
    job = jobs.start("evaluation", lambda progress, cancel: (release.wait(30), progress(1, 1, "done"))[1], owner="alice")
    seen = []

    def broken(_job):
        seen.append(1)
        raise RuntimeError("the event loop is gone")

    assert job.subscribe(broken) is not None
    release.set()
    assert job.wait(30) and job.state == "completed" and seen == [1]
    assert job.subscribe(broken) is None  # ended: nothing to listen to


def test_the_ledger_shows_a_running_evaluation_to_other_processes_until_it_ends(tmp_path):
    ledger, jobs, release = Ledger(tmp_path / "running"), Jobs(ttl_s=60), threading.Event()
    job = jobs.start("evaluation", lambda progress, cancel: release.wait(30), owner="alice", attempt_id=12)
    job.meta.update(task="relu", candidate_hash="h", candidate_path="/ws/k.py")
    ledger.publish(job)
    job.report(1, 3, "timing")
    ledger.publish(job)
    (note,) = ledger.entries()
    assert note.attempt_id == 12 and note.pid == os.getpid() and note.owner == "alice"
    assert (note.task, note.candidate_path, note.progress) == ("relu", "/ws/k.py", "timing")
    release.set()
    job.wait(30)
    ledger.remove(12)
    assert ledger.entries() == [] and ledger.get(12) is None


def test_an_entry_whose_process_is_gone_is_skipped_and_removed(tmp_path):
    ledger = Ledger(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "5.json").write_text(json.dumps({"attempt_id": 5, "pid": gone.pid, "owner": "alice"}))
    (tmp_path / "6.json").write_text("not json")  # being written, or not an entry
    assert ledger.entries() == []
    assert not (tmp_path / "5.json").exists()


def test_a_cancel_asked_by_another_process_cancels_the_job(tmp_path):
    ledger, jobs = Ledger(tmp_path), Jobs(ttl_s=60)

    def work(progress, cancel):
        if cancel.wait(30):
            raise Cancelled("cancelled")
        return "finished"

    job = jobs.start("evaluation", work, owner="alice", attempt_id=3)
    ledger.publish(job)
    ledger.watch_cancel(job)
    ledger.request_cancel(3)
    assert job.wait(30) and job.state == "cancelled"


def test_two_memories_sharing_a_cache_keep_separate_ledgers(tmp_path):
    one, two = Config(db_path=tmp_path / "a.db"), Config(db_path=tmp_path / "b.db")
    assert memory_key(one) != memory_key(two) and memory_key(one) == memory_key(Config(db_path=tmp_path / "a.db"))
    assert memory_key(Config(db_url="postgresql://127.0.0.1/sage")) != memory_key(one)

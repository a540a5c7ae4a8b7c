"""Background jobs: one outcome however often it is read, owned by one
user, dropped `ttl` after it ends."""

from __future__ import annotations

import threading

import pytest

from sage_engine.errors import Cancelled, InvalidInput, NotFound
from sage_engine.services.jobs import Jobs


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

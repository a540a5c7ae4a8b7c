from __future__ import annotations

import pytest

from sage_engine.evaluation.common.timing import DeviceTimer, get_timer, measure_alternating, speedup, stats


def test_stats_give_median_iqr_mean_min_in_milliseconds():
    s = stats([0.001, 0.002, 0.003, 0.004, 0.100])
    assert s.median_ms == pytest.approx(3.0)
    assert s.iqr_ms == pytest.approx(2.0)
    assert s.min_ms == pytest.approx(1.0) and s.reps == 5
    assert s.mean_ms == pytest.approx(22.0)


def test_alternating_rounds_stop_at_max_reps_and_alternate_order():
    calls: list[str] = []
    ref_s, cand_s = measure_alternating(
        lambda: calls.append("r"), lambda: calls.append("c"), warmup=1, min_reps=2, max_reps=4, budget_s=100.0
    )
    assert len(ref_s) == len(cand_s) == 4
    assert "".join(calls) == "rc" + "rc" + "cr" + "rc" + "cr"


def test_work_between_rounds_comes_before_each_side_equally_often():
    # The checks among the samples run here: a side that always came right
    # after them would meet the caches they left, the other only half the time.
    calls: list[str] = []
    measure_alternating(
        lambda: calls.append("r"),
        lambda: calls.append("c"),
        warmup=0,
        min_reps=4,
        max_reps=4,
        budget_s=100.0,
        between=lambda: calls.append("s"),
    )
    order = "".join(calls)
    assert order == "src" + "scr" + "src" + "scr"
    assert order.count("sr") == order.count("sc") == 2 and "rr" not in order and "cc" not in order


def test_budget_stops_after_min_reps_once_spent():
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5  # every read of the clock moves time on by half a second
        return now[0]

    ref_s, _ = measure_alternating(lambda: None, lambda: None, warmup=0, min_reps=3, max_reps=1000, budget_s=0.1, clock=clock)
    assert len(ref_s) == 3


def test_timers_are_chosen_by_name_or_module_factory(tmp_path, monkeypatch):
    timer = get_timer("perf_counter")
    calls: list[int] = []
    assert timer(calls.append, 3) >= 0.0 and calls == [0, 1, 2]
    (tmp_path / "my_timers.py").write_text("def fixed():\n    return lambda call, n: 0.25\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_timer("my_timers:fixed")(lambda i: None, 1) == 0.25
    with pytest.raises(ValueError, match="unknown timer"):
        get_timer("sundial")


def test_speedup_is_reference_over_candidate():
    assert speedup(2.0, 1.0) == 2.0 and speedup(1.0, 0.0) is None


class RecordingDevice:
    """A recording stand-in for a `torch.cuda` / `torch.npu` module: a
    simulated host clock and device timeline with a current and a side
    stream, and a log of what the timer records, synchronises and reads.
    A device-wide synchronisation costs the host SYNC_S even when idle (the
    round trip the timer must keep out of its times)."""

    SYNC_S = 50e-6
    LAUNCH_S = 5e-6

    def __init__(self):
        self.host = 0.0  # the host's clock
        self.current = 0.0  # when the current stream's queued work ends
        self.side = 0.0  # likewise for a side stream
        self.log: list[str] = []
        device = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self, stream=None):
                self.t = device.current = max(device.current, device.host)
                device.log.append("record")

            def synchronize(self):
                device.host = max(device.host, self.t)
                device.log.append("event-sync")

            def elapsed_time(self, end):
                device.log.append("read")
                return (end.t - self.t) * 1000.0

        self.Event = Event

    def synchronize(self):
        self.host = max(self.host, self.current, self.side) + self.SYNC_S
        self.log.append("device-sync")

    def clock(self) -> float:
        return self.host

    def work(self, seconds: float, side: bool = False) -> None:
        """One kernel launch: the host spends LAUNCH_S, the stream `seconds`."""
        self.host += self.LAUNCH_S
        if side:
            self.side = max(self.side, self.host) + seconds
        else:
            self.current = max(self.current, self.host) + seconds
        self.log.append("call")


class Flush:
    def __init__(self, device: RecordingDevice):
        self.device = device

    def zero_(self):
        self.device.work(20e-6)
        self.device.log[-1] = "flush"


def test_device_timer_records_around_each_call_without_synchronising_inside():
    device = RecordingDevice()
    timer = DeviceTimer(device, Flush(device), clock=device.clock)
    device.log.clear()
    seconds = timer(lambda i: device.work(1e-3), 3)
    assert seconds == pytest.approx(1e-3)  # the device's work alone: no round trip, no end-event launch
    timed = device.log[: device.log.index("event-sync")]
    assert timed == ["flush", "record", "call", "record"] * 3
    assert device.log.count("device-sync") == 1  # once, after the last end event: the leftover check
    assert timer.leftover_seen == 0 and not timer.all_streams


def test_device_timer_counts_work_left_on_another_stream():
    device = RecordingDevice()
    timer = DeviceTimer(device, clock=device.clock)
    seconds = timer(lambda i: device.work(1e-3, side=True), 2)
    # The current stream's events saw nothing; the work is counted all the same.
    assert seconds >= 1e-3
    assert timer.all_streams and timer.leftover_seen == 1
    device.log.clear()
    assert timer(lambda i: device.work(1e-3, side=True), 1) >= 1e-3
    assert device.log == ["record", "call", "device-sync", "record", "event-sync", "read"]


def test_device_timer_puts_short_calls_several_to_an_event_pair():
    device = RecordingDevice()
    timer = DeviceTimer(device, Flush(device), clock=device.clock)
    timer(lambda i: device.work(10e-6), 1)  # the first call tells how short they are
    device.log.clear()
    assert timer(lambda i: device.work(10e-6), 10) == pytest.approx(10e-6)
    timed = device.log[: device.log.index("event-sync")]
    assert timed.count("record") == 4 and timed.count("flush") == 2 and timed.count("call") == 10


def test_device_timer_keeps_the_event_functions_it_was_made_with():
    device = RecordingDevice()
    timer = DeviceTimer(device, clock=device.clock)
    device.Event.elapsed_time = lambda start, end: 0.0  # what a candidate could try after the timer exists
    device.Event.record = lambda self, stream=None: None
    assert timer(lambda i: device.work(1e-3), 1) == pytest.approx(1e-3, rel=0.01)  # its launch gap included


def test_the_host_timer_keeps_what_runs_before_each_call_out_of_its_time():
    import time

    seen: list[str] = []

    def before(i: int) -> None:
        seen.append(f"before {i}")
        time.sleep(0.004)

    def call(i: int) -> None:
        seen.append(f"call {i}")
        time.sleep(0.001)

    from sage_engine.evaluation.common.timing import perf_counter_timer

    seconds = perf_counter_timer()(call, 3, before)
    assert seen == ["before 0", "call 0", "before 1", "call 1", "before 2", "call 2"]
    assert 0.001 <= seconds < 0.004  # the sleeps before each call are not in it


def test_the_device_timer_gives_each_call_its_own_pair_when_inputs_change_between_calls():
    device = RecordingDevice()
    timer = DeviceTimer(device, Flush(device), clock=device.clock)
    timer(lambda i: device.work(10e-6), 1)  # short calls: several would share a pair
    device.log.clear()

    def before(i: int) -> None:
        device.work(1e-6)
        device.log[-1] = "churn"

    seconds = timer(lambda i: device.work(10e-6), 3, before)
    assert seconds == pytest.approx(10e-6)
    timed = device.log[: device.log.index("event-sync")]
    assert timed == ["churn", "flush", "record", "call", "record"] * 3

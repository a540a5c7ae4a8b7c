"""The profile phase of one evaluation, as the worker runs it: once timing is
over, each side in turn answers `profile-kernels N` (its kernels over N calls
of the timed case; the reference adds the call's work), N sized from the
median timing measured so the phase costs about `budget_s` a side.

The medians are never re-timed, and a side that cannot be profiled leaves
the evaluation's result as it was: its reason goes in `errors`. Standard
library only (torch lives in the children).
"""

from __future__ import annotations

import json

from sage_engine.evaluation.protocol import ProfileOptions, ProfileReport, TimingReport
from sage_engine.evaluation.protocol.profile import side_profile, work
from sage_engine.evaluation.wire import ProtocolError
from sage_engine.evaluation.worker.supervisor import Ended, Supervisor

# How an evaluation may end while profiled and still be reported: a side that
# failed, hung or died only now. Cancels, the host going away and too many
# processes end it as they would anywhere.
PROFILE_SURVIVES = (None, "timeout")


def profile_phase(sup: Supervisor, timing: TimingReport, options: ProfileOptions) -> ProfileReport:
    out = ProfileReport()
    for role in ("reference", "candidate"):
        child = sup.children[role]
        median_s = getattr(timing, role).median_ms / 1000.0
        try:
            text = sup.command(child, f"profile-kernels {options.calls(median_s)}", sup.deadline)
            reply = json.loads(text.partition(" ")[2])
            if not isinstance(reply, dict):
                raise ProtocolError("the reply is not a JSON object")
            setattr(out, role, side_profile(reply.get("side")))
            if role == "reference" and reply.get("work") is not None:
                out.work = work(reply["work"])  # the candidate's claim of its work is never asked for
        except Ended as end:
            if end.killed not in PROFILE_SURVIVES:
                raise
            out.errors[role] = (end.report.message if end.report is not None
                                else f"the {role} process ended while profiled ({end.killed or 'exited'})")
        except (ValueError, TypeError, ProtocolError) as exc:
            out.errors[role] = f"the {role}'s profile could not be read: {exc}"
    return out

"""Byte formats between the processes of one evaluation.

- Events: JSON lines (their types in `protocol.py`); a child's carry the
  evaluation's token, and a line without it is not believed, only counted.
- Commands and replies: one short ASCII line each way (`rep 4` -> `ok`), so a
  timing round trip costs a pipe write and read, not a JSON parse.
- Value frames: the candidate's outputs, sent by the candidate process to
  the reference process, which compares them (each trial's inputs go the
  other way in shared memory, only their header as a frame:
  `child/inputs.py`): a length-prefixed JSON header
  describing each value (a tensor's dtype, shape and byte count, or a plain
  number), then each tensor's raw bytes. The reader checks every header
  against what it expects before reading a byte, so a hostile sender can
  neither make it allocate more than the reference's own outputs nor
  smuggle an object in: only bytes cross, and the reader builds plain
  tensors from them.

Standard library; torch is imported lazily by the frame functions.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import struct
import time
from typing import Any

HEADER_MAX = 1 << 20  # a frame header describes a few dozen values
LINE_MAX = 32 << 20  # an event line longer than this is not from SAGE
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64", "complex128")
_LEN = struct.Struct("!I")
_type = type  # captured before any candidate code runs in this process


class ProtocolError(Exception):
    """A peer sent something that is not the protocol."""


class ChannelClosed(ProtocolError):
    """The peer went away (closed its end)."""


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise ChannelClosed("the peer closed the channel")
        got += k
    return buf


def json_text(obj: Any) -> str:
    return json.dumps(obj, default=str)


class LineReader:
    """Lines from a non-blocking fd, read as data arrives."""

    def __init__(self, fd: int, limit: int = LINE_MAX):
        self.fd, self.limit = fd, limit
        self.buffer = bytearray()
        self.closed = False
        self.overflows = 0

    def fill(self) -> bool:
        """Read what is available; False once the writer closed its end."""
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return True
        if not data:
            self.closed = True
            return False
        self.buffer += data
        if len(self.buffer) > self.limit and b"\n" not in self.buffer:
            self.buffer.clear()
            self.overflows += 1
        return True

    def line(self) -> bytes | None:
        nl = self.buffer.find(b"\n")
        if nl < 0:
            return None
        out = bytes(self.buffer[:nl])
        del self.buffer[: nl + 1]
        return out

    def wait_line(self, deadline: float) -> bytes | None:
        """Block (up to `deadline`, a time.monotonic value) for one line; None on timeout or EOF."""
        while True:
            got = self.line()
            if got is not None or self.closed:
                return got
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], None if remaining == float("inf") else remaining)
            if ready:
                self.fill()


# ------------------------------------------------------------------ frames


def describe(value: Any, torch: Any) -> tuple[dict[str, Any], Any]:
    """(header entry, CPU tensor to send or None) for one output value.
    Only exact `torch.Tensor`s and plain numbers travel; anything else is
    described so the reader can say what was returned."""
    if _type(value) is torch.Tensor:
        t = value.detach()
        entry: dict[str, Any] = {
            "kind": "tensor",
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            "device": str(t.device),
        }
        if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            return {"kind": "unsupported", "why": f"a {t.layout} / {t.device.type} tensor"}, None
        if entry["dtype"] not in DTYPES:
            return {"kind": "unsupported", "why": f"dtype {entry['dtype']}"}, None
        # Materialise: lazy conjugate/negative views resolved, contiguous, on
        # the host. Its bytes are written straight from this tensor.
        t = t.resolve_conj().resolve_neg().to("cpu").contiguous()
        entry["nbytes"] = t.numel() * t.element_size()
        if value.requires_grad:
            entry["requires_grad"] = True  # inputs a forward differentiates (autograd.grad)
        return entry, t
    if isinstance(value, torch.Tensor):
        cls = _type(value)
        return {"kind": "subclass", "type": f"{cls.__module__}.{cls.__qualname__}"}, None
    if value is None or _type(value) in (bool, int, float):
        return {"kind": "value", "value": value}, None
    cls = _type(value)
    return {"kind": "other", "type": f"{cls.__module__}.{cls.__qualname__}"}, None


def write_frame(fd: int, header: dict[str, Any], tensors: list[Any]) -> int:
    """Writes one frame; returns the bytes that crossed."""
    data = json.dumps(header).encode()
    if len(data) > HEADER_MAX:
        raise ProtocolError(f"frame header of {len(data)} bytes")
    sent = _LEN.size + len(data)
    try:
        write_all(fd, _LEN.pack(len(data)) + data)
        for t in tensors:
            n = t.numel() * t.element_size()
            if n:
                write_all(fd, _bytes_of(t, n))
                sent += n
    except BrokenPipeError as exc:
        raise ChannelClosed("the peer closed the channel") from exc
    return sent


def plain_tensor(value: Any, torch: Any) -> bool:
    """An exact, dense, strided torch.Tensor of a dtype frames carry."""
    return (
        _type(value) is torch.Tensor
        and value.layout == torch.strided
        and not value.is_quantized
        and value.device.type != "meta"
        and str(value.dtype).replace("torch.", "") in DTYPES
    )


def shareable(value: Any, torch: Any) -> bool:
    """What may cross as an input: a plain tensor, a number, a bool or None."""
    return plain_tensor(value, torch) or value is None or _type(value) in (bool, int, float)


def _bytes_of(t: Any, n: int) -> memoryview:
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def read_header(fd: int) -> dict[str, Any]:
    (n,) = _LEN.unpack(read_exact(fd, _LEN.size))
    if n > HEADER_MAX:
        raise ProtocolError(f"frame header of {n} bytes")
    try:
        header = json.loads(read_exact(fd, n))
    except ValueError as exc:
        raise ProtocolError(f"unreadable frame header: {exc}") from exc
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not an object")
    return header


def read_tensor(fd: int, entry: dict[str, Any], torch: Any) -> Any:
    """A plain CPU tensor from the stream, for an entry already checked
    against the expected dtype and shape."""
    dtype = getattr(torch, entry["dtype"])
    shape = [int(s) for s in entry["shape"]]
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if int(entry.get("nbytes", -1)) != nbytes:
        raise ProtocolError(f"a {entry['dtype']} tensor of shape {shape} cannot hold {entry.get('nbytes')} bytes")
    out = torch.empty(shape, dtype=dtype)
    if nbytes:
        view = _bytes_of(out, nbytes)
        got = 0
        while got < nbytes:  # straight into the tensor's memory: no extra copy
            k = os.readv(fd, [view[got:]])
            if k == 0:
                raise ChannelClosed("the peer closed the channel")
            got += k
    if entry.get("requires_grad") and not out.requires_grad and (out.is_floating_point() or out.is_complex()):
        out.requires_grad_(True)
    return out


def skip_tensors(fd: int, header: dict[str, Any]) -> None:
    """Reads and drops the tensor bytes a frame's header announces (a frame
    nobody will judge must still leave the stream at the next header)."""
    entries = [e for key in ("outputs", "mutated") for e in header.get(key, []) if isinstance(e, dict)]
    for entry in entries:
        if entry.get("kind") != "tensor":
            continue
        left = int(entry.get("nbytes", 0))
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise ChannelClosed("the peer closed the channel")
            left -= len(chunk)

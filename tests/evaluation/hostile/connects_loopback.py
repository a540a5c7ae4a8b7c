"""Connects to a listener on the host's loopback interface and sends what
it knows. The ReLU itself is right.

task: relu
expect: correct
"""

import asyncio

import torch
import torch.nn as nn

PORT = @PORT@


async def _call_home():
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", PORT), 2)
        writer.write(b"HOSTILE hello from the sandbox\n")
        await writer.drain()
        writer.close()
        print("HOSTILE connected")
    except Exception as exc:  # noqa: BLE001
        print("HOSTILE blocked", type(exc).__name__, exc)


asyncio.run(_call_home())


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=0.0)

"""The judge's channel to a real kernel (labtools/judge/kernel_channel.py): requests travel
over the kernel's stdin channel while a test holds the kernel, and whatever the student's
code does there (loop, ask for input, print, exit) ends as a failed request, never as a
hung grader or a kernel the notebook can no longer use."""

from __future__ import annotations

import time

import pytest
import torch
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync

from labtools import judge
from labtools.judge import wire

MODULE = "_labtools_agent_test"
STUDENT_CODE = '''
import os, time
def double(x):
    return x * 2
def spins(x):
    while True:
        pass
def asks(x):
    return input("your name? ")
def chatty(x):
    for i in range(20000):
        print("line", i)
    return x + 1
def exits(x):
    os._exit(3)
'''


class _Client:
    """What KernelChannel needs of GradingExecute: its kernel manager and client."""

    def __init__(self):
        self.km = AsyncKernelManager(kernel_name="python3")
        run_sync(self.km.start_kernel)()
        self.kc = self.km.client()
        self.kc.start_channels()
        run_sync(self.kc.wait_for_ready)(timeout=60)

    def execute(self, code: str) -> dict:
        return run_sync(self.kc.execute_interactive)(code, timeout=30, output_hook=lambda msg: None)

    def close(self):
        self.kc.stop_channels()
        run_sync(self.km.shutdown_kernel)(now=True)


@pytest.fixture()
def kernel():
    client = _Client()
    assert client.execute(judge.agent_bootstrap(MODULE))["content"]["status"] == "ok"
    assert client.execute(STUDENT_CODE)["content"]["status"] == "ok"
    channel = judge.KernelChannel(client, f"__import__('sys').modules[{MODULE!r}].agent")
    yield client, channel, wire.Student(channel)
    client.close()


def _kernel_is_free(client) -> bool:
    reply = client.execute("free = 40 + 2")
    return reply["content"]["status"] == "ok"


def test_requests_are_answered_and_the_kernel_is_free_after_the_test(kernel):
    client, channel, student = kernel
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(3):  # several requests in one test, one serving loop
        assert torch.equal(student.double(x), x * 2)
    channel.end_test()
    assert _kernel_is_free(client)
    assert torch.equal(student.double(x + 1), (x + 1) * 2)  # a later test serves again
    channel.end_test()


def test_an_endless_loop_times_out_and_the_next_test_still_runs(kernel):
    client, channel, student = kernel
    channel.deadline = time.monotonic() + 2
    start = time.monotonic()
    with pytest.raises(judge.JudgeTimeout):
        student.spins(1)
    assert time.monotonic() - start < 15
    channel.end_test()
    channel.deadline = float("inf")
    assert student.double(21) == 42
    channel.end_test()
    assert _kernel_is_free(client)


def test_input_asked_by_the_students_code_is_a_failed_request(kernel):
    client, channel, student = kernel
    channel.deadline = time.monotonic() + 30
    with pytest.raises(wire.WireError, match="asked for input"):
        student.asks(1)
    channel.end_test()
    assert student.double(2) == 4
    channel.end_test()
    assert _kernel_is_free(client)


def test_printing_does_not_disturb_the_answer(kernel):
    client, channel, student = kernel
    assert student.chatty(1) == 2
    assert student.double(3) == 6
    channel.end_test()
    assert _kernel_is_free(client)


def test_a_kernel_that_dies_raises_dead_kernel(kernel):
    client, channel, student = kernel
    channel.deadline = time.monotonic() + 30
    with pytest.raises(DeadKernelError):
        student.exits(1)
    channel.end_test()  # nothing is serving any more: returns at once

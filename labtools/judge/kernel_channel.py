"""The judge's channel to a grading kernel: requests to the wire's Agent over stdin.

States: idle (nothing serving) -> serving (one `Agent.serve` execution holds the kernel
for the current test; each request is an input reply, each reply the next prompt) ->
idle again at `end_test` (an empty request ends the loop), or abandoned when a request
outlives the test's deadline (the kernel is interrupted) or the kernel dies
(nbclient's DeadKernelError, which GradingExecute turns into a restart).
"""

from __future__ import annotations

import base64
import time

from . import wire


class JudgeTimeout(TimeoutError):
    pass


class KernelChannel(wire.Channel):
    """Requests to the Agent in a grading kernel, through nbclient's kernel client.

    `client` is the GradingExecute running the notebook. A test holds the kernel in one
    execution of `Agent.serve`: each request travels as the answer to the kernel's input
    request and each reply comes back as the next input request's prompt (base64), so a
    request costs one stdin round trip, not a whole execute_request. `end_test` lets the
    kernel go. A request that outlives the test's deadline interrupts the kernel; a dead
    kernel raises nbclient's DeadKernelError, which GradingExecute turns into a restart.
    """

    def __init__(self, client, agent_expression: str):
        self.client = client
        self.agent_expression = agent_expression
        self.deadline = float("inf")
        self._serving: str | None = None  # msg_id of the execution serving this test

    def transfer(self, message: bytes) -> bytes:
        from nbclient.util import run_sync

        return run_sync(self._transfer)(message)

    def end_test(self) -> None:
        from nbclient.util import run_sync

        if self._serving is not None:
            run_sync(self._end)()

    def reset(self) -> None:
        """The kernel was (re)started: nothing is serving, and the lab's helpers are gone."""
        self._serving = None
        self.lab_defined = False

    async def _transfer(self, message: bytes) -> bytes:
        kc = self.client.kc
        if self._serving is None:
            self._serving = kc.execute(f"{self.agent_expression}.serve({self.agent_expression}.ask)",
                                       silent=False, store_history=False, allow_stdin=True)
            await self._prompt()  # the loop's first, empty prompt: it is listening
        kc.input(base64.b64encode(message).decode())
        prompt = await self._prompt()
        try:
            return base64.b64decode(prompt, validate=True)
        except ValueError:
            await self._abandon()
            raise wire.WireError("malformed answer from the notebook's kernel") from None

    async def _prompt(self) -> str:
        """The next input request of the serving loop: what follows REPLY_PREFIX in its prompt."""
        import queue

        from nbclient.exceptions import DeadKernelError

        kc, km = self.client.kc, self.client.km
        while True:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                await self._abandon()
                raise JudgeTimeout("your code took longer than the time limit for this test (an endless loop?)")
            try:
                msg = await kc.get_stdin_msg(timeout=min(0.5, remaining))
            except queue.Empty:
                if not await km.is_alive():
                    self._serving = None
                    raise DeadKernelError("the kernel died while the judge was calling your code") from None
                if await self._loop_ended():
                    raise wire.WireError("no answer from the notebook's kernel (was it restarted or changed?)")
                continue
            if msg.get("parent_header", {}).get("msg_id") != self._serving or msg["msg_type"] != "input_request":
                continue
            prompt = str(msg["content"].get("prompt", ""))
            if not prompt.startswith(wire.REPLY_PREFIX):  # the student's own input() call
                await self._abandon()
                raise wire.WireError("your code asked for input while the judge called it")
            if len(prompt) > 2 * wire.MAX_REPLY_BYTES:
                await self._abandon()
                raise wire.WireError("your code's answer is too large")
            return prompt[len(wire.REPLY_PREFIX):]

    async def _loop_ended(self, wait: float = 0.0) -> bool:
        """Drain the serving execution's output; True (and nothing serving) once it is idle."""
        import queue

        kc = self.client.kc
        until = time.monotonic() + wait
        while True:
            try:
                msg = await kc.get_iopub_msg(timeout=max(0.0, until - time.monotonic()))
            except queue.Empty:
                return False
            if msg.get("parent_header", {}).get("msg_id") == self._serving and msg["msg_type"] == "status" \
                    and msg["content"].get("execution_state") == "idle":
                self._serving = None
                return True

    async def _end(self) -> None:
        self.client.kc.input("")  # an empty request ends the loop
        if not await self._loop_ended(wait=min(10.0, max(1.0, self.deadline - time.monotonic()))):
            await self._abandon()

    async def _abandon(self) -> None:
        """Stop the serving loop whatever it is doing (an interrupt), and wait for it a little."""
        if self._serving is not None:
            await self.client.km.interrupt_kernel()
            await self._loop_ended(wait=5.0)
        self._serving = None

"""GraphedLauncher's calls without a GPU: torch.cuda's graph capture, streams and synchronization stand-ins
around a launcher that doubles its input on the CPU, and a clock that makes one way slower. What a real CUDA graph
gives is `test_triton_gpu.py`'s."""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import pytest

torch = pytest.importorskip("torch", reason="GraphedLauncher runs torch tensors")

from tilegraph.backends.triton import launch  # noqa: E402
from tilegraph.backends.triton.launch import GraphedLauncher  # noqa: E402


class FakeGraph:
    """A CUDA graph stand-in: replay() runs again what was captured, into the tensors it wrote then."""

    capturing: FakeGraph | None = None

    def __init__(self) -> None:
        self.captured = None

    def replay(self) -> None:
        self.captured()


class Doubling:
    """A launcher of one kernel, out = 2 x, whose calls are counted (`launches`) and take `seconds` each on the
    fake clock; called during a capture, it records itself on the graph as CUDA would."""

    device = torch.device("cpu")

    def __init__(self, clock: list[float], seconds: float) -> None:
        self.clock, self.seconds, self.launches = clock, seconds, 0

    def __call__(self, x):
        out = torch.empty_like(x)
        graph = FakeGraph.capturing
        if graph is not None:
            graph.captured = lambda: torch.mul(x, 2, out=out)
        self.launches += 1
        self.clock[0] += self.seconds
        torch.mul(x, 2, out=out)
        return [out]


@pytest.fixture
def clock(monkeypatch):
    """The fake clock (seconds in clock[0]) read by the launcher's timing, and torch.cuda's capture stand-ins."""
    now = [0.0]

    @contextmanager
    def capture(graph):
        FakeGraph.capturing = graph
        try:
            yield
        finally:
            FakeGraph.capturing = None

    class Stream:
        def __init__(self, device=None) -> None:
            pass

        def wait_stream(self, other) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(launch.time, "perf_counter", lambda: now[0])
    return now


@pytest.mark.parametrize("launch_seconds, replays", [(1.0, True), (0.0, False)], ids=["launch-bound", "copy-bound"])
def test_the_capture_keeps_whichever_way_timed_faster(clock, launch_seconds, replays):
    """Launches that cost host time make the replay win; free launches (the replay's copies then cost more) keep
    them. Either way every call gives twice its own input, new tensors included, and the outputs handed out are
    the caller's to keep (the next call does not overwrite them)."""
    launcher = Doubling(clock, launch_seconds)
    graphed = GraphedLauncher(launcher)
    copy = torch.Tensor.copy_

    def slow_copy(self, other):  # a replay's input copy: 0.5 s on the fake clock
        clock[0] += 0.5
        return copy(self, other)

    outs = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "copy_", slow_copy)
        for n in range(4):
            x = torch.full((3,), float(n))
            (out,) = graphed(x)
            outs.append(out)
            if n >= 1:
                assert graphed.replay is replays and (graphed.graph is not None) is replays
    for n, out in enumerate(outs):
        assert torch.equal(out, torch.full((3,), 2.0 * n))
    # launches: the warm-up, the capture's allocator warm-up and capture, the plain rounds, then one per call
    # after the capture where they won
    plain = GraphedLauncher.ROUNDS * GraphedLauncher.CALLS
    assert launcher.launches == 1 + 2 + plain + (0 if replays else 3)


@pytest.mark.parametrize("replay", [True, False])
def test_a_forced_way_is_not_timed(clock, replay):
    """replay=True captures at the second call and replays from then on; False launches every call; neither times."""
    launcher = Doubling(clock, 1.0)
    graphed = GraphedLauncher(launcher, replay=replay)
    for n in range(4):
        (out,) = graphed(torch.full((2,), float(n)))
        assert torch.equal(out, torch.full((2,), 2.0 * n))
    assert graphed.replay is replay and (graphed.graph is not None) is replay
    assert launcher.launches == (3 if replay else 4), "the warm-up, the capture's two, then none; or one a call"

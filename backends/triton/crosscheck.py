"""A tuning candidate's results against the generated kernel's, before it is timed.

The tuner installs whichever candidate runs fastest: a block-size variant, a persistent kernel, a library call.
Each is first launched once on copies of the kernel's arguments (activations drawn at random, parameters as
bound, outputs filled with NaN so that a tile left unwritten shows) and its outputs compared with the generated
kernel's on the same copies. A candidate off by more than TOLERANCE of the outputs' magnitude is left out and
reported, never installed: that catches a miscompile or a wrong tile, while the rounding that K-chunking, TF32 and
a library's own order give stays far below it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TOLERANCE = 0.05  # of the largest finite output of the generated kernel
SEED = 0

# launches the installed candidate on the given arguments
Run = Callable[[list], object]


@dataclass
class CrossCheck:
    """The probe arguments of one kernel and the generated kernel's outputs on them."""

    probe: list
    written: tuple[int, ...]  # positions of the arguments the kernel writes
    want: list

    @staticmethod
    def of(args: Sequence, written: Sequence[int], shared: Sequence[int], run: Run) -> CrossCheck:
        """Copies of `args` (those at `shared`, the parameters, as they are: nothing writes them), floating
        inputs drawn from a seeded normal distribution, and the generated kernel's outputs from `run`."""
        import torch

        probe = []
        generator = None
        for n, arg in enumerate(args):
            if n in shared or not isinstance(arg, torch.Tensor):
                probe.append(arg)
                continue
            copy = torch.empty_strided(arg.size(), arg.stride(), dtype=arg.dtype, device=arg.device)
            if n not in written and arg.is_floating_point():
                if generator is None:
                    generator = torch.Generator(device=arg.device).manual_seed(SEED)
                copy.normal_(generator=generator)
            elif n not in written:  # indices, masks: as they are
                copy.copy_(arg)
            probe.append(copy)
        check = CrossCheck(probe, tuple(written), [])
        check.want = [t.clone() for t in check._outputs(run)]
        return check

    def _outputs(self, run: Run) -> list:
        for n in self.written:
            if self.probe[n].is_floating_point():
                self.probe[n].fill_(math.nan)
            else:
                self.probe[n].zero_()
        run(self.probe)
        return [self.probe[n] for n in self.written]

    def deviation(self, run: Run) -> float:
        """The candidate's largest difference from the generated kernel's outputs, over their largest magnitude
        (inf where it leaves a finite output unwritten or non-finite)."""
        return max((_deviation(got, want) for got, want in zip(self._outputs(run), self.want)), default=0.0)


def _deviation(got, want) -> float:
    import torch

    if not want.is_floating_point():
        return 0.0 if torch.equal(got, want) else math.inf
    finite = torch.isfinite(want)
    if not bool(finite.any()):
        return 0.0
    expected, found = want[finite].float(), got[finite].float()
    difference = torch.nan_to_num((found - expected).abs(), nan=math.inf).max()
    scale = expected.abs().max().clamp_min(torch.finfo(torch.float32).tiny)
    return float(difference / scale)


__all__ = ["CrossCheck", "TOLERANCE"]

"""Torch models shared by the benchmarks that compare with torch (cpu.py, triton_gpu.py)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class BasicBlock(torch.nn.Module):
    """A ResNet-18 basic block: two 3x3 convolutions with batch norms, a residual add, ReLUs."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))

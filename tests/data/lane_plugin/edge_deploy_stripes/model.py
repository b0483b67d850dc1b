"""The stripes model (torch): row scores follow the frame's mean colour; x positions are fixed."""
from __future__ import annotations

import torch


class StripesModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.score = torch.nn.Linear(3, 4)
        with torch.no_grad():
            self.score.weight.copy_(torch.tensor([[9.0, 0, 0], [0, 9.0, 0], [0, 0, 9.0], [-9.0, -9.0, -9.0]]))
            self.score.bias.fill_(-3.0)
        self.register_buffer("xs", torch.tensor([[8.0, 16.0], [24.0, 30.0], [40.0, 52.0], [60.0, 2.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.score(x.mean(dim=(2, 3)))
        return torch.cat([logits.unsqueeze(-1), self.xs.expand(x.shape[0], 4, 2)], dim=-1)

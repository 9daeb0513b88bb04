"""AdamW with a state small enough to carry between GPU jobs, kept in flat buffers.

A training run of the default model spans several jobs of about ten minutes, and everything the next
job needs travels out of one machine and into the next, within tens of MiB. Full AdamW holds 12 bytes
per parameter (float32 weights and two float32 moments); this optimizer holds 6:

- the weights, float32, in one flat buffer (the model's parameters become views of it);
- the first moment in bfloat16 (computed in float32 each step, stored rounded);
- the second moment factored as Adafactor does for matrices (Shazeer and Stern 2018): a running mean
  of the squared gradient per row and per column, v[i, j] ~ row[i] * col[j] / mean(row), float32;
  tensors that are not matrices (norm weights, conv kernels, gate biases) keep a full float32 second
  moment, a few thousand numbers.

Every tensor of the state is held at the precision it is saved in, so a run resumed from a saved state
takes exactly the steps the uninterrupted run takes. The flat layout also makes a step a few dozen
kernel launches for the whole model (matrices of one shape are updated as one batch), not a dozen per
parameter tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MatrixGroup:
    """`count` matrices of shape [rows, cols], consecutive in the flat buffer from `start`."""

    start: int
    count: int
    rows: int
    cols: int

    @property
    def stop(self) -> int:
        return self.start + self.count * self.rows * self.cols


def layout(named_parameters) -> tuple[list[tuple[str, torch.nn.Parameter]], int]:
    """The flat buffer's order and how much of it is weight-decayed.

    Order: decayed matrices (2-D, not embeddings) grouped by shape, then the embeddings, then every
    other tensor; weight decay applies to the first part only (a prefix of the buffer).
    """
    named = list(named_parameters)          # nn.Module.named_parameters lists a tied weight once
    decayed = [(n, p) for n, p in named if p.ndim == 2 and "embed" not in n]
    embeddings = [(n, p) for n, p in named if p.ndim == 2 and "embed" in n]
    rest = [(n, p) for n, p in named if p.ndim != 2]
    by_shape = lambda items: sorted(items, key=lambda item: tuple(item[1].shape))   # stable: model order within a shape
    order = by_shape(decayed) + by_shape(embeddings) + rest
    return order, sum(p.numel() for _, p in decayed)


class CompactAdamW:
    """AdamW (decoupled weight decay, bias-corrected moments) over one model's parameters.

    Call `zero_grad()`, backward, `clip_grad_norm(max_norm)`, `step(lr)`. Never set a parameter's
    .grad to None: gradients accumulate into views of the flat gradient buffer.
    """

    def __init__(self, model: torch.nn.Module, betas=(0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.1,
                 factored: bool = True):
        self.betas, self.eps, self.weight_decay, self.factored = betas, eps, weight_decay, factored
        order, self.decayed = layout(list(model.named_parameters()))
        self.names = [n for n, _ in order]
        self.weights = torch.cat([p.detach().reshape(-1).float() for _, p in order])      # [P] float32
        self.grads = torch.zeros_like(self.weights)
        self.groups: list[MatrixGroup] = []
        offset, self.full_start = 0, None
        for name, p in order:
            size = p.numel()
            p.data = self.weights[offset:offset + size].view(p.shape)
            p.grad = self.grads[offset:offset + size].view(p.shape)
            if p.ndim == 2:
                last = self.groups[-1] if self.groups else None
                if last and last.stop == offset and (last.rows, last.cols) == tuple(p.shape):
                    self.groups[-1] = MatrixGroup(last.start, last.count + 1, last.rows, last.cols)
                else:
                    self.groups.append(MatrixGroup(offset, 1, *p.shape))
            elif self.full_start is None:
                self.full_start = offset
            offset += size
        self.full_start = offset if self.full_start is None else self.full_start
        self.steps = 0
        self.exp_avg = torch.zeros_like(self.weights, dtype=torch.bfloat16)
        self.rows = [torch.zeros(g.count, g.rows, device=self.weights.device) for g in self.groups]
        self.cols = [torch.zeros(g.count, g.cols, device=self.weights.device) for g in self.groups]
        self.exp_avg_sq = torch.zeros_like(self.weights[self.full_start:])
        if not factored:   # AdamW's full second moment, in bfloat16 (2 more bytes a parameter)
            self.groups, self.rows, self.cols, self.full_start = [], [], [], 0
            self.exp_avg_sq = torch.zeros_like(self.weights, dtype=torch.bfloat16)

    def zero_grad(self) -> None:
        self.grads.zero_()

    @torch.no_grad()
    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Scale the gradients to a global norm of at most `max_norm` (no host sync); the norm before."""
        norm = self.grads.norm()
        self.grads.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.steps += 1
        beta1, beta2 = self.betas
        m = self.exp_avg.float().lerp_(self.grads, 1 - beta1)                 # [P]
        self.exp_avg.copy_(m)
        square = self.grads.square().add_(1e-30)
        v = torch.empty_like(square)
        for group, row, col in zip(self.groups, self.rows, self.cols):
            block = square[group.start:group.stop].view(group.count, group.rows, group.cols)
            row.lerp_(block.mean(2), 1 - beta2)                              # [count, rows]
            col.lerp_(block.mean(1), 1 - beta2)                              # [count, cols]
            scaled = row / row.mean(1, keepdim=True)
            torch.mul(scaled[:, :, None], col[:, None, :],
                      out=v[group.start:group.stop].view(group.count, group.rows, group.cols))
        full = self.exp_avg_sq.float().lerp_(square[self.full_start:], 1 - beta2)
        self.exp_avg_sq.copy_(full)
        v[self.full_start:] = full
        denom = v.div_(1 - beta2 ** self.steps).sqrt_().add_(self.eps)
        self.weights[:self.decayed].mul_(1 - lr * self.weight_decay)
        self.weights.addcdiv_(m, denom, value=-lr / (1 - beta1 ** self.steps))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Everything a resumed run needs, by name (the weights included)."""
        tensors = {"weights": self.weights, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq,
                   "steps": torch.tensor([self.steps], dtype=torch.int64)}
        for i, (row, col) in enumerate(zip(self.rows, self.cols)):
            tensors[f"row.{i}"], tensors[f"col.{i}"] = row, col
        return tensors

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore `state_tensors()` in place (the parameters stay views of the weights)."""
        mine = self.state_tensors()
        if set(tensors) != set(mine) or any(tensors[k].shape != mine[k].shape for k in mine):
            raise ValueError("the saved optimizer state belongs to another model layout")
        for name, tensor in mine.items():
            if name != "steps":
                tensor.copy_(tensors[name])
        self.steps = int(tensors["steps"][0])

"""AdamW with both moments in bfloat16, over one flat buffer of the model's weights.

A training run of the default model spans several GPU jobs of about ten minutes, and everything the
next job needs travels out of one machine and into the next within tens of MiB. torch's AdamW holds 12
bytes a parameter (float32 weights and two float32 moments); this one holds 8: the float32 weights and
both moments in bfloat16 (computed in float32 each step, stored rounded). Every tensor of the state is
held at the precision it is saved in, so a run resumed from a saved state takes exactly the steps the
uninterrupted run takes. On the induction probe (training/RETRIEVAL_NOTES.md, fourth round) it formed
the look-up circuit at the same step as torch's AdamW; a factored second moment (Adafactor's, 6 bytes
a parameter) formed it ~100 steps later, so it was dropped.

The model's parameters become views of one float32 buffer and their gradients views of another, so a
step is a handful of kernel launches for the whole model, not a dozen per parameter tensor.
"""

from __future__ import annotations

import torch


def layout(named_parameters) -> tuple[list[tuple[str, torch.nn.Parameter]], int]:
    """The flat buffer's order and how much of it is weight-decayed: the matrices (2-D, not embeddings)
    first, in model order, then every other tensor; weight decay applies to that prefix only."""
    named = list(named_parameters)          # nn.Module.named_parameters lists a tied weight once
    decayed = [(n, p) for n, p in named if p.ndim == 2 and "embed" not in n]
    rest = [(n, p) for n, p in named if not (p.ndim == 2 and "embed" not in n)]
    return decayed + rest, sum(p.numel() for _, p in decayed)


class CompactAdamW:
    """AdamW (decoupled weight decay, bias-corrected moments) over one model's parameters.

    Call `zero_grad()`, backward, `clip_grad_norm(max_norm)`, `step(lr)`. Never set a parameter's
    .grad to None: gradients accumulate into views of the flat gradient buffer.
    """

    def __init__(self, model: torch.nn.Module, betas=(0.9, 0.95), eps: float = 1e-8, weight_decay: float = 0.1):
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        order, self.decayed = layout(model.named_parameters())
        self.names = [n for n, _ in order]
        self.weights = torch.cat([p.detach().reshape(-1).float() for _, p in order])      # [P] float32
        self.grads = torch.zeros_like(self.weights)
        offset = 0
        for _, p in order:
            size = p.numel()
            p.data = self.weights[offset:offset + size].view(p.shape)
            p.grad = self.grads[offset:offset + size].view(p.shape)
            offset += size
        self.steps = 0
        self.exp_avg = torch.zeros_like(self.weights, dtype=torch.bfloat16)
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
        m = self.exp_avg.float().lerp_(self.grads, 1 - beta1)                          # [P]
        v = self.exp_avg_sq.float().lerp_(self.grads.square(), 1 - beta2)               # [P]
        self.exp_avg.copy_(m)
        self.exp_avg_sq.copy_(v)
        denom = v.div_(1 - beta2 ** self.steps).sqrt_().add_(self.eps)
        self.weights[:self.decayed].mul_(1 - lr * self.weight_decay)
        self.weights.addcdiv_(m, denom, value=-lr / (1 - beta1 ** self.steps))

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Everything a resumed run needs, by name (the weights included)."""
        return {"weights": self.weights, "exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq,
                "steps": torch.tensor([self.steps], dtype=torch.int64)}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore `state_tensors()` in place (the parameters stay views of the weights)."""
        mine = self.state_tensors()
        if set(tensors) != set(mine) or any(tensors[k].shape != mine[k].shape for k in mine):
            raise ValueError("the saved optimizer state belongs to another model layout")
        for name, tensor in mine.items():
            if name != "steps":
                tensor.copy_(tensors[name])
        self.steps = int(tensors["steps"][0])

"""Preallocated per-request decoder state: one slot per stream.

The family declares its decoder state as name -> per-request shape (conv history,
transposed-conv overlap, attention window, ...). The pool holds each as one tensor
[num_slots, *shape]; a decoder batch gathers the slots of its requests by index, runs, and
scatters the new state back. Slot contents never mix: each request only ever reads and
writes its own slot.
"""

from __future__ import annotations

import torch


class DecoderSlotPool:
    def __init__(self, shapes: dict[str, tuple[int, ...]], num_slots: int,
                 initial: dict[str, torch.Tensor], device: torch.device) -> None:
        """`initial` holds a fresh one-request state (batch 1): the value a slot is reset to."""
        self.num_slots = num_slots
        self.initial = {name: initial[name][0].to(device) for name in shapes}
        self.tensors = {
            name: self.initial[name].expand(num_slots, *self.initial[name].shape).clone()
            for name in shapes
        }
        self.free: list[int] = list(range(num_slots - 1, -1, -1))
        self.in_use: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self.free)

    def can_allocate(self) -> bool:
        return bool(self.free)

    def allocate(self) -> int:
        if not self.free:
            raise RuntimeError("no free decoder slot")
        slot = self.free.pop()
        self.in_use.add(slot)
        self.reset(slot)
        return slot

    def release(self, slot: int) -> None:
        assert slot in self.in_use, f"decoder slot {slot} released twice"
        self.in_use.remove(slot)
        self.free.append(slot)

    def reset(self, slot: int) -> None:
        for name, tensor in self.tensors.items():
            tensor[slot] = self.initial[name]

    def gather(self, slots: torch.Tensor) -> dict[str, torch.Tensor]:
        """State of `slots` [B] as a batch (copies)."""
        return {name: tensor.index_select(0, slots) for name, tensor in self.tensors.items()}

    def scatter(self, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> None:
        for name, tensor in self.tensors.items():
            tensor.index_copy_(0, slots, state[name].to(tensor.dtype))

    def check_integrity(self) -> bool:
        return (len(self.free) == len(set(self.free))
                and not (set(self.free) & self.in_use)
                and len(self.free) + len(self.in_use) == self.num_slots)

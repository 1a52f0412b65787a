"""The paged KV cache: a pool of fixed-size blocks and who holds them.

`BlockManager` is pure bookkeeping (free list + reference counts), in check/commit pairs:
`can_allocate(n)` then `allocate(n)`. A block shared by several holders (a voice prefix
used by many requests) has one reference per holder; it returns to the free list when the
last one lets go.

`PagedKVCache` holds the tensors: k, v [layers, num_blocks * block_size, kv_heads, dim],
addressed by flat slot = block * block_size + offset.

`BlockTable` is one holder's view: its blocks in order, and for each block the absolute
position of its first key and how many slots are filled. Positions are contiguous inside
a block but not across blocks (a request's own tokens start in a fresh block after a
shared voice prefix, and dropped context leaves a gap), so every key carries its position.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("the KV pool needs at least one block of at least one slot")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref_counts = [0] * num_blocks
        self.free_blocks: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free_blocks)

    def can_allocate(self, count: int) -> bool:
        return count <= len(self.free_blocks)

    def allocate(self, count: int) -> list[int]:
        if not self.can_allocate(count):
            raise RuntimeError(f"KV pool exhausted: {count} blocks asked, {self.num_free} free")
        blocks = [self.free_blocks.popleft() for _ in range(count)]
        for block in blocks:
            self.ref_counts[block] = 1
        return blocks

    def share(self, blocks: Iterable[int]) -> None:
        """One more holder for already-held blocks (prefix sharing)."""
        for block in blocks:
            assert self.ref_counts[block] > 0, f"sharing free block {block}"
            self.ref_counts[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        for block in blocks:
            assert self.ref_counts[block] > 0, f"double free of block {block}"
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_blocks.append(block)

    def check_integrity(self, holders: Iterable[list[int]]) -> bool:
        """True when the reference counts equal the holders' references and the free list
        holds exactly the unreferenced blocks, each once."""
        counted = [0] * self.num_blocks
        for blocks in holders:
            for block in blocks:
                counted[block] += 1
        free = list(self.free_blocks)
        return (
            counted == self.ref_counts
            and len(free) == len(set(free))
            and set(free) == {b for b, n in enumerate(counted) if n == 0}
        )


@dataclass
class BlockTable:
    """One holder's blocks; see the module docstring."""

    blocks: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # position of each block's first key
    fills: list[int] = field(default_factory=list)  # filled slots of each block
    num_shared: int = 0  # leading blocks that belong to a shared prefix (never written)
    # Cached flat slots / positions of every key (extended by append, rebuilt otherwise).
    _slots: list[int] | None = field(default=None, repr=False, compare=False)
    _positions: list[int] | None = field(default=None, repr=False, compare=False)

    @property
    def num_keys(self) -> int:
        return sum(self.fills)

    def slots_and_positions(self, block_size: int) -> tuple[list[int], list[int]]:
        """Every stored key: its flat slot and its absolute position, in order. The lists
        are cached: treat them as read-only."""
        if self._slots is None or self._positions is None:
            slots: list[int] = []
            positions: list[int] = []
            for block, start, fill in zip(self.blocks, self.starts, self.fills):
                slots.extend(range(block * block_size, block * block_size + fill))
                positions.extend(range(start, start + fill))
            self._slots, self._positions = slots, positions
        return self._slots, self._positions

    def _invalidate(self) -> None:
        self._slots = self._positions = None

    def blocks_needed(self, count: int, block_size: int) -> int:
        """New blocks needed to append `count` keys."""
        room = 0
        if len(self.blocks) > self.num_shared:
            room = block_size - self.fills[-1]
        return max(0, -(-(count - room) // block_size))

    def append(self, count: int, position: int, new_blocks: list[int],
               block_size: int) -> list[int]:
        """Reserve slots for `count` keys at positions position.. (using `new_blocks` once
        the last own block is full); returns their flat slots."""
        slots: list[int] = []
        fresh = iter(new_blocks)
        for index in range(count):
            own_last = len(self.blocks) > self.num_shared
            if not own_last or self.fills[-1] == block_size:
                self.blocks.append(next(fresh))
                self.starts.append(position + index)
                self.fills.append(0)
            elif self.starts[-1] + self.fills[-1] != position + index:
                raise AssertionError("positions inside a block must be contiguous")
            slots.append(self.blocks[-1] * block_size + self.fills[-1])
            self.fills[-1] += 1
        assert next(fresh, None) is None, "more blocks reserved than used"
        if self._slots is not None and self._positions is not None:
            self._slots.extend(slots)
            self._positions.extend(range(position, position + count))
        return slots

    def drop_before(self, position: int) -> list[int]:
        """Remove own blocks whose keys all lie before `position`; returns them."""
        dropped: list[int] = []
        index = self.num_shared
        while index < len(self.blocks) - 1 and self.starts[index] + self.fills[index] <= position:
            dropped.append(self.blocks[index])
            index += 1
        if dropped:
            self._invalidate()
            del self.blocks[self.num_shared:index]
            del self.starts[self.num_shared:index]
            del self.fills[self.num_shared:index]
        return dropped

    def pop_last(self, slot: int, block_size: int) -> int | None:
        """Remove the last key (it must sit at flat `slot`); returns its block when that
        leaves the block empty (the block leaves the table too), else None."""
        assert len(self.blocks) > self.num_shared and self.fills[-1] > 0, "no own key to pop"
        assert self.blocks[-1] * block_size + self.fills[-1] - 1 == slot, "not the last key"
        self._invalidate()
        self.fills[-1] -= 1
        if self.fills[-1]:
            return None
        block = self.blocks.pop()
        self.starts.pop()
        self.fills.pop()
        return block

    def own_blocks(self) -> list[int]:
        return self.blocks[self.num_shared:]

    def shared_blocks(self) -> list[int]:
        return self.blocks[: self.num_shared]

    def copy_shared(self) -> BlockTable:
        """A new table that starts with all of this table's blocks as a shared prefix."""
        return BlockTable(list(self.blocks), list(self.starts), list(self.fills),
                          num_shared=len(self.blocks))

    def drop_own(self) -> list[int]:
        """Remove every own block (back to the shared prefix); returns them."""
        own = self.own_blocks()
        self._invalidate()
        del self.blocks[self.num_shared:], self.starts[self.num_shared:]
        del self.fills[self.num_shared:]
        return own

    def replace_own(self, blocks: list[int]) -> None:
        """Own blocks moved (swap-in): same keys and positions, new block ids."""
        assert len(blocks) == len(self.blocks) - self.num_shared
        self._invalidate()
        self.blocks[self.num_shared:] = blocks

    def clear(self) -> None:
        self._invalidate()
        self.blocks.clear()
        self.starts.clear()
        self.fills.clear()
        self.num_shared = 0


class PagedKVCache:
    """The KV tensors: k, v [layers, num_blocks * block_size, kv_heads, head_dim]."""

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, num_blocks: int,
                 block_size: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (num_layers, num_blocks * block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size

    @staticmethod
    def bytes_per_block(num_layers: int, kv_heads: int, head_dim: int, block_size: int,
                        dtype: torch.dtype) -> int:
        element = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * block_size * kv_heads * head_dim * element

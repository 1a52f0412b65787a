"""Packed prefill attention: per-request segments against the reference mask.

A packed row holds several requests' new tokens; each query may see only its own
request's keys. `attend` with `segments` computes each request on its own; the reference
masks the whole row with `packed_allowed`. Both must equal attending each request alone.
"""

from __future__ import annotations

import pytest
import torch

from polyvox.models.layers.attention import attend
from polyvox.models.layers.paged_attention import packed_allowed, packed_segments


def _packed_row(query_lengths: list[int], key_lengths: list[int], heads: int, kv_heads: int,
                generator: torch.Generator):
    """Random q, k, v of requests side by side; request r's queries are its last
    query_lengths[r] keys (new tokens after a context of earlier ones)."""
    dim = 16
    q = torch.randn(1, sum(query_lengths), heads, dim, generator=generator)
    k = torch.randn(1, sum(key_lengths), kv_heads, dim, generator=generator)
    v = torch.randn(1, sum(key_lengths), kv_heads, dim, generator=generator)
    q_positions = torch.cat([torch.arange(keys - queries, keys)
                             for queries, keys in zip(query_lengths, key_lengths)])[None]
    k_positions = torch.cat([torch.arange(keys) for keys in key_lengths])[None]
    return q, k, v, q_positions, k_positions


@pytest.mark.parametrize("heads, kv_heads, context", [(4, 4, None), (4, 2, None), (2, 1, 5)])
def test_segments_equal_the_mask_and_each_request_alone(heads, kv_heads, context) -> None:
    generator = torch.Generator().manual_seed(0)
    query_lengths, key_lengths = [5, 3, 7, 1], [9, 3, 12, 6]
    q, k, v, q_pos, k_pos = _packed_row(query_lengths, key_lengths, heads, kv_heads, generator)
    masked = attend(q, k, v, q_pos, k_pos, context,
                    allowed=packed_allowed(query_lengths, key_lengths))
    segments = packed_segments(query_lengths, key_lengths)
    segmented = attend(q, k, v, q_pos, k_pos, context, segments=segments)
    alone = torch.cat([attend(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1], q_pos[:, q0:q1],
                              k_pos[:, k0:k1], context) for q0, q1, k0, k1 in segments], dim=1)
    torch.testing.assert_close(segmented, masked, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(segmented, alone, rtol=0, atol=0)
    # The mask matters: without it, queries would see other requests' keys.
    unmasked = attend(q, k, v, q_pos, k_pos, context)
    assert not torch.allclose(unmasked, masked, atol=1e-3)


def test_segments_cover_the_row_in_order() -> None:
    assert packed_segments([2, 3], [4, 3]) == [(0, 2, 0, 4), (2, 5, 4, 7)]
    with pytest.raises(ValueError):
        packed_segments([2, 3], [4])


def test_write_kv_stores_what_a_full_forward_stores() -> None:
    """A prefill never reads the transformer's output: write_kv skips the last layer's
    attention and feed-forward but must leave the very same keys and values."""
    from polyvox.models.layers.attention import ContiguousKV
    from polyvox.models.layers.transformer import Transformer

    torch.manual_seed(0)
    stack = Transformer(d_model=32, num_heads=4, num_layers=3, ffn_dim=64, max_period=100.0,
                        kv_heads=2, layer_scale=0.1).eval()
    x = torch.randn(1, 7, 32)
    stores = [ContiguousKV(3, 2, 8, torch.float32, torch.device("cpu")) for _ in range(2)]
    with torch.no_grad():
        for kv in stores:  # a context first, then the prefill under test on top of it
            stack(torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(1)),
                  kv.next_positions(4), kv)
            kv.commit()
        stack(x, stores[0].next_positions(7), stores[0])
        stack.write_kv(x, stores[1].next_positions(7), stores[1])
    for kv in stores:
        kv.commit()
    (k_full, v_full), (k_kv, v_kv) = stores[0].prefix(), stores[1].prefix()
    assert k_full.shape == (3, 11, 2, 8)
    assert torch.equal(k_full, k_kv) and torch.equal(v_full, v_kv)


# --- decode rows attended in place in the pool (the compiled CPU kernel) --------------------


def _require_kernel():
    from polyvox.models.layers import cpu_kernels

    kernel = cpu_kernels.paged_decode_attention()
    if kernel is None:
        # NOTE: where a compiler is at hand (our CI), the kernel must build: a silent
        # fallback would leave the fast path untested.
        assert not cpu_kernels.can_build(), "the compiled CPU kernel failed to build (see the log)"
        pytest.skip("no C++ compiler: the engine uses the gather + SDPA path")
    return kernel


def _decode_rows(pool_slots: int, lengths: list[int], generator):
    """A pool layer's slots handed out to rows in scattered blocks of 4, as the engine
    would: each row's slots, their positions, and the row's query position (its last)."""
    free = torch.randperm(pool_slots // 4, generator=generator).tolist()
    slots, positions = [], []
    for length in lengths:
        row = []
        while len(row) < length:
            block = free.pop()
            row += list(range(4 * block, 4 * block + 4))
        slots.append(row[:length])
        positions.append(list(range(length)))
    return slots, positions, [length - 1 for length in lengths]


@pytest.mark.parametrize("heads, kv_heads, context", [(4, 4, None), (8, 2, None), (4, 2, 6)])
def test_pool_decode_equals_gather_and_attend(heads, kv_heads, context) -> None:
    from polyvox.models.layers.paged_attention import PagedKV, PoolDecodeKV, pad_rows

    kernel = _require_kernel()
    generator = torch.Generator().manual_seed(1)
    layers, pool, dim = 2, 256, 16
    lengths = [1, 9, 30, 17, 4]
    slots, key_positions, query_positions = _decode_rows(pool, lengths, generator)

    def fresh_cache():
        g = torch.Generator().manual_seed(2)
        return (torch.randn(layers, pool, kv_heads, dim, generator=g),
                torch.randn(layers, pool, kv_heads, dim, generator=g))

    q = torch.randn(len(lengths), 1, heads, dim, generator=generator)
    k_new = torch.randn(len(lengths), 1, kv_heads, dim, generator=generator)
    v_new = torch.randn(len(lengths), 1, kv_heads, dim, generator=generator)
    write = torch.tensor([row[-1] for row in slots])  # each row's newest key is written now
    q_pos = torch.tensor(query_positions)[:, None]

    k_cache, v_cache = fresh_cache()
    gathered = PagedKV(k_cache, v_cache, write, pad_rows(slots, fill=0),
                       pad_rows(key_positions, fill=-1))
    keys, values, positions = gathered.write_and_read(1, k_new, v_new, q_pos)
    reference = attend(q, keys, values, q_pos, positions, context)

    k_cache2, v_cache2 = fresh_cache()
    in_place = PoolDecodeKV(k_cache2, v_cache2, write, slots, key_positions, query_positions,
                            kernel)
    out = in_place.write_and_attend(1, q, k_new, v_new, context)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)
    assert torch.equal(k_cache2, k_cache) and torch.equal(v_cache2, v_cache)  # same writes

    # A row's output does not depend on its neighbours: row 2 alone gives the same bits.
    k_cache3, v_cache3 = fresh_cache()
    alone = PoolDecodeKV(k_cache3, v_cache3, write[2:3], slots[2:3], key_positions[2:3],
                         query_positions[2:3], kernel)
    assert torch.equal(alone.write_and_attend(1, q[2:3], k_new[2:3], v_new[2:3], context),
                       out[2:3])


def test_pool_decode_rejects_slots_outside_the_pool() -> None:
    kernel = _require_kernel()
    q = torch.randn(1, 2, 8)
    k = v = torch.randn(16, 2, 8)
    with pytest.raises(RuntimeError, match="out of range"):
        kernel(q, k, v, torch.tensor([3, 16]), torch.tensor([0, 2]), 1.0)

"""flash_attn_with_kvcache (flash-attn 2's decoding call) on flashkit: append k/v to the cache in place, with optional
rotary embedding, then attend over each sequence's cache prefix.

The cache is plain tensors (batch_size_cache, seqlen_cache, nheads_k, headdim); row b of q uses cache row
cache_batch_idx[b] (default b) and its first cache_seqlens[b] (+ seqlen_new after the append) positions. Equal
lengths take one attention call on a strided view of the cache (nothing copied); unequal lengths take one call per
sequence. Tensor cache_seqlens are read to the host (a synchronization on CUDA), which also lets the positions be
checked against the cache and the rotary table.

With block_table (batch, max_blocks_per_seq) the cache is paged as flash-attn pages it: (num_blocks, page_block_size,
nheads_k, headdim), position p of sequence b at block block_table[b, p // page_block_size], row p % page_block_size.
New keys are written into their pages in place; each sequence's pages are then gathered into a contiguous copy for
the attention call (correct for any table; a copy per call, not the paged kernel's speed).
"""

import numbers

import torch

from . import flash_attn as _fa


def _lengths(cache_seqlens, batch, seqlen_cache, seqlen_new):
    if isinstance(cache_seqlens, bool):
        raise TypeError("cache_seqlens: expected an int or an int32 tensor (batch_size,), got a bool")
    if isinstance(cache_seqlens, numbers.Integral):
        lengths = [int(cache_seqlens)] * batch
    elif isinstance(cache_seqlens, torch.Tensor):
        if cache_seqlens.dim() != 1 or cache_seqlens.shape[0] != batch or cache_seqlens.is_floating_point():
            raise ValueError("cache_seqlens: expected an int32 tensor of shape (%d,), got %s %s"
                             % (batch, cache_seqlens.dtype, tuple(cache_seqlens.shape)))
        lengths = [int(x) for x in cache_seqlens.tolist()]
    else:
        raise TypeError("cache_seqlens: expected an int or an int32 tensor (batch_size,), got %r" % (cache_seqlens,))
    for b, n in enumerate(lengths):
        if n < 0 or n + seqlen_new > seqlen_cache:
            raise ValueError("cache_seqlens: entry %d is %d; with %d new keys it must stay within 0..%d (the cache's "
                             "seqlen)" % (b, n, seqlen_new, seqlen_cache))
    return lengths


def _rows(cache_batch_idx, batch, batch_cache, device):
    if cache_batch_idx is None:
        if batch > batch_cache:
            raise ValueError("k_cache: batch %d is smaller than q's batch %d (pass cache_batch_idx to pick rows)"
                             % (batch_cache, batch))
        return list(range(batch))
    if (not isinstance(cache_batch_idx, torch.Tensor) or cache_batch_idx.dim() != 1
            or cache_batch_idx.shape[0] != batch or cache_batch_idx.is_floating_point()):
        raise ValueError("cache_batch_idx: expected an int32 tensor of shape (%d,)" % batch)
    rows = [int(x) for x in cache_batch_idx.tolist()]
    for b, r in enumerate(rows):
        if not 0 <= r < batch_cache:
            raise ValueError("cache_batch_idx: entry %d is %d; expected 0..%d (k_cache's batch)"
                             % (b, r, batch_cache - 1))
    if len(set(rows)) != len(rows):
        raise ValueError("cache_batch_idx: entries must be distinct (two sequences would write one cache row)")
    return rows


def _block_table(block_table, cache_batch_idx, batch, num_blocks, device):
    """block_table as host lists (a synchronization on CUDA, like cache_seqlens)."""
    if cache_batch_idx is not None:
        raise ValueError("cache_batch_idx: not with block_table (the table already picks each sequence's pages)")
    if (not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != batch
            or block_table.is_floating_point() or block_table.dtype == torch.bool):
        raise ValueError("block_table: expected an int32 tensor (%d, max_blocks_per_seq), got %s"
                         % (batch, getattr(block_table, "shape", block_table)))
    if block_table.device != device:
        raise ValueError("block_table: expected a tensor on %s (q's device), got %s" % (device, block_table.device))
    if num_blocks == 0:
        raise ValueError("k_cache: a paged cache needs at least one block")
    return [[int(x) for x in row] for row in block_table.tolist()]


def _check_pages(table, lengths, seqlen_new, page, num_blocks):
    """Every page a sequence reaches (its first cache_seqlens + seqlen_new positions) names a block of the cache."""
    for b, n in enumerate(lengths):
        for i in range((n + seqlen_new + page - 1) // page):
            if not 0 <= table[b][i] < num_blocks:
                raise ValueError("block_table: entry [%d, %d] is %d; expected 0..%d (k_cache's blocks)"
                                 % (b, i, table[b][i], num_blocks - 1))


def _rotary(x, cos, sin, positions, interleaved):
    """x (batch, seqlen, heads, headdim) rotated at positions (batch, seqlen): the first 2 * cos.shape[1] features,
    as pairs (0,1), (2,3), ... when interleaved (GPT-J), else as halves (GPT-NeoX); the rest pass through."""
    half = cos.shape[1]
    c = cos[positions].unsqueeze(2).float()  # (batch, seqlen, 1, half)
    s = sin[positions].unsqueeze(2).float()
    xr = x[..., :2 * half].float()
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
        rotated = torch.cat((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), dim=-1)


def _check_rotary(rotary_cos, rotary_sin, headdim, max_position):
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos, rotary_sin: pass both or neither")
    if rotary_cos is None:
        return
    for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape != rotary_cos.shape:
            raise ValueError("%s: expected (seqlen_ro, rotary_dim / 2), both of one shape" % name)
    if 2 * rotary_cos.shape[1] > headdim:
        raise ValueError("rotary_cos: rotary_dim %d exceeds headdim %d" % (2 * rotary_cos.shape[1], headdim))
    if max_position >= rotary_cos.shape[0]:
        raise ValueError("rotary_cos: has %d positions; position %d is needed" % (rotary_cos.shape[0], max_position))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            impl="auto"):
    """q (batch, seqlen_q, nheads, headdim); k_cache/v_cache (batch_size_cache, seqlen_cache, nheads_k, headdim), or
    paged (num_blocks, page_block_size, nheads_k, headdim) with block_table (batch, max_blocks_per_seq) int32,
    updated in place with k/v (batch, seqlen_new, nheads_k, headdim) at cache_seqlens. Returns out like q (and
    softmax_lse (batch, nheads, seqlen_q) with return_softmax_lse). num_splits is a kernel hint and is ignored."""
    if cache_leftpad is not None:
        raise NotImplementedError("cache_leftpad: left-padded caches are not supported; expected None")
    if isinstance(num_splits, bool) or not isinstance(num_splits, numbers.Integral) or num_splits < 0:
        raise ValueError("num_splits: expected an int >= 0, got %r" % (num_splits,))
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _fa._dims(name, t, 4, "(batch, seqlen, nheads, headdim)")
    if k_cache.shape != v_cache.shape:
        raise ValueError("v_cache: expected the shape of k_cache %s, got %s" % (tuple(k_cache.shape),
                                                                                 tuple(v_cache.shape)))
    if (k is None) != (v is None):
        raise ValueError("k, v: pass both new keys and values, or neither")
    batch, seqlen_q = q.shape[0], q.shape[1]
    paged = block_table is not None
    if paged:
        table = _block_table(block_table, cache_batch_idx, batch, k_cache.shape[0], q.device)
        page = k_cache.shape[1]
        capacity = len(table[0]) * page if table else 0
    else:
        capacity = k_cache.shape[1]
    seqlen_new = 0
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            _fa._dims(name, t, 4, "(batch, seqlen_new, nheads_k, headdim)")
            if t.shape[0] != batch or t.shape[2:] != k_cache.shape[2:] or t.shape != k.shape:
                raise ValueError("%s: expected (%d, seqlen_new, %d, %d), got %s" % (
                    name, batch, k_cache.shape[2], k_cache.shape[3], tuple(t.shape)))
        if cache_seqlens is None:
            raise ValueError("cache_seqlens: needed with k/v (where the new keys go in the cache)")
        seqlen_new = k.shape[1]
    rows = list(range(batch)) if paged else _rows(cache_batch_idx, batch, k_cache.shape[0], q.device)
    if cache_seqlens is None:
        lengths = [capacity] * batch
    else:
        lengths = _lengths(cache_seqlens, batch, capacity, seqlen_new)
    if paged:
        _check_pages(table, lengths, seqlen_new, page, k_cache.shape[0])
    rotate_all_q = causal or tuple(window_size) != (-1, -1)
    _check_rotary(rotary_cos, rotary_sin, q.shape[3],
                  max(n + max(seqlen_new, seqlen_q if rotate_all_q else 1) - 1 for n in lengths) if lengths else 0)

    if rotary_cos is not None:
        start = torch.tensor(lengths, device=q.device).unsqueeze(1)
        if k is not None:
            k = _rotary(k, rotary_cos, rotary_sin, start + torch.arange(seqlen_new, device=q.device),
                        rotary_interleaved)
        q_pos = start + (torch.arange(seqlen_q, device=q.device) if rotate_all_q else
                         torch.zeros(seqlen_q, dtype=torch.long, device=q.device))
        q = _rotary(q, rotary_cos, rotary_sin, q_pos, rotary_interleaved)
    if k is not None:
        with torch.no_grad():
            for b, (r, n) in enumerate(zip(rows, lengths)):
                if paged:
                    pos = torch.arange(n, n + seqlen_new)
                    blocks = torch.tensor([table[b][p // page] for p in pos.tolist()], dtype=torch.long)
                    k_cache[blocks.to(k_cache.device), (pos % page).to(k_cache.device)] = k[b]
                    v_cache[blocks.to(v_cache.device), (pos % page).to(v_cache.device)] = v[b]
                else:
                    k_cache[r, n:n + seqlen_new] = k[b]
                    v_cache[r, n:n + seqlen_new] = v[b]
    totals = [n + seqlen_new for n in lengths]
    if paged:  # each sequence's pages gathered into a contiguous (1, total, nheads_k, headdim) copy
        def gathered(cache, b, n):
            used = torch.tensor(table[b][:(n + page - 1) // page], dtype=torch.long, device=cache.device)
            return cache[used].reshape(-1, cache.shape[2], cache.shape[3])[:n].unsqueeze(0)
        k_seq = [gathered(k_cache, b, n) for b, n in enumerate(totals)]
        v_seq = [gathered(v_cache, b, n) for b, n in enumerate(totals)]

    def attend(qb, kb, vb):
        return _fa._run(qb, kb, vb, None, None, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, False,
                        impl)

    if paged:
        parts = [attend(q[b:b + 1], k_seq[b], v_seq[b]) for b in range(batch)]
        out = torch.cat([p[0] for p in parts])
        lse = torch.cat([p[1] for p in parts])
    elif len(set(totals)) == 1 and rows == list(range(rows[0], rows[0] + batch)):
        r0, n = rows[0], totals[0]
        out, lse = attend(q, k_cache[r0:r0 + batch, :n], v_cache[r0:r0 + batch, :n])
    else:
        parts = [attend(q[b:b + 1], k_cache[r:r + 1, :n], v_cache[r:r + 1, :n])
                 for b, (r, n) in enumerate(zip(rows, totals))]
        out = torch.cat([p[0] for p in parts])
        lse = torch.cat([p[1] for p in parts])
    return (out, lse) if return_softmax_lse else out

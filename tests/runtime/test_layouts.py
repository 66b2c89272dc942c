"""The layouts of docs/semantics.md: natural <-> gfx950 mfma_permuted converters (round trips, and the permutation
checked element by element with plain loops), layout detection, the op's refusal of a tensor laid
out for another arch, the reference on either layout, and the paged writer on either layout."""

from __future__ import annotations

import mxlogits as mx
import pytest
import torch
from support.cases import make_case, make_plan, reference

M = mx.manifest.manifest()
H, D, PAGE = M.heads, M.head_dim, M.page_size
B = D // 32  # scale bytes per row
NATURAL_INNER = {"q_scale": (H, B), "kv_cache": (PAGE, D // 2), "kv_scale": (PAGE, B)}
# The launcher's mfma_permuted inner shapes (templates/launcher/launcher.cpp.j2).
PERMUTED_INNER = {
    "q_scale": (2, 32, D // 64 * (H // 32)),
    "kv_cache": (B, PAGE, 16),
    "kv_scale": (2, 32, D // 64 * (PAGE // 32)),
}
KINDS = tuple(NATURAL_INNER)


def random_bytes(n: int, kind: str, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, *NATURAL_INNER[kind]), dtype=torch.uint8, generator=g)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 3, 7])
def test_round_trip_and_shapes(kind, n):
    natural = random_bytes(n, kind, seed=n)
    permuted = mx.to_layout(natural, kind, "mfma_permuted")
    assert permuted.shape == (n, *PERMUTED_INNER[kind]) and permuted.is_contiguous()
    assert mx.layout_of(permuted, kind) == "mfma_permuted" and mx.layout_of(natural, kind) == "natural"
    assert not torch.equal(permuted.flatten(), natural.flatten())  # random bytes: the order changed
    assert torch.equal(mx.from_layout(permuted, kind), natural)
    assert torch.equal(mx.to_layout(permuted, kind, "natural"), natural)
    assert mx.to_layout(natural, kind, "natural") is natural  # already there: no copy
    assert torch.equal(mx.to_layout(mx.to_layout(natural, kind, "natural"), kind, "mfma_permuted"), permuted)


@pytest.mark.parametrize("kind", ["q_scale", "kv_scale"])
def test_scale_permutation_matches_spec_loops(kind):
    n = 3
    rows = NATURAL_INNER[kind][0]
    natural = torch.tensor(
        [[[(7 * g + o * B + b) % 256 for b in range(B)] for o in range(rows)] for g in range(n)], dtype=torch.uint8
    )
    permuted = mx.to_layout(natural, kind, "mfma_permuted")
    for grp in range(n):
        for o in range(rows):
            for b in range(B):
                mi, m = divmod(o, 32)
                kt, g = divmod(b, 2)
                assert permuted[grp, g, m, kt * (rows // 32) + mi] == natural[grp, o, b], (grp, o, b)


def test_scale_permutation_hand_made_and_spec_tensor_op():
    if (PAGE, B) != (64, 4):
        pytest.skip("docs/semantics.md's worked formula is for 64-row groups of D=128 rows")
    e8 = torch.zeros(2, 64, 4, dtype=torch.uint8)
    # (o, b) -> [g, m, 2·kt + mi]
    cases = {(0, 0): (0, 0, 0), (32, 0): (0, 0, 1), (0, 1): (1, 0, 0), (0, 2): (0, 0, 2), (33, 2): (0, 1, 3),
             (63, 3): (1, 31, 3), (5, 3): (1, 5, 2)}
    for i, (o, b) in enumerate(cases):
        e8[1, o, b] = i + 1
    permuted = mx.to_layout(e8, "kv_scale", "mfma_permuted")
    assert int((permuted[0] != 0).sum()) == 0 and int((permuted[1] != 0).sum()) == len(cases)
    for i, pos in enumerate(cases.values()):
        assert permuted[1][pos] == i + 1, pos
    random = random_bytes(5, "kv_scale", seed=11)
    for t in (e8, random):  # docs/semantics.md's tensor op
        spec = t.view(-1, 2, 32, 2, 2).permute(0, 4, 2, 3, 1).reshape(-1, 2, 32, 4)
        assert torch.equal(mx.to_layout(t, "kv_scale", "mfma_permuted"), spec)


def test_value_layout_matches_spec_loops():
    natural = random_bytes(2, "kv_cache", seed=5)
    permuted = mx.to_layout(natural, "kv_cache", "mfma_permuted")
    for blk in range(2):
        for o in range(PAGE):
            for b in range(B):
                assert permuted[blk, b, o].tolist() == natural[blk, o, 16 * b : 16 * b + 16].tolist(), (blk, o, b)


@pytest.mark.parametrize(
    "kind, shape",
    [
        ("q_scale", (3, H, B + 1)),
        ("q_scale", (3, 2, 32, 5)),
        ("q_scale", (3, H * B)),
        ("kv_scale", (3, 2, 32)),
        ("kv_cache", (3, B, PAGE, 15)),
        ("kv_cache", (3, PAGE, D // 2, 1)),
    ],
)
def test_layout_of_refuses_other_shapes(kind, shape):
    with pytest.raises(ValueError, match=rf"^mxlogits: {kind}: expected the natural .* or mfma_permuted .*found shape"):
        mx.layout_of(torch.zeros(shape, dtype=torch.uint8), kind)
    with pytest.raises(ValueError, match="kind: expected one of"):
        mx.layout_of(torch.zeros(shape, dtype=torch.uint8), "q")
    with pytest.raises(ValueError, match="layout: expected one of"):
        mx.to_layout(random_bytes(1, "q_scale"), "q_scale", "swizzled")


def decode_case():
    return make_case([150, 300], [(0, 0, 150), (1, 0, 300), (1, 0, 299)])


@pytest.mark.parametrize("arg", ["q_scale", "kv_cache", "kv_scale"])
def test_op_refuses_permuted_tensor_on_natural_arch(arg):
    assert M.arches["cpu"].scale_layout == "natural"
    case = decode_case()
    plan = make_plan(case, mx.default_variant("cpu"))
    inputs = dict(zip(("q", "q_scale", "kv_cache", "kv_scale", "block_tables", "weights"), case.inputs()))
    inputs[arg] = mx.to_layout(inputs[arg], arg, "mfma_permuted")
    out = torch.full((case.total_q, case.max_seq_len), 5.0)
    with pytest.raises(ValueError) as e:
        mx.pa_mqa_logits_mxfp4(*inputs.values(), plan, case.max_seq_len, out=out)
    msg = str(e.value)
    assert msg.startswith(f"mxlogits: {arg}: expected the natural layout")
    assert "looks like the mfma_permuted (gfx950) layout" in msg
    assert f"found shape {tuple(inputs[arg].shape)}" in msg
    assert bool((out == 5.0).all())  # refused before any launch


def test_check_layout_names_the_other_direction():
    natural = random_bytes(2, "kv_scale")
    mx.check_layout("kv_scale", natural, "kv_scale", "natural")
    mx.check_layout("kv_scale", torch.zeros(2, 3), "kv_scale", "natural")  # neither: the op's shape checks report it
    with pytest.raises(ValueError, match=r"^mxlogits: kv_scale: expected the mfma_permuted layout .*looks like the "
                                         r"natural \(.*cpu.*\) layout"):
        mx.check_layout("kv_scale", natural, "kv_scale", "mfma_permuted")


def test_reference_identical_on_either_layout():
    case = decode_case()
    q, q_scale, kv_cache, kv_scale, block_tables, weights = case.inputs()
    ref = reference(case)
    permuted = [mx.to_layout(t, k, "mfma_permuted") for t, k in zip((q_scale, kv_cache, kv_scale), KINDS)]
    other = mx.reference_logits(
        q, permuted[0], *permuted[1:], block_tables, weights, case.local_ends, case.max_seq_len,
        local_starts=case.local_starts, row_to_batch=case.row_to_batch,
    )
    assert torch.isfinite(ref).any()
    assert torch.equal(ref.isnan(), other.isnan()) and torch.equal(ref.nan_to_num(), other.nan_to_num())


def test_paged_writer_fills_permuted_fused_pages():
    pages = 4
    keys = torch.randn(9, D)
    packed, scales = mx.quantize_mxfp4(keys)
    slots = torch.tensor([0, 70, -1, 255, 130, 64, 63, 200, 1])
    natural_buffer, kv_cache, kv_scale = mx.fused_kv_cache(pages)
    mx.write_paged_kv(packed, scales, slots, kv_cache, kv_scale)
    permuted_buffer = torch.zeros_like(natural_buffer)
    p_cache, p_scale = mx.fused_views(permuted_buffer, "mfma_permuted")
    assert p_cache.shape == (pages, *PERMUTED_INNER["kv_cache"])
    assert p_scale.shape == (pages, *PERMUTED_INNER["kv_scale"])
    mx.write_paged_kv(packed, scales, slots, p_cache, p_scale)
    assert torch.equal(p_cache, mx.to_layout(kv_cache, "kv_cache", "mfma_permuted"))
    assert torch.equal(p_scale, mx.to_layout(kv_scale, "kv_scale", "mfma_permuted"))
    # Per page: the permuted value bytes, then the permuted scale bytes.
    value_bytes = PAGE * D // 2
    assert torch.equal(permuted_buffer[:, :value_bytes], p_cache.reshape(pages, -1))
    assert torch.equal(permuted_buffer[:, value_bytes:], p_scale.reshape(pages, -1))
    with pytest.raises(ValueError, match="kv_cache/kv_scale: expected"):
        mx.write_paged_kv(packed, scales, slots, kv_cache, p_scale)

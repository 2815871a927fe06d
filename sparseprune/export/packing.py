"""Pattern -> packed format: each pruned layer's GEMM matrix in the layout its kernel reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.formats.bsr import PackedBSR, kept_blocks, pack_bsr
from sparseprune.export.formats.csr import PackedCSR, pack_csr
from sparseprune.export.formats.nm import PackedNM, pack_nm
from sparseprune.export.formats.tw import GRANULARITIES, PackedTW, pack_tw
from sparseprune.pruning.patterns import KEPT, RESIDUAL, keep_mask

FORMATS: dict[str, type] = {cls.format_name: cls for cls in (PackedTW, PackedNM, PackedCSR, PackedBSR)}


def pack_layer(weight_kn: torch.Tensor, codes: torch.Tensor, pattern: Mapping[str, Any]) -> PackedWeight:
    """Pack one layer's B (K x N) under its keep codes, in the format of `pattern["name"]`."""
    name = pattern["name"]
    keep = keep_mask(codes)
    if name == "tw":
        return pack_tw(weight_kn, keep, int(pattern["granularity"]))
    if name == "tew":
        return pack_tw(weight_kn, codes == KEPT, int(pattern["granularity"]), residual_mask=codes == RESIDUAL)
    if name == "nm" and int(pattern.get("block", 1)) > 1:  # each block column keeps whole blocks: one TW tile
        block = int(pattern["block"])
        kept_blocks(keep, block, block)
        return pack_tw(weight_kn, keep, block)
    if name == "nm":
        return pack_nm(weight_kn, keep, int(pattern["m"]), int(pattern.get("vector", 1)))
    if name == "vw":
        return pack_nm(weight_kn, keep, int(pattern["vector"]))
    if name == "ew":
        return pack_csr(weight_kn, keep)
    if name == "bw":
        return pack_block_wise(weight_kn, keep, int(pattern["block_k"]), int(pattern["block_n"]))
    if name == "shflbw":  # each permuted group of columns is one TW tile
        return pack_tw(weight_kn, keep, int(pattern["block"]))
    raise UserError(f"no packed format for pattern {name!r}")


def pack_block_wise(weight_kn: torch.Tensor, keep: torch.Tensor, block_k: int, block_n: int) -> PackedWeight:
    """A BW mask whose blocks are as wide as a TW tile is a TW mask: the columns of a block column keep the same rows,
    so it packs as tiles of block_n and runs on the TW kernels. Other widths (or K the TW kernels cannot read) pack as
    BSR, which runs on the CPU only."""
    kept_blocks(keep, block_k, block_n)
    if block_n in GRANULARITIES and weight_kn.shape[0] % 8 == 0:
        return pack_tw(weight_kn, keep, block_n)
    return pack_bsr(weight_kn, keep, block_k, block_n)


def packed_from_tensors(format_name: str, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedWeight:
    if format_name not in FORMATS:
        raise UserError(f"unknown packed format {format_name!r}; known: {sorted(FORMATS)}")
    return FORMATS[format_name].from_tensors(tensors, metadata)

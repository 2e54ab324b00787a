"""RFC 9162 (Certificate Transparency v2) Merkle history tree: hashing, proofs and their verification.

Pure functions over a *node getter*; where the nodes live (the ledger's SQLite file) is
:mod:`~flopwatch.monitor.tree`'s business.

* leaf hash  ``SHA-256(0x00 ‖ data)``, interior node ``SHA-256(0x01 ‖ left ‖ right)`` (RFC 9162 §2.1.1);
* the tree of ``n`` leaves splits at ``k``, the largest power of two below ``n``, so every left subtree is a
  *perfect* subtree ``(level, index)`` = the leaves ``[index·2^level, (index+1)·2^level)``. Storing the perfect
  subtrees (one new node per append, amortised) makes an append O(1) amortised and a root or a proof a read
  of O(log n) stored nodes, for any size ever reached — the "compact range" of the transparency-log designs;
* inclusion (audit) paths and consistency proofs as RFC 9162 §2.1.3.1 and §2.1.4.1 define them, and their
  verification exactly as §2.1.3.2 and §2.1.4.2 give the algorithms.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

#: ``get(level, index)`` → the 32-byte root of the perfect subtree ``(level, index)``.
NodeGetter = Callable[[int, int], bytes]

EMPTY_ROOT = hashlib.sha256(b"").digest()  # RFC 9162 §2.1.1: MTH({}) = SHA-256()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (n ≥ 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def perfect_ranges(lo: int, hi: int) -> list[tuple[int, int]]:
    """The perfect subtrees ``(level, index)`` that make up the leaves ``[lo, hi)``, left to right, as the
    RFC 9162 recursion cuts them (valid for every range that recursion visits: ``lo`` aligned)."""
    out: list[tuple[int, int]] = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        while lo % (1 << level):
            level -= 1
        out.append((level, lo >> level))
        lo += 1 << level
    return out


def fold(hashes: Sequence[bytes]) -> bytes:
    """Root of consecutive perfect subtrees, largest first: ``node(P1, node(P2, … Pk))`` (RFC 9162 recursion)."""
    if not hashes:
        return EMPTY_ROOT
    h = hashes[-1]
    for left in reversed(hashes[:-1]):
        h = node_hash(left, h)
    return h


def range_hash(get: NodeGetter, lo: int, hi: int) -> bytes:
    """MTH of the leaves ``[lo, hi)`` from stored perfect subtrees (O(log n) reads)."""
    return fold([get(lv, i) for lv, i in perfect_ranges(lo, hi)])


def root(get: NodeGetter, size: int) -> bytes:
    return range_hash(get, 0, size)


def inclusion_path(get: NodeGetter, index: int, size: int) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(m, D[n]) of leaf ``index`` in the tree of ``size`` leaves, leaf to root."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    lo, hi, m = 0, size, index
    stack: list[bytes] = []
    while hi - lo > 1:
        k = _split(hi - lo)
        if m < k:
            stack.append(range_hash(get, lo + k, hi))
            hi = lo + k
        else:
            stack.append(range_hash(get, lo, lo + k))
            lo, m = lo + k, m - k
    path.extend(reversed(stack))
    return path


def consistency_proof(get: NodeGetter, first: int, second: int) -> list[bytes]:
    """RFC 9162 §2.1.4.1 PROOF(m, D[n]): the tree of ``first`` leaves is a prefix of the one of ``second``."""
    if not 0 < first <= second:
        raise ValueError(f"no consistency proof from size {first} to size {second}")
    stack: list[bytes] = []
    lo, hi, m, b = 0, second, first, True
    while True:
        n = hi - lo
        if m == n:
            if not b:
                stack.append(range_hash(get, lo, hi))
            break
        k = _split(n)
        if m <= k:
            stack.append(range_hash(get, lo + k, hi))
            hi = lo + k
        else:
            stack.append(range_hash(get, lo, lo + k))
            lo, m, b = lo + k, m - k, False
    return list(reversed(stack))


def verify_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes], expected_root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: does ``path`` prove the leaf hash ``leaf`` at ``index`` in the tree ``expected_root``?"""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == expected_root


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does ``proof`` show the tree ``first_root`` (``first`` leaves) is a prefix of
    ``second_root`` (``second`` leaves)? Equal sizes need equal roots and an empty proof."""
    if first == second:
        return not proof and first_root == second_root
    if not 0 < first < second or not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:  # an exact power of two: the first tree is itself a node of the second
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0


class CompactRange:
    """The right edge of a growing tree: the roots of its perfect subtrees, O(log n) memory.

    ``append(leaf)`` returns the perfect nodes it completed ``[(level, index, hash), …]`` (the leaf itself
    first), which is exactly what a store needs to keep every root and proof O(log n) to read.
    """

    __slots__ = ("size", "_stack")

    def __init__(self, size: int = 0, hashes: Iterable[bytes] = ()) -> None:
        self.size = size
        levels = [lv for lv in range(size.bit_length() - 1, -1, -1) if size >> lv & 1]
        hs = list(hashes)
        if len(hs) != len(levels):
            raise ValueError(f"a compact range of {size} leaves has {len(levels)} nodes, got {len(hs)}")
        self._stack = list(zip(levels, hs, strict=True))

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        idx = self.size
        out = [(0, idx, leaf)]
        st = self._stack
        st.append((0, leaf))
        level = 0
        while len(st) >= 2 and st[-2][0] == st[-1][0]:
            (_, left), (_, right) = st[-2], st[-1]
            level += 1
            h = node_hash(left, right)
            st[-2:] = [(level, h)]
            out.append((level, idx >> level, h))
        self.size += 1
        return out

    def root(self) -> bytes:
        return fold([h for _, h in self._stack])

    def nodes(self) -> list[tuple[int, bytes]]:
        return list(self._stack)

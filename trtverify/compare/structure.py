"""Structural pairing: the tensors of two exports of one model that hold the same value, found by what computes
them where their names differ (a TorchScript export against a dynamo export of the same module, an FP16 or
INT8 conversion of either).

Two nodes are *equivalent* when they do the same operation with the same parameters (`graphview`: fused,
quantised and reshape forms of one op count as it, ONNX defaults filled in, negative axes normalised), their
outputs have equal shapes, and their inputs agree: each data input paired with the other's, each constant
equal up to the precision it is stored in (a candidate's FP16 or dequantised INT8 weight against the
reference's FP32 one: `constants.equal`), shape arithmetic equal as one run of the first sample computed it.
What lowering inserts is looked through (`graphview`): a node reading `Cast(x)` or `DQ(Q(x))` reads `x`.

Pairs grow from seeds (the graph inputs and the pairs names made) and from *anchors* (nodes whose weight is
distinctive, not zeros or ones, and equal to exactly one node's on the other side):

- forward: a consumer of a paired tensor pairs with the one equivalent consumer of its image (the only one:
  no other reference consumer fits that node either);
- backward: where two paired tensors come from equivalent nodes, their unpaired data inputs pair: the same
  input of the same operation holds what the model computes there on both sides, also where the exporters
  computed it differently (a GELU as one node and as five: its result pairs, its insides do not).

Every rule pairs only where exactly one node on each side fits: where exporters decompose differently the
tensors inside stay unpaired and pairing resumes after them. A wrong pair would be worse than none: no
tensor's value is looked at to choose a pair, only weights, parameters and shapes.
"""

from __future__ import annotations

import bisect
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trtverify.compare.constants import SLACK, Const, equal, zeros
from trtverify.compare.graphview import RESHAPES, View, family, moved, same_value

COMMUTATIVE = frozenset({"Add", "Mul", "Sum", "Max", "Min", "Mean", "And", "Or", "Xor", "Equal"})
# optional inputs whose absence means zeros: a bias
BIAS_SLOTS = frozenset({("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2)})
MAX_ROUNDS = 6
# ops whose output does not determine their input (shift- or scale-invariant, comparisons, selections): the same
# output from two differently computed inputs says nothing about those inputs
FORGETFUL = frozenset({"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "InstanceNormalization",
                       "GroupNormalization", "LpNormalization", "MeanVarianceNormalization", "ArgMax", "ArgMin",
                       "Sign", "TopK", "NonZero", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not",
                       "Shape", "Size", "Round", "Floor", "Ceil"})  # fmt: skip


@dataclass(frozen=True)
class Found:
    """A pair structure made: reference tensor, candidate tensor, and why."""

    reference: str
    candidate: str
    why: str


class Matcher:
    """Pairs the live tensors of a reference and a candidate graph by structure (the module docstring)."""

    def __init__(self, ref: View, cand: View, seeds: Mapping[str, str]):
        self.ref, self.cand = ref, cand
        self.pair: dict[str, str] = {}  # reference root -> candidate root
        self.image: dict[str, str] = {}  # candidate root -> reference root
        self.why: dict[str, str] = {}
        self.queue: deque[str] = deque()
        self._same: dict[tuple[int, int], bool] = {}
        self._core_ref, self._core_cand = set(ref.core), set(cand.core)
        for r, c in seeds.items():
            self._add(ref.of(r), cand.of(c), "")

    # -- pairs -----------------------------------------------------------------------------------
    def _add(self, r: str, c: str, why: str) -> bool:
        if r in self.pair or c in self.image or r not in self.ref.live or c not in self.cand.live:
            return False
        self.pair[r], self.image[c] = c, r
        if why:
            self.why[r] = why
        self.queue.append(r)
        return True

    def _pair_outputs(self, ri: int, ci: int, why: str) -> bool:
        added = False
        for ro, co in zip(self.ref.outs(ri), self.cand.outs(ci)):
            if ro and co and ro in self.ref.live and co in self.cand.live:
                added |= self._add(ro, co, why)
        return added

    # -- equivalence -----------------------------------------------------------------------------
    def same_op(self, ri: int, ci: int) -> bool:
        """Same operation, parameters and output shapes (not the inputs: `inputs`)."""
        if (ri, ci) not in self._same:
            self._same[(ri, ci)] = self._same_op(ri, ci)
        return self._same[(ri, ci)]

    def _same_op(self, ri: int, ci: int) -> bool:
        rop, cop = self.ref.op(ri), self.cand.op(ci)
        routs, couts = self.ref.outs(ri), self.cand.outs(ci)
        if family(rop) != family(cop) or len([o for o in routs if o]) != len([o for o in couts if o]):
            return False
        for ro, co in zip(routs, couts):
            rs, cs = self.ref.shape(ro), self.cand.shape(co)
            if rs is not None and cs is not None and rs != cs:
                return False
        if rop in RESHAPES or cop in RESHAPES:
            # a layout-preserving reshape: its output is its input's values in order, whatever its parameters
            return self.ref.shape(routs[0]) is not None and self.cand.shape(couts[0]) is not None
        return self._same_params(ri, ci)

    def _same_params(self, ri: int, ci: int) -> bool:
        """Same attributes: where both are one op type, every one (defaults filled in); where they are two forms
        of one op (FusedConv and Conv, GlobalAveragePool and ReduceMean), those both have."""
        same_type = self.ref.op(ri) == self.cand.op(ci)
        ra, ca = self.ref.params(ri, same_type), self.cand.params(ci, same_type)
        if same_type and set(ra) != set(ca):
            return False  # set on one side only, with no default to compare with
        return all(same_value(ra[k], ca[k]) for k in set(ra) & set(ca))

    def inputs(self, ri: int, ci: int) -> list[tuple[str, str]] | None:
        """The unpaired data inputs (reference, candidate) the two nodes would pair, when their inputs agree;
        None when they do not. Commutative ops may have their two inputs either way round (one way must fit)."""
        rin, cin = self.ref.ins(ri), self.cand.ins(ci)
        fits = [h for h in (self._aligned(ri, ci, rin, cin),) if h is not None]
        rop = self.ref.op(ri)
        if family(rop) in COMMUTATIVE and len(rin) == 2 and len(cin) == 2:
            swapped = self._aligned(ri, ci, rin, cin[::-1])
            if swapped is not None and (not fits or fits[0] != swapped):
                fits.append(swapped)
        return fits[0] if len(fits) == 1 else None

    def _aligned(self, ri: int, ci: int, rin: list[str], cin: list[str]) -> list[tuple[str, str]] | None:
        rop, cop = self.ref.op(ri), self.cand.op(ci)
        holes = []
        # a reshape's parameters (target shape, axes) are judged by its output's shape: only its data is compared
        width = 1 if family(rop) == "Reshape" else max(len(rin), len(cin))
        for pos in range(width):
            r = rin[pos] if pos < len(rin) else ""
            c = cin[pos] if pos < len(cin) else ""
            if moved(rop, pos) or moved(cop, pos):
                continue  # compared with the attributes (View.params)
            rk, ck = self.ref.kind(r), self.cand.kind(c)
            if rk == "live" or ck == "live":
                if rk != ck:
                    return None
                rr, cr = self.ref.of(r), self.cand.of(c)
                if rr in self.pair:
                    if self.pair[rr] != cr:
                        return None
                elif cr in self.image:
                    return None
                else:
                    holes.append((rr, cr))
            elif rk == "const" and ck == "const":
                a, b = self.ref.value(r), self.cand.value(c)
                assert a is not None and b is not None
                if not equal(a, b):
                    return None
            elif (rk == "") != (ck == ""):
                present = self.ref.value(r) if r else self.cand.value(c)
                if (family(rop), pos) not in BIAS_SLOTS or not zeros(present):
                    return None  # an input one side lacks: equal only where absent means zeros (a bias)
            # const/param, param/param: unknown values (shape arithmetic): the output shapes decide
        return holes

    def equivalent(self, ri: int, ci: int) -> list[tuple[str, str]] | None:
        """The holes (unpaired data inputs) of an equivalent pair of nodes, None when they are not equivalent."""
        if not self.same_op(ri, ci):
            return None
        return self.inputs(ri, ci)

    def _unpaired(self, view: View, idx: int, paired: Mapping[str, str]) -> bool:
        outs = [o for o in view.outs(idx) if o in view.live]
        return bool(outs) and not any(o in paired for o in outs)

    # -- rules -----------------------------------------------------------------------------------
    def forward(self, r: str) -> None:
        """The consumers of paired tensor `r` that have exactly one equivalent consumer of its image."""
        c = self.pair[r]
        cands = [ci for ci, _ in self.cand.consumers.get(c, []) if self._unpaired(self.cand, ci, self.image)]
        for ri in dict.fromkeys(ri for ri, _ in self.ref.consumers.get(r, [])):
            if not self._unpaired(self.ref, ri, self.pair):
                continue
            fit = [(ci, h) for ci in dict.fromkeys(cands) if (h := self.equivalent(ri, ci)) is not None]
            if len(fit) != 1:
                continue
            ci, holes = fit[0]
            if holes and (self._rivals(ri, ci, r) or not self._shapes_known(ri, ci)):
                continue  # another reference consumer fits that node as well, or nothing confirms it: ambiguous
            how = "on paired inputs" if not holes else "on the paired input " + repr(r)
            self._pair_outputs(ri, ci, f"{self.ref.op(ri)} {how}")

    def _shapes_known(self, ri: int, ci: int) -> bool:
        outs = zip(self.ref.outs(ri), self.cand.outs(ci))
        return all(self.ref.shape(ro) is not None and self.cand.shape(co) is not None for ro, co in outs if ro and co)

    def _rivals(self, ri: int, ci: int, r: str) -> bool:
        others = [x for x, _ in self.ref.consumers.get(r, []) if x != ri and self._unpaired(self.ref, x, self.pair)]
        return any(self.equivalent(x, ci) is not None for x in dict.fromkeys(others))

    def backward(self, r: str) -> None:
        """The unpaired data inputs of the two equivalent nodes computing paired tensor `r` and its image: they
        hold what the model computes at that point on both sides (the same input of the same operation), also
        where the two exporters computed them differently (a GELU as one node and as five)."""
        ri, ci = self.ref.producer(r), self.cand.producer(self.pair[r])
        if ri is None or ci is None or ri not in self._core_ref or ci not in self._core_cand:
            return
        holes = self.equivalent(ri, ci)
        op = self.ref.op(ri)
        for hr, hc in holes or []:
            pr, pc = self.ref.producer(hr), self.cand.producer(hc)
            if pr is None or pc is None or pr not in self._core_ref or pc not in self._core_cand:
                continue
            rs, cs = self.ref.shape(hr), self.cand.shape(hc)
            if rs is None or rs != cs:
                continue
            slot_r, slot_c = self.ref.outs(pr).index(hr), self.cand.outs(pc).index(hc)
            if slot_r != slot_c:
                continue
            rop, cop = self.ref.op(pr), self.cand.op(pc)
            if self.equivalent(pr, pc) is not None:
                self._pair_outputs(pr, pc, f"{rop} feeding the paired {op} '{r}'")
            elif family(op) not in FORGETFUL:
                why = f"the input of the paired {op} '{r}' (the reference computes it with {rop}, the candidate {cop})"
                self._add(hr, hc, why)

    def anchors(self) -> bool:
        """Pair the nodes whose distinctive weight equals exactly one candidate node's, equivalent to it, and
        that candidate node's exactly one reference node's."""
        index = Weights()
        for ci in self.cand.core:
            if self._unpaired(self.cand, ci, self.image):
                for key, const in self._weights(self.cand, ci):
                    index.add(key, ci, const)
        matches: dict[int, set[int]] = defaultdict(set)
        claims: dict[int, set[int]] = defaultdict(set)
        for ri in self.ref.core:
            if not self._unpaired(self.ref, ri, self.pair):
                continue
            for key, const in self._weights(self.ref, ri):
                for ci in index.equal(key, const):
                    if ci not in matches[ri] and self.equivalent(ri, ci) is not None:
                        matches[ri].add(ci)
                        claims[ci].add(ri)
        added = False
        for ri, cis in matches.items():
            ci = next(iter(cis), None)
            if ci is not None and len(cis) == 1 and len(claims[ci]) == 1:
                added |= self._pair_outputs(ri, ci, f"{self.ref.op(ri)} with equal weights")
        return added

    def _weights(self, view: View, idx: int) -> Iterable[tuple[tuple, Const]]:
        for pos, t in enumerate(view.ins(idx)):
            if t and t not in view.live:
                c = view.consts.get(t)
                if c is not None and c.distinctive():
                    yield (family(view.op(idx)), pos, c.squeezed()), c

    # -- driver ----------------------------------------------------------------------------------
    def propagate(self) -> None:
        while self.queue:
            r = self.queue.popleft()
            self.forward(r)
            self.backward(r)

    def run(self, wanted: Iterable[str]) -> None:
        """Grow from the seeds; where tensors in `wanted` stay unpaired, from anchors too (weights are read only
        then), until nothing more pairs."""
        wanted = [r for r in wanted if self.ref.of(r) == r]
        self.propagate()
        for _ in range(MAX_ROUNDS):
            if all(r in self.pair for r in wanted) or not self.anchors():
                break
            self.propagate()


class Weights:
    """The candidate's distinctive weights, found by value: per kind (op family, input position, shape), sorted
    by one element, so a reference weight is compared only with those whose element is within tolerance."""

    def __init__(self) -> None:
        self.keys: dict[tuple, list[float]] = defaultdict(list)
        self.entries: dict[tuple, list[tuple[float, int, Const]]] = defaultdict(list)
        self.slack: dict[tuple, float] = defaultdict(float)

    @staticmethod
    def probe(c: Const) -> float:
        return float(c.values.reshape(-1)[c.values.size // 2])

    def add(self, key: tuple, idx: int, c: Const) -> None:
        self.entries[key].append((self.probe(c), idx, c))
        scale = float(abs(c.values).max())
        self.slack[key] = max(self.slack[key], (c.rel + SLACK) * scale + c.abs)

    def equal(self, key: tuple, c: Const) -> list[int]:
        entries = self.entries.get(key)
        if not entries:
            return []
        if key not in self.keys:
            entries.sort(key=lambda e: e[0])
            self.keys[key] = [e[0] for e in entries]
        keys, v = self.keys[key], self.probe(c)
        tol = self.slack[key] + (c.rel + SLACK) * float(abs(c.values).max()) + c.abs
        lo, hi = bisect.bisect_left(keys, v - tol), bisect.bisect_right(keys, v + tol)
        return [idx for _, idx, other in entries[lo:hi] if equal(c, other)]


def pair_by_structure(
    ref: View, cand: View, seeds: Mapping[str, str], wanted: Iterable[str], exposed: set[str]
) -> list[Found]:
    """Pairs for the reference tensors in `wanted` (the ones names left unpaired) that structure finds; each
    candidate tensor is one `exposed` by the candidate and not in `seeds` already."""
    wanted = list(wanted)
    m = Matcher(ref, cand, seeds)
    m.run(wanted)
    taken = set(seeds.values())
    out = []
    for r in wanted:
        c = m.pair.get(r) if ref.of(r) == r else None
        if c is None or c in taken or c not in exposed or r not in m.why:
            continue
        taken.add(c)
        p = cand.g.producers[c]
        out.append(Found(r, c, f"by structure: {m.why[r]} (candidate {p.op_type} '{p.node}')"))
    return out

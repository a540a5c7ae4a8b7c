"""The vocabulary of the simulated world: skills and operator families.

Each skill has a phrase (the words a memory item about it uses), a cue (a word
a task description may contain when the skill is needed) and one sentence of
advice. Misleading skills reuse the cues of the useful ones on purpose: they
look just as relevant to lexical retrieval, and only outcomes tell them apart.
Edit this file to change the world; nothing else hard-codes a skill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SkillKind = Literal["shared", "family", "misleading", "irrelevant"]


@dataclass(frozen=True)
class Skill:
    id: str
    kind: SkillKind
    phrase: str
    cue: str
    advice: str
    family: str | None = None  # set for family skills


@dataclass(frozen=True)
class Family:
    name: str
    operators: tuple[str, ...]
    skills: tuple[Skill, ...]  # the family's own skills


def _s(id_: str, kind: SkillKind, phrase: str, cue: str, advice: str, family: str | None = None) -> Skill:
    return Skill(id_, kind, phrase, cue, advice, family)


# Useful across families: which ones a family relies on is drawn per seed.
SHARED = (
    _s(
        "double_buffer",
        "shared",
        "double buffering",
        "pipeline",
        "Split the unified buffer in two and overlap the copy-in of the next tile with compute on the current one so the pipeline never stalls.",
    ),
    _s(
        "fp32_accum",
        "shared",
        "fp32 accumulation",
        "fp16",
        "Accumulate partial results in fp32 and cast to fp16 only at the final store; fp16 sums drift past tolerance.",
    ),
    _s(
        "tail_mask",
        "shared",
        "tail masking",
        "tail",
        "Handle the last partial tile with a mask on the tail instead of padding the input tensor.",
    ),
    _s(
        "align32",
        "shared",
        "32-byte alignment",
        "alignment",
        "Round every UB allocation and DataCopy length up to 32 bytes; alignment faults appear only on some shapes.",
    ),
    _s(
        "core_split",
        "shared",
        "multi-core split",
        "batch",
        "Split the outer batch dimension across all AI cores and loop persistently over blocks.",
    ),
    _s(
        "vec_fusion",
        "shared",
        "vector fusion",
        "fused",
        "Keep intermediates in UB and issue fused vector instructions instead of round trips to global memory.",
    ),
)

# Plausible and wrong: each mirrors a shared skill and shares its cue word.
MISLEADING = (
    _s(
        "fp16_accum",
        "misleading",
        "fp16 accumulation shortcut",
        "fp16",
        "Accumulate directly in fp16 to halve UB usage; the precision loss never matters.",
    ),
    _s(
        "skip_tail",
        "misleading",
        "tail skipping",
        "tail",
        "Skip the tail tile entirely; real shapes are always multiples of the block size.",
    ),
    _s(
        "single_buffer",
        "misleading",
        "single buffer pipeline",
        "pipeline",
        "Use one buffer for the whole pipeline; double buffering only wastes UB space.",
    ),
    _s(
        "exact_copy",
        "misleading",
        "unaligned exact copy",
        "alignment",
        "Copy exact unaligned lengths with DataCopy; alignment padding wastes bandwidth.",
    ),
    _s(
        "one_core",
        "misleading",
        "single core launch",
        "batch",
        "Launch on one core and loop over the whole batch; synchronisation across cores costs more than it saves.",
    ),
    _s(
        "gm_staging",
        "misleading",
        "global memory staging",
        "fused",
        "Write every intermediate back to global memory so each fused step stays simple and debuggable.",
    ),
)

# Harmless and useless for the outcome: they only take context.
IRRELEVANT = (
    _s("printf", "irrelevant", "printf tracing", "debug", "Print tile indices with printf while developing to follow the debug path."),
    _s(
        "naming",
        "irrelevant",
        "kernel naming scheme",
        "naming",
        "Name kernels after their operator and dtype so the naming stays consistent in listings.",
    ),
    _s(
        "msprof",
        "irrelevant",
        "msprof capture",
        "profile",
        "Capture a profile with msprof before changing anything and keep it next to the source.",
    ),
    _s(
        "headers",
        "irrelevant",
        "comment headers",
        "readability",
        "Start each kernel file with a comment header describing its shapes for readability.",
    ),
    _s("unit_tests", "irrelevant", "unit test layout", "tests", "Put each kernel's unit tests in a tests folder next to it."),
    _s(
        "host_logging",
        "irrelevant",
        "host-side logging",
        "logging",
        "Log kernel launch parameters on the host side with the standard logging module.",
    ),
)


def _family(name: str, operators: str, skills: list[tuple[str, str, str, str]]) -> Family:
    return Family(name, tuple(operators.split()), tuple(_s(i, "family", p, c, a, name) for i, p, c, a in skills))


FAMILIES = (
    _family(
        "reduction",
        "sum mean amax prod",
        [
            (
                "tree_reduce",
                "tree reduction",
                "reduce",
                "Reduce in a binary tree inside the block, then across blocks, instead of a serial loop.",
            ),
            (
                "whole_reduce",
                "WholeReduce intrinsic",
                "lastdim",
                "Use the WholeReduce intrinsic along the lastdim so one instruction folds a whole repeat.",
            ),
            (
                "two_stage",
                "two-stage reduction",
                "workspace",
                "Write per-core partials to a workspace and finish them in a second small pass.",
            ),
        ],
    ),
    _family(
        "normalization",
        "layernorm rmsnorm groupnorm instancenorm",
        [
            (
                "welford",
                "Welford statistics",
                "variance",
                "Compute mean and variance in one Welford pass instead of two passes over the row.",
            ),
            (
                "fused_affine",
                "fused affine epilogue",
                "gamma",
                "Apply gamma and beta in the pass that normalises instead of a second kernel.",
            ),
            ("row_per_core", "row-per-core mapping", "hidden", "Map whole rows to cores when the hidden size fits in UB."),
        ],
    ),
    _family(
        "softmax",
        "softmax logsoftmax crossentropy softmin",
        [
            (
                "online_softmax",
                "online max rescaling",
                "streaming",
                "Keep a running max and rescale the running sum: one streaming pass instead of three.",
            ),
            ("max_subtract", "max subtraction", "overflow", "Subtract the row max before exp so large logits do not overflow."),
            ("exp2", "exp2 rewriting", "exponent", "Compute exp(x) as exp2(x * log2e); the exponent unit is faster on exp2."),
        ],
    ),
    _family(
        "activation",
        "gelu silu mish sigmoid",
        [
            ("tanh_approx", "tanh approximation", "approximate", "Use the tanh approximate form where the task tolerance allows it."),
            ("ub_chunking", "UB-sized chunking", "flat", "View the tensor as flat and stream it in UB-sized chunks with no shape logic."),
            ("lookup_table", "lookup table", "table", "Precompute a lookup table for the transcendental on bf16 inputs."),
        ],
    ),
    _family(
        "matmul",
        "gemm bmm addmm linear",
        [
            ("l0c_tiling", "L0C tile sizing", "cube", "Size base M, N and K so the cube unit's L0C holds the whole output tile."),
            ("nz_layout", "NZ fractal layout", "fractal", "Keep operands in the NZ fractal layout so the cube path needs no transpose."),
            ("k_split", "K-dimension splitting", "depth", "Split a long K depth across cores and add the partial products at the end."),
        ],
    ),
    _family(
        "attention",
        "flashattention sdpa mqa gqa",
        [
            ("tiled_qk", "tiled QK blocks", "sequence", "Tile Q and K along the sequence so the score matrix never materialises."),
            ("causal_skip", "causal block skipping", "causal", "Skip the blocks above the diagonal under a causal mask."),
            ("kv_sharing", "KV head sharing", "heads", "Load each KV head once and reuse it for all query heads that share it."),
        ],
    ),
    _family(
        "convolution",
        "conv1d conv2d depthwiseconv transposedconv",
        [
            ("img2col", "img2col lowering", "im2col", "Lower the convolution to a matmul through im2col in L1."),
            ("channel_tiling", "channel tiling", "channels", "Tile over output channels so weights stay resident in L1."),
            ("halo_reuse", "halo reuse", "halo", "Load each input tile once with its halo and reuse the overlap for neighbouring outputs."),
        ],
    ),
    _family(
        "pooling",
        "maxpool avgpool adaptivepool lppool",
        [
            (
                "window_reuse",
                "sliding window reuse",
                "window",
                "Reuse the overlap of consecutive windows instead of reloading each window.",
            ),
            ("index_tracking", "index tracking", "indices", "Keep argmax indices in a parallel UB buffer updated with the max."),
            ("strided_copy", "strided DataCopy", "stride", "Gather strided rows with one DataCopy using src stride instead of a loop."),
        ],
    ),
    _family(
        "scan",
        "cumsum cumprod logcumsumexp cummax",
        [
            ("block_scan", "block-level scan", "prefix", "Scan inside each block, then add the block prefix in a second sweep."),
            ("carry_chain", "carry propagation", "carry", "Propagate the carry of each tile to the next instead of rescanning."),
            (
                "lookback",
                "decoupled lookback",
                "lookback",
                "Let each core look back at its predecessors' published sums instead of waiting on a barrier.",
            ),
        ],
    ),
    _family(
        "gather",
        "embedding gather indexselect scatteradd",
        [
            ("index_sort", "index sorting", "sorted", "Sort indices first so rows are read in order and duplicates combine."),
            ("row_coalescing", "row coalescing", "contiguous", "Copy whole contiguous rows per index rather than element by element."),
            ("atomic_accum", "atomic accumulation", "atomic", "Use atomic add in global memory for duplicate scatter targets."),
        ],
    ),
)

ALL_SKILLS: dict[str, Skill] = {s.id: s for s in SHARED + MISLEADING + IRRELEVANT + tuple(x for f in FAMILIES for x in f.skills)}

# Each shared skill and the misleading one that uses its cue word: under drift
# the pair swaps roles (the old trick turns harmful, its mirror is now needed).
MIRROR: dict[str, str] = {s.id: m.id for s in SHARED for m in MISLEADING if m.cue == s.cue}
if len(MIRROR) != len(SHARED):
    raise RuntimeError("catalogue: every shared skill needs a misleading mirror with the same cue word")

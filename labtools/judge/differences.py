"""What a wrong tensor shows about how it differs from the expected one, whatever the exercise.

A test that finds a result wrong holds two tensors: the answer's and the expected one. Before
it falls back on restating the contract, it can ask `describe_difference(got, want, axes)` what the
difference itself shows: the right numbers with the axes in another order, a factor, an offset, a
sign, a factor or an offset of each row's own, a shift along an axis, one slice copied into every
slot, or where the two differ (which rows, which side of the diagonal, where the expected value is
0). Each sentence is a measurement of the
two tensors, never a guess about the code that made them; "" when nothing simple holds.

It runs on the judge's side, on data only, as `labwire.describe_difference` (the judge adds it to
the wire module its tests see). `labtools build` copies it into every lab's handle cell, beside the
wire, so that the labs' visible tests say what the grader says. It must not import labtools (a
student's kernel may not have it).
"""

import itertools
import math

import torch

_RTOL, _ATOL = 1e-4, 1e-5


def _as_f64(value):
    try:
        t = torch.as_tensor(value)
        return t.detach().cpu().to(torch.float64) if t.dtype != torch.complex64 else None
    except Exception:  # noqa: BLE001 - not numbers: nothing to describe
        return None


def _close(a, b):
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=_RTOL, atol=_ATOL, equal_nan=False))


def _axis(axes, d):
    return axes[d] if axes and d < len(axes) and axes[d] else f"dimension {d}"


def _at(axes, d, indices):
    """"query 1-4", or "index 1-4 of dimension 2" when the dimension has no name."""
    if axes and d < len(axes) and axes[d]:
        return f"{axes[d]} {_spans(indices)}"
    return f"index {_spans(indices)} of dimension {d}"


def _spans(indices):
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out[:6]) + (", ..." if len(out) > 6 else "")


def _number(c):
    """c, with the simple constant it equals when there is one: "0.125 (= 1/8 = 1/sqrt(64))"."""
    sign, a = ("-" if c < 0 else ""), abs(c)
    if a >= 1 and abs(a - round(a)) < 1e-6 * a:
        k = round(a)
        return f"{c:.4g}" + (f" (= {sign}sqrt({k * k}))" if k * k <= 4096 and k > 2 else "")
    for k in range(2, 4097):
        for value, name in ((1 / k, f"1/{k}" + (f" = 1/sqrt({k * k})" if k * k <= 4096 else "")),
                            (math.sqrt(k), f"sqrt({k})"), (1 / math.sqrt(k), f"1/sqrt({k})")):
            if abs(a - value) <= 1e-4 * value:
                return f"{c:.4g} (= {sign}{name.split(' = ')[0] if sign else name})"
    return f"{c:.4g}"


def _shape_story(got, want, axes):
    """The right numbers in the wrong shape: axes in another order, a size-1 axis, or regrouped."""
    if got.numel() != want.numel() or got.numel() == 0:
        return ""
    if got.dim() == want.dim() and got.dim() <= 5:
        for order in itertools.permutations(range(want.dim())):
            if list(order) != list(range(want.dim())) and _close(got, want.permute(order)):
                where = ", ".join(_axis(axes, d) for d in order)
                return (f"your result holds the right numbers with its dimensions in another order: ({where}) "
                        "where the expected order is "
                        f"({', '.join(_axis(axes, d) for d in range(want.dim()))}); move them back with "
                        ".permute or .transpose")
    if _close(got.squeeze(), want.squeeze()):
        extra = got.dim() > want.dim()
        return (f"your result holds the right numbers with {'an extra' if extra else 'a missing'} dimension of size 1 "
                f"(shape {tuple(got.shape)}, expected {tuple(want.shape)})")
    if _close(got, want.reshape(got.shape)):
        told = _merged(tuple(got.shape), tuple(want.shape), axes)
        if told:
            return (f"your result holds the right numbers in the right order with {told} (shape {tuple(got.shape)}, "
                    f"expected {tuple(want.shape)}): a reshape or view gave it the wrong shape")
    return _regrouped(got, want, axes)


def _merged(shape, expected, axes):
    """Which neighbouring dimensions of `expected` are one dimension of `shape`, or the other way
    round: "(batch, head) merged into one dimension of size 4"; "" when they do not line up so."""
    i = j = 0
    told = []
    while i < len(shape) and j < len(expected):
        if shape[i] == expected[j]:
            i, j = i + 1, j + 1
            continue
        a, b, i2, j2 = shape[i], expected[j], i + 1, j + 1
        while a != b and (i2 < len(shape) or j2 < len(expected)):
            if a < b and i2 < len(shape):
                a, i2 = a * shape[i2], i2 + 1
            elif b < a and j2 < len(expected):
                b, j2 = b * expected[j2], j2 + 1
            else:
                return ""
        if a != b:
            return ""
        if j2 - j > 1 and i2 - i == 1:
            names = ", ".join(_axis(axes, d) for d in range(j, j2))
            told.append(f"({names}) merged into one dimension of size {a}")
        elif i2 - i > 1 and j2 - j == 1:
            told.append(f"{_axis(axes, j)} split into {i2 - i} dimensions {tuple(shape[i:i2])}")
        else:
            return ""
        i, j = i2, j2
    return " and ".join(told) if told and i == len(shape) and j == len(expected) else ""


def _regrouped(got, want, axes=None):
    """The right numbers regrouped: what a reshape or view gives where a permute belongs, or, for a
    dimension of pairs (sin and cos, even and odd features), the pairs taken apart by a stack along
    another dimension before the reshape."""
    if want.dim() <= 5 and got.numel() == want.numel():
        for order in itertools.permutations(range(want.dim())):
            if list(order) != list(range(want.dim())) and _close(got, want.permute(order).reshape(got.shape)):
                return ("your result holds the right numbers, regrouped the way a reshape or a view regroups them "
                        "where a .permute or .transpose belongs (a reshape keeps the memory order; it moves no "
                        "dimension)")
    if want.dim() <= 4 and got.numel() == want.numel():
        for d in range(want.dim()):
            n = want.shape[d]
            if n < 4 or n % 2:
                continue
            pairs = want.unflatten(d, (n // 2, 2))            # entry 2i and 2i + 1 of dimension d side by side
            for order in itertools.permutations(range(pairs.dim())):
                together = order.index(d + 1) == order.index(d) + 1   # each pair still side by side
                if not together and _close(got, pairs.permute(order).reshape(got.shape)):
                    return (f"your result holds the right numbers, but the pairs (2i, 2i+1) along {_axis(axes, d)} are "
                            "taken apart: the even entries and the odd ones are laid out as separate blocks, what a "
                            "torch.stack or torch.cat along another dimension gives before the reshape; put each pair "
                            "side by side (torch.stack([even, odd], dim=-1), then reshape)")
    return ""


def _everywhere(got, want, ids=False):
    """One relation that holds on every entry: a constant, a sign, a factor, an offset, an element
    function. For integer results (token ids, counts) only a constant and an offset mean something."""
    finite = torch.isfinite(want)
    if not finite.all() or not torch.isfinite(got).all():
        return ""
    if got.numel() > 1 and bool((got == got.flatten()[0]).all()) and not bool((want == want.flatten()[0]).all()):
        return f"every entry of your result is {got.flatten()[0].item():.4g}"
    if ids:
        shift = float((got - want).mean())
        return f"your result is the expected one plus {shift:.4g} everywhere" \
            if _close(got, want + shift) and abs(shift) > _ATOL else ""
    if _close(got, -want) and want.abs().max() > _ATOL:
        return "your result is the expected one with the opposite sign"
    den = float((want * want).sum())
    if den > 0:
        c = float((got * want).sum()) / den
        if _close(got, c * want) and abs(c - 1) > 1e-3:
            return f"your result is the expected one times {_number(c)}"
    shift = float((got - want).mean())
    if _close(got, want + shift) and abs(shift) > _ATOL:
        return f"your result is the expected one plus {_number(shift)} everywhere"
    if want.numel() > 1 and float(want.std()) > 0:
        a = float(((got - got.mean()) * (want - want.mean())).sum() / ((want - want.mean()) ** 2).sum())
        b = float(got.mean() - a * want.mean())
        if _close(got, a * want + b) and abs(a - 1) > 1e-3 and abs(b) > _ATOL:
            return f"your result is {a:.4g} times the expected one plus {b:.4g}"
    for sentence, make, ok in (
            ("your numbers are the exp of the expected ones (the expected are their log)", torch.exp, True),
            ("your numbers are the log of the expected ones (the expected are their exp)", torch.log,
             bool((want > 0).all())),
            ("your numbers are the squares of the expected ones", torch.square, True),
            ("your numbers are the square roots of the expected ones", torch.sqrt, bool((want >= 0).all())),
            ("your numbers are the reciprocals (1/x) of the expected ones", torch.reciprocal,
             bool((want.abs() > 1e-6).all()))):
        if ok and _close(got, make(want)) and not _close(got, want):
            return sentence
    return ""


def _moved(got, want, axes):
    """Slices along one axis that hold other slices of the expected result: a shift, a flip, one
    slice in every slot, a swap of the last two axes."""
    if got.dim() >= 2 and got.shape[-1] == got.shape[-2] and _close(got, want.transpose(-1, -2)) \
            and not _close(want, want.transpose(-1, -2)):
        return (f"your result is the expected one with its last two dimensions ({_axis(axes, got.dim() - 2)}, "
                f"{_axis(axes, got.dim() - 1)}) swapped")
    partial = ""
    for d in range(got.dim()):
        n = got.shape[d]
        if n < 2:
            continue
        slices = [want.select(d, j) for j in range(n)]
        mapping = []
        for i in range(n):
            mine = got.select(d, i)
            hit = [j for j in range(n) if _close(mine, slices[j])]
            mapping.append(hit[0] if len(hit) == 1 or (hit and i not in hit) else (i if i in hit else None))
        if mapping == list(range(n)):
            continue
        name = _axis(axes, d)
        if None in mapping:
            partial = partial or _partly_moved(got, d, mapping, name)
            continue
        if len(set(mapping)) == 1:
            return f"every {name} of your result holds the expected {name} {mapping[0]}"
        for s in (1, -1, 2, -2):
            if all(mapping[i] == i - s for i in range(max(s, 0), n + min(s, 0))):
                word = "later" if s > 0 else "earlier"
                return (f"your result is the expected one shifted by {abs(s)} along {name}: your {name} i holds the "
                        f"expected {name} i{'-' if s > 0 else '+'}{abs(s)} (it is {abs(s)} {word} than it should be)")
        if mapping == list(range(n - 1, -1, -1)):
            return f"your result is the expected one reversed along {name}"
        if sorted(mapping) == list(range(n)):
            return f"your {name}s are the expected ones in another order: yours {list(range(n))} hold {mapping}"
    return partial


def _partly_moved(got, d, mapping, name):
    """When some slices hold other expected slices (a loop that writes index i where 2i belongs, say):
    which hold which, and what the others hold. "" when fewer than two moved."""
    moved = [(i, j) for i, j in enumerate(mapping) if j is not None and j != i]
    if len(moved) < 2 or len(moved) + mapping.count(None) < len(mapping) * 2 // 3:
        return ""
    pairs = ", ".join(f"{i} holds {j}" if k else f"{i} holds its {name} {j}" for k, (i, j) in enumerate(moved[:6])) + (", ..." if len(moved) > 6 else "")
    rest = [i for i, j in enumerate(mapping) if j is None]
    zero = [i for i in rest if bool((got.select(d, i).abs() <= _ATOL).all())]
    tail = ""
    if rest:
        tail = (f"; your {name} {_spans(rest)} " + ("hold only 0 (never written)" if zero == rest else
                                                    "hold none of the expected ones"))
    return f"some of your {name}s hold other {name}s of the expected result: your {name} {pairs}{tail}"


def _per_slice(got, want, axes):
    """Each slice along one axis (or each vector along the last) is the expected one times a number of
    its own, or plus one: what a normalisation, a scale or a shift computed per row gives when its
    number is wrong. Never one number for all: that is _everywhere's."""
    if got.dim() < 2 or not (torch.isfinite(got).all() and torch.isfinite(want).all()):
        return ""
    last = _axis(axes, got.dim() - 1)
    groups = [(d, f"each {_axis(axes, d)}") for d in range(got.dim()) if got.shape[d] > 1]
    if got.dim() > 2:
        groups.append((None, f"each vector along the last dimension ({last})"))
    for d, subject in groups:
        if d is None:
            g, w = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
        else:
            g, w = got.movedim(d, 0).reshape(got.shape[d], -1), want.movedim(d, 0).reshape(got.shape[d], -1)
        if g.shape[1] < 2 or bool((w.std(dim=1) <= _ATOL).any()):
            continue
        c = (g * w).sum(dim=1) / (w * w).sum(dim=1)
        b = (g - w).mean(dim=1)
        for numbers, fits, right, how in ((c, _close(g, c[:, None] * w), 1.0, "times"),
                                          (b, _close(g, w + b[:, None]), 0.0, "plus")):
            if not fits or float(numbers.max() - numbers.min()) <= max(_ATOL, 1e-3 * float(numbers.abs().max())):
                continue
            wrong = (numbers - right).abs() > max(_ATOL, 1e-3 * abs(right))
            odd = numbers[wrong]
            if d is not None and odd.numel() and float(odd.max() - odd.min()) <= 1e-3 * float(odd.abs().max()):
                # one wrong number, on some slices only: where, and what it is there
                n = got.shape[d]
                return (f"it differs at {_at(axes, d, [i for i in range(n) if wrong[i]])} and is right at "
                        f"{_at(axes, d, [i for i in range(n) if not wrong[i]])}: there your result is the expected "
                        f"one {how} {_number(float(odd.mean()))}")
            which = f" for {_axis(axes, d)} 0, 1, ..." if d is not None else ""
            return (f"{subject} of your result is the expected one {how} a number of its own ({right:g} would be "
                    f"right): {_values(numbers, d)}{which}")
    return ""


def _values(v, d):
    """The numbers in order when they belong to one named axis; their range otherwise."""
    if d is None:
        return f"from {v.min().item():.3g} to {v.max().item():.3g}"
    shown = ", ".join(f"{x:.3g}" for x in v[:6].tolist())
    return f"[{shown}{', ...' if len(v) > 6 else ''}]"


def _where(got, want, axes, ids=False):
    """Where the two differ, when it is not everywhere: which slices, which side of the diagonal,
    where the expected value is 0 (not for integer results: a token id 0 is no blocked entry); and
    NaN or inf where the expected is finite."""
    wrong = ~torch.isclose(got, want, rtol=_RTOL, atol=_ATOL)
    if not wrong.any():
        return ""
    bad = ~torch.isfinite(got) & torch.isfinite(want)
    told = []
    if bad.any():
        kinds = " and ".join(k for k, m in (("NaN", torch.isnan(got)), ("inf", torch.isinf(got))) if (m & bad).any())
        told.append(f"{int(bad.sum())} of {got.numel()} entries are {kinds}")
    zero = want.abs() <= _ATOL
    if zero.any() and not zero.all() and not ids:
        if bool((wrong == zero).all()):
            told.append("it differs exactly where the expected value is 0 (masked or padded entries, say) and "
                        "nowhere else")
        elif bool((wrong & ~zero).sum() == 0):
            told.append("it differs only where the expected value is 0")
        elif bool((wrong & zero).sum() == 0) and bool((got.abs() <= _ATOL)[zero].all()):
            told.append("the entries expected to be 0 are 0; the others differ")
    if got.dim() >= 2 and got.shape[-1] == got.shape[-2] and got.shape[-1] > 1:
        n = got.shape[-1]
        upper = torch.ones(n, n, dtype=torch.bool).triu(1)
        lower = upper.transpose(0, 1)
        rows = wrong.reshape(-1, n, n).any(dim=0)
        for region, name in ((upper, "above the diagonal"), (lower, "below the diagonal"),
                             (upper | lower, "off the diagonal"), (~(upper | lower), "on the diagonal")):
            # the whole of a region or most of it, not one stray entry that happens to lie in it
            if bool((rows & ~region).sum() == 0) and int(rows.sum()) >= max(2, int(region.sum()) // 2):
                told.append(f"it differs only {name} of the last two dimensions ({_axis(axes, got.dim() - 2)}, "
                            f"{_axis(axes, got.dim() - 1)})")
                return "; ".join(told)
    best = None
    for d in range(got.dim()):
        if got.shape[d] < 2:
            continue
        per_slice = wrong.movedim(d, 0).reshape(got.shape[d], -1)
        per = per_slice.any(dim=1)
        # a pattern, not chance: the slices that differ differ in most of their entries
        if per.all() or float(per_slice[per].double().mean()) < 0.5:
            continue
        share = int(per.sum()) / got.shape[d]
        if best is None or share < best[0]:
            n = got.shape[d]
            best = (share, f"it differs at {_at(axes, d, [i for i in range(n) if per[i]])} and is right at "
                           f"{_at(axes, d, [i for i in range(n) if not per[i]])}")
    if best:
        told.append(best[1])
    return "; ".join(told)


def describe_difference(got, want, axes=None, *, before="", after="", skip=()):
    """What `got` shows about how it differs from `want` (tensors, arrays or nested lists of numbers):
    one or two clauses, or "" when nothing simple holds. `axes`: a name for each dimension of
    `want` ("batch", "query", ...), used in the sentences. A message splices the clause in with
    `before`/`after` (": ", "; "), added only when there is a clause; `skip`: openings ("it differs")
    of clauses the message already says, which then give "". Never raises: it only adds a sentence."""
    clause = _describe(got, want, axes)
    if not clause or clause.startswith(tuple(skip)):
        return ""
    return f"{before}{clause}{after}"


def describe_shape(got_shape, want_shape, axes=None, *, before="", after=""):
    """What a wrong shape shows next to the expected one, from the two shapes alone: a dimension of
    size 1 missing or extra, the same sizes in another order (when each size tells its axis), or
    neighbours merged or split; "" otherwise. `axes` names the expected dimensions."""
    try:
        got, want = tuple(int(n) for n in got_shape), tuple(int(n) for n in want_shape)
    except (TypeError, ValueError):
        return ""
    clause = ""
    if got != want:
        if tuple(n for n in got if n != 1) == tuple(n for n in want if n != 1) and len(got) != len(want):
            ones = [_axis(axes, d) for d in range(len(want)) if want[d] == 1]
            which = ones[0] if len(ones) == 1 else f"{len(want) - len(got)} of {', '.join(ones)}"
            clause = (f"{'a dimension' if len(want) - len(got) == 1 else 'dimensions'} of size 1 missing ({which}; "
                      "squeeze() drops every dimension of size 1, whatever its meaning)" if len(got) < len(want) else
                      "it has an extra dimension of size 1 (an unsqueeze or [None] too many, or a squeeze missing)")
        elif len(got) == len(want) and sorted(got) == sorted(want) and len(set(want)) == len(want):
            order = [want.index(n) for n in got]
            clause = (f"the sizes are right but in another order: yours are ({', '.join(_axis(axes, d) for d in order)}) "
                      f"where ({', '.join(_axis(axes, d) for d in range(len(want)))}) belong: move the dimensions with "
                      ".permute or .transpose")
        elif len(got) == len(want) and sorted(got) == sorted(want):
            swaps = [(i, j) for i in range(len(want)) for j in range(i + 1, len(want))
                     if want[i] != want[j] and got == want[:i] + (want[j],) + want[i + 1:j] + (want[i],) + want[j + 1:]]
            clause = (f"the sizes are right but two dimensions look swapped: ({_axis(axes, swaps[0][0])}, "
                      f"{_axis(axes, swaps[0][1])}): move them back with .transpose" if len(swaps) == 1 else "")
        elif math.prod(got) == math.prod(want):
            merged = _merged(got, want, axes)
            clause = f"it has {merged}" if merged else ""
    return f"{before}{clause}{after}" if clause else ""

def _describe(got, want, axes):
    try:
        g, w = _as_f64(got), _as_f64(want)
        if g is None or w is None:
            return ""
        if g.shape != w.shape:
            return _shape_story(g, w, axes)
        if _close(g, w) or g.numel() == 0:
            return ""
        ids = not (torch.as_tensor(want).is_floating_point() or torch.as_tensor(got).is_floating_point())
        return (_everywhere(g, w, ids) or _moved(g, w, axes) or ("" if ids else _per_slice(g, w, axes))
                or _regrouped(g, w, axes) or _where(g, w, axes, ids))
    except Exception:  # noqa: BLE001 - a description can only add a sentence, never fail a test
        return ""

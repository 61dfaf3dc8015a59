"""Checks docs/from-pyg-dgl.md's account of a saved model against `halogen predict`.

usage: pyg_load_check.py WORK DOC MODEL...

WORK holds data/cora (the dataset), models/MODEL (train --save-model) and pred/MODEL
(predict --out) for each MODEL. Two checks per model:

1. NumPy only, always: the model computed from its .npy files as the page states them (weight
   matrices [in, out] applied as x W, the arrays and shapes of its table, the input
   normalisation of model.json's feature_norm) reproduces pred/MODEL/probabilities.npy.
2. With torch and torch_geometric importable: the page's code blocks (the "common" block, then
   the model's), run as they stand in the page with WORK/run-MODEL as the working directory,
   leave `probabilities` equal to probabilities.npy.

Exit status: 0 when both pass, 1 when any check fails, 77 when the NumPy checks pass and
torch or torch_geometric is missing.
"""

import json
import os
import re
import sys

import numpy as np

import halogen_npz

TOLERANCE = 1e-5


def fail(message):
    print("FAILED: " + message)
    return False


def page_blocks(doc):
    """The ```python blocks of the page that follow a `<!-- pyg-example: NAME -->` line."""
    text = open(doc).read()
    found = re.findall(r"<!-- pyg-example: (\w+) -->\n```python\n(.*?)\n```", text, re.S)
    return {name: code for name, code in found}


class Graph:
    """The dataset as halogen stores it, and its aggregations in float64."""

    def __init__(self, directory):
        ds = halogen_npz.open_halogen_dataset(directory)
        self.features = np.array(ds["features"], dtype=np.float32)
        self.n = self.features.shape[0]
        self.src = np.array(ds["indices"], dtype=np.int64)
        self.dst = halogen_npz.csr_destinations(ds["offsets"], 0, self.src.size).astype(np.int64)
        self.deg_in = np.bincount(self.dst, minlength=self.n).astype(np.float64)
        self.deg_out = np.bincount(self.src, minlength=self.n).astype(np.float64)

    def normalised(self, norm):
        x = self.features.astype(np.float64)
        if norm == "none":
            return x
        scale = np.sqrt((x * x).sum(axis=1)) if norm == "l2" else np.abs(x).sum(axis=1)
        assert norm in ("l2", "row"), norm
        scale[scale == 0] = 1.0
        return (x / scale[:, None]).astype(np.float32).astype(np.float64)

    def gcn(self, h):
        """sum over in-neighbours and self of h_j / sqrt((deg_in(i)+1)(deg_out(j)+1))."""
        din, dout = self.deg_in + 1, self.deg_out + 1
        out = h / np.sqrt(din * dout)[:, None]
        coef = 1.0 / np.sqrt(din[self.dst] * dout[self.src])
        np.add.at(out, self.dst, h[self.src] * coef[:, None])
        return out

    def mean(self, h):
        out = np.zeros_like(h)
        np.add.at(out, self.dst, h[self.src])
        return out / np.maximum(self.deg_in, 1)[:, None]

    def attention(self, hp, el, er, average):
        """GAT: hp (N, H, D), source terms el and target terms er (N, H), self loops added."""
        loops = np.arange(self.n)
        src, dst = np.concatenate([self.src, loops]), np.concatenate([self.dst, loops])
        e = el[src] + er[dst]
        e = np.where(e > 0, e, 0.2 * e)
        top = np.full((self.n, e.shape[1]), -np.inf)
        np.maximum.at(top, dst, e)
        a = np.exp(e - top[dst])
        total = np.zeros_like(top)
        np.add.at(total, dst, a)
        a /= total[dst]
        out = np.zeros_like(hp)
        np.add.at(out, dst, hp[src] * a[:, :, None])
        return out.mean(axis=1) if average else out.reshape(self.n, -1)


def relu(h):
    return np.maximum(h, 0.0)


def elu(h):
    return np.where(h > 0, h, np.expm1(np.minimum(h, 0.0)))


def numpy_logits(graph, model, w):
    """The model's logits from its arrays, each checked against the page's shape table."""
    kind, L, H = model["model"], model["layers"], model["hidden"]
    F, C = model["feature_dim"], model["classes"]
    expected = {}
    x = graph.normalised(model["feature_norm"])
    h = x
    if kind in ("gcn", "sage"):
        for l in range(L):
            fan_in, fan_out = (F if l == 0 else H), (C if l + 1 == L else H)
            names = ["weight"] if kind == "gcn" else ["weight_self", "weight_neigh"]
            for a in names:
                expected[f"layer{l}.{a}"] = (fan_in, fan_out)
            expected[f"layer{l}.bias"] = (fan_out,)
            if kind == "gcn":
                h = graph.gcn(h @ w(f"layer{l}.weight")) + w(f"layer{l}.bias")
            else:
                h = h @ w(f"layer{l}.weight_self") + graph.mean(h) @ w(f"layer{l}.weight_neigh") + w(f"layer{l}.bias")
            h = h if l + 1 == L else relu(h)
    elif kind == "gat":
        for l in range(L):
            last = l + 1 == L
            heads, dim = (model["out_heads"], C) if last else (model["heads"], H)
            fan_in = F if l == 0 else model["heads"] * H
            fan_out = C if last else heads * H
            expected[f"layer{l}.weight"] = (fan_in, heads * dim)
            expected[f"layer{l}.att_src"] = expected[f"layer{l}.att_dst"] = (heads, dim)
            expected[f"layer{l}.bias"] = (fan_out,)
            identity = model["residual"] and l > 0 and fan_in == fan_out
            if model["residual"] and not identity:
                expected[f"layer{l}.weight_res"] = (fan_in, fan_out)
            hp = (h @ w(f"layer{l}.weight")).reshape(graph.n, heads, dim)
            el = (hp * w(f"layer{l}.att_src")[None]).sum(axis=2)
            er = (hp * w(f"layer{l}.att_dst")[None]).sum(axis=2)
            out = graph.attention(hp, el, er, average=last) + w(f"layer{l}.bias")
            if identity:
                out = out + h
            elif model["residual"]:
                out = out + h @ w(f"layer{l}.weight_res")
            h = out if last else elu(out)
    elif kind == "gcnii":
        expected.update({"layer0.weight": (F, H), "layer0.bias": (H,),
                         f"layer{L + 1}.weight": (H, C), f"layer{L + 1}.bias": (C,)})
        alpha, lam = model["alpha"], model["lambda"]
        h = h0 = relu(x @ w("layer0.weight") + w("layer0.bias"))
        for l in range(1, L + 1):
            expected[f"layer{l}.weight"] = (H, H)
            beta = np.log(lam / l + 1.0)
            s = (1 - alpha) * graph.gcn(h) + alpha * h0
            h = relu((1 - beta) * s + beta * (s @ w(f"layer{l}.weight")))
        h = h @ w(f"layer{L + 1}.weight") + w(f"layer{L + 1}.bias")
    elif kind == "appnp":
        expected.update({"layer0.weight": (F, H), "layer0.bias": (H,), "layer1.weight": (H, C), "layer1.bias": (C,)})
        alpha = model["alpha"]
        h0 = relu(x @ w("layer0.weight") + w("layer0.bias")) @ w("layer1.weight") + w("layer1.bias")
        h = h0
        for _ in range(L):
            h = (1 - alpha) * graph.gcn(h) + alpha * h0
    else:
        raise ValueError(f"no NumPy reference for model '{kind}'")
    return h, expected


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def check_numpy(work, graph, name):
    directory = os.path.join(work, "models", name)
    model = json.load(open(os.path.join(directory, "model.json")))
    arrays = {a: np.load(os.path.join(directory, spec["file"])) for a, spec in model["arrays"].items()}
    w = lambda a: arrays[a].astype(np.float64)  # noqa: E731
    logits, expected = numpy_logits(graph, model, w)
    shapes = {a: tuple(v.shape) for a, v in arrays.items()}
    if shapes != expected:
        return fail(f"{name}: arrays {shapes}, the page's table says {expected}")
    reference = np.load(os.path.join(work, "pred", name, "probabilities.npy"))
    error = float(np.abs(softmax(logits) - reference).max())
    if not error <= TOLERANCE:
        return fail(f"{name}: NumPy from the .npy files differs from probabilities.npy by {error:.3g}")
    print(f"ok: {name}: NumPy reproduces probabilities.npy to {error:.1e} ({len(arrays)} arrays as the page lists)")
    return True


def check_pyg(work, blocks, name):
    if "common" not in blocks or name not in blocks:
        return fail(f"the page has no '<!-- pyg-example: common -->' or '<!-- pyg-example: {name} -->' block")
    run = os.path.join(work, "run-" + name)
    os.makedirs(os.path.join(run, "models"), exist_ok=True)
    for link, target in ((os.path.join(run, "data"), os.path.join(work, "data")),
                         (os.path.join(run, "models", "cora"), os.path.join(work, "models", name))):
        if not os.path.lexists(link):
            os.symlink(target, link)
    here = os.getcwd()
    os.chdir(run)
    try:
        scope = {"__name__": "pyg_example"}
        exec(compile(blocks["common"] + "\n" + blocks[name], f"docs/from-pyg-dgl.md ({name})", "exec"), scope)
    except Exception as e:  # the page's code failed: report it as the check's failure
        return fail(f"{name}: the page's PyG code raised {type(e).__name__}: {e}")
    finally:
        os.chdir(here)
    if "probabilities" not in scope:
        return fail(f"{name}: the page's PyG code leaves no `probabilities`")
    got = scope["probabilities"].detach().cpu().numpy()
    reference = np.load(os.path.join(work, "pred", name, "probabilities.npy"))
    if got.shape != reference.shape:
        return fail(f"{name}: PyG probabilities of shape {got.shape}, probabilities.npy {reference.shape}")
    error = float(np.abs(got - reference).max())
    if not error <= TOLERANCE:
        return fail(f"{name}: the page's PyG code differs from probabilities.npy by {error:.3g}")
    print(f"ok: {name}: the page's PyG code reproduces probabilities.npy to {error:.1e}")
    return True


def main(argv):
    work, doc, models = argv[1], argv[2], argv[3:]
    graph = Graph(os.path.join(work, "data", "cora"))
    ok = all([check_numpy(work, graph, m) for m in models])
    try:
        import torch  # noqa: F401
        import torch_geometric
    except ImportError as e:
        print(f"PyG part skipped: {e} (python3-torch and torch_geometric 2.3.1 run it)")
        return 77 if ok else 1
    print(f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}")
    blocks = page_blocks(doc)
    ok = all([check_pyg(work, blocks, m) for m in models]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

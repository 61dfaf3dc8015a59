#!/usr/bin/env python3
"""Write a graph as a NumPy .npz archive that `halogen convert --format npz` reads.

The archive holds one .npy member per array (little-endian, C order, no pickled objects):

  edge_index  (2, E) int32 or int64. Row 0 holds source ids, row 1 destination ids (PyG's
              convention), every id in [0, N). Undirected graphs may list each edge in one
              direction or in both: halogen symmetrises, removes duplicates and drops self
              loops, exactly as for OGB's raw CSV layout.
  x           (N, F) float16, float32 or float64, optional. halogen stores float32: float16
              converts exactly, float64 is rounded to the nearest float32.
  y           optional labels of one of halogen's three kinds (halogen_labels.py): (N,) or
              (N, 1) integer classes, -1 marks a node without a label, the class count is
              the largest label + 1; (N, C) 0/1 multi-labels (-1 in an integer y: an
              unlabelled entry); float regression targets, (N,) or (N, C).
  y_mask      (N,) or y's shape bool, optional: False marks an unlabelled node or entry.
  train_mask, val_mask, test_mask
              (N,) bool, optional and disjoint; a node in none of them has no role.
  split       (N,) integer, instead of the masks: halogen's roles SPLIT_NONE (0),
              SPLIT_TRAIN (1), SPLIT_VALID (2), SPLIT_TEST (3).
  num_nodes   integer scalar, optional; N. Without it halogen takes N from the node arrays,
              or max id + 1 when there are none.

The converted dataset (`halogen convert --format npz FILE.npz --out DIR`) is the same, byte
for byte, as the one converted from the same graph in OGB's raw CSV layout; its name is the
archive's file name without ".npz".

Python >= 3.9 and NumPy are all it needs. `from_pyg` and `from_dgl` take PyTorch Geometric
and DGL objects but import neither library. As a program:

  python3 halogen_npz.py --demo OUT.npz [--nodes N --edges E --features F --classes C
                                          --seed S --compress]
  python3 halogen_npz.py --from-halogen DATASET_DIR OUT.npz [--compress]

The first writes a random graph (for tests and benchmarks). The second exports a halogen
binary dataset directory (for example the output of `halogen generate rmat`), reading its
files in chunks so that a graph larger than memory can be exported.
"""

import argparse
import json
import os
import struct
import sys
import tempfile
import warnings
import zipfile

import numpy as np

from halogen_labels import check_y, trainability_message, trainability_problems

__all__ = ["save", "from_pyg", "from_dgl", "demo_graph", "export_halogen_dataset", "open_halogen_dataset",
           "csr_destinations", "trainability_problems", "TrainabilityWarning", "SPLIT_NONE", "SPLIT_TRAIN",
           "SPLIT_VALID", "SPLIT_TEST"]

# Values of the `split` array: halogen's SplitRole (partition/include/halogen/partition/dataset.hpp).
SPLIT_NONE, SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST = 0, 1, 2, 3

# NodeId is a signed 32-bit integer in halogen: at most 2^31 - 1 nodes.
MAX_NODES = 2**31 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_MASKS = ("train_mask", "val_mask", "test_mask")
_CHUNK_BYTES = 32 << 20  # streamed arrays are copied in pieces of about this size


# ----------------------------------------------------------------------------------------
# Writing an archive


class _NpzWriter:
    """A .npz archive written to a temporary sibling and renamed into place on commit()."""

    def __init__(self, path, compress):
        self.path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(self.path))
        fd, self._temp = tempfile.mkstemp(prefix="." + os.path.basename(self.path) + ".",
                                          suffix=".part", dir=directory)
        self._file = os.fdopen(fd, "wb")
        method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        self._zip = zipfile.ZipFile(self._file, "w", compression=method, allowZip64=True)

    def add(self, name, array):
        """One whole in-memory array as member NAME.npy."""
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)  # (never for a 0-d array, which it would make 1-d)
        array = _little_endian(array)
        with self._zip.open(name + ".npy", "w", force_zip64=True) as member:
            np.lib.format.write_array(member, array, allow_pickle=False)

    def add_chunks(self, name, dtype, shape, chunks):
        """Member NAME.npy of `shape` and `dtype`, its C-order payload given piece by piece."""
        dtype = np.dtype(dtype).newbyteorder("<")
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": tuple(int(s) for s in shape)}
        expected = int(np.prod(header["shape"], dtype=np.int64)) * dtype.itemsize
        written = 0
        with self._zip.open(name + ".npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            for chunk in chunks:
                data = np.ascontiguousarray(chunk, dtype=dtype).tobytes()
                member.write(data)
                written += len(data)
        if written != expected:
            raise RuntimeError(f"{name}: wrote {written} bytes, expected {expected} (internal error)")

    def commit(self):
        self._zip.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self._temp, 0o666 & ~umask)
        os.replace(self._temp, self.path)

    def abort(self):
        try:
            self._zip.close()
        except Exception:  # the archive is discarded anyway
            pass
        self._file.close()
        try:
            os.unlink(self._temp)
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.commit()
        else:
            self.abort()
        return False


def _little_endian(array):
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and sys.byteorder == "big"):
        return array.astype(array.dtype.newbyteorder("<"))
    return array


# ----------------------------------------------------------------------------------------
# Checks


def _fail(message):
    raise ValueError(message)


def _dtype_text(array):
    return str(array.dtype)


def _as_array(name, value):
    try:
        array = np.asarray(value)
    except Exception as e:  # an object NumPy cannot take
        _fail(f"{name}: cannot be read as a NumPy array ({e})")
    if array.dtype == object:
        _fail(f"{name}: expected a numeric array, found Python objects")
    return array


def _check_edge_index(edge_index):
    ei = _as_array("edge_index", edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        _fail(f"edge_index: expected shape (2, E) (row 0 sources, row 1 destinations), found "
              f"{ei.shape}" + (" - transpose it with edge_index.T" if ei.ndim == 2 and ei.shape[1] == 2 else ""))
    if ei.dtype == np.bool_ or not np.issubdtype(ei.dtype, np.integer):
        _fail(f"edge_index: expected integer node ids (int32 or int64), found {_dtype_text(ei)}")
    if ei.dtype not in (np.int32, np.int64):
        if ei.dtype == np.uint64 and ei.size and ei.max() > np.iinfo(np.int64).max:
            _fail("edge_index: node id beyond int64")
        ei = ei.astype(np.int64)
    if ei.size:
        low = int(ei.min())
        if low < 0:
            _fail(f"edge_index: node ids must be >= 0, found {low}")
    return ei


def _check_x(x):
    x = _as_array("x", x)
    if x.ndim != 2:
        _fail(f"x: expected a 2-D array (num_nodes, num_features), found shape {x.shape}"
              + (" - use x[:, None] for one feature per node" if x.ndim == 1 else ""))
    if x.dtype not in (np.float16, np.float32, np.float64):
        _fail(f"x: expected float16, float32 or float64, found {_dtype_text(x)} (convert with x.astype(np.float32))")
    if x.shape[1] == 0:
        _fail("x: has no columns; leave x out for a graph without node features")
    if x.size:
        finite = np.isfinite(x)
        if not finite.all():
            row, col = (int(i) for i in np.argwhere(~finite)[0])
            _fail(f"x: value {x[row, col]} at row {row}, column {col} is not finite (NaN or infinite)")
        if x.dtype == np.float64:
            big = float(np.abs(x).max())
            if big > _FLOAT32_MAX:
                _fail(f"x: value {big} does not fit a float32 (halogen stores float32 features)")
    return x


def _check_mask(name, mask):
    mask = _as_array(name, mask)
    if mask.ndim != 1:
        _fail(f"{name}: expected shape (N,) (one flag per node), found {mask.shape}")
    if mask.dtype != np.bool_:
        if not np.issubdtype(mask.dtype, np.integer) or (mask.size and not np.isin(mask, (0, 1)).all()):
            _fail(f"{name}: expected a bool array (or integers 0 and 1), found {_dtype_text(mask)}")
        mask = mask.astype(np.bool_)
    return mask


def _check_split(split):
    split = _as_array("split", split)
    if split.ndim != 1:
        _fail(f"split: expected shape (N,) (one role per node), found {split.shape}")
    if split.dtype == np.bool_ or not np.issubdtype(split.dtype, np.integer):
        _fail(f"split: expected integers (0 none, 1 train, 2 valid, 3 test), found {_dtype_text(split)}")
    if split.size:
        bad = ~np.isin(split, (SPLIT_NONE, SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST))
        if bad.any():
            i = int(np.argmax(bad))
            _fail(f"split: node {i} has role {split[i]}; expected 0 (none), 1 (train), 2 (valid) or 3 (test)")
    if split.dtype not in (np.int32, np.int64):
        split = split.astype(np.int64)
    return split


def _check_num_nodes(num_nodes):
    value = _as_array("num_nodes", num_nodes)
    if value.ndim != 0 or value.dtype == np.bool_ or not np.issubdtype(value.dtype, np.integer):
        _fail(f"num_nodes: expected an integer scalar, found {num_nodes!r}")
    n = int(value)
    if n < 0 or n > MAX_NODES:
        _fail(f"num_nodes: {n} is outside [0, {MAX_NODES}]")
    return n


class TrainabilityWarning(UserWarning):
    """`save` wrote an archive that `halogen train` refuses: no features, no labels, fewer than
    2 classes (or no target column), no labelled training node or no labelled validation node
    (halogen_labels.trainability_problems). The archive is written all the same (it converts,
    partitions and can be inspected)."""


# ----------------------------------------------------------------------------------------
# Public API


def save(path, edge_index, x=None, y=None, train_mask=None, val_mask=None, test_mask=None,
         split=None, num_nodes=None, compress=False, y_mask=None):
    """Check a graph and write it to `path` as an archive for `halogen convert --format npz`.

    Arguments (NumPy arrays or anything np.asarray takes):
      edge_index  (2, E) integer node ids, row 0 sources, row 1 destinations. int32 and int64
                  are written as given, other integer types as int64. An undirected graph may
                  list each edge once or in both directions; duplicates and self loops are
                  allowed (halogen removes them).
      x           (N, F) float16, float32 or float64 node features, finite, F >= 1; written in
                  the given type (C order). float64 values must fit a float32.
      y           labels, of a kind halogen detects (halogen_labels.check_y): (N,) or (N, 1)
                  integer classes, each >= 0 or -1 (no label), written as (N,), int32/int64
                  as given, other integer types as int64; (N, C) 0/1 multi-labels in any
                  integer, bool or float dtype (-1 in an integer y: unlabelled entry); float
                  regression targets, (N,) or (N, C). Written in the given dtype; NaN in a
                  float y is written as an unlabelled entry (y_mask False there).
      y_mask      (N,) or y's shape, bool: False marks an unlabelled node or entry.
      train_mask, val_mask, test_mask
                  (N,) bool (or integer 0/1) arrays, no node in two of them. When any is given,
                  all three are written, a missing one as all False.
      split       (N,) integer roles instead of the masks: SPLIT_NONE (0), SPLIT_TRAIN (1),
                  SPLIT_VALID (2), SPLIT_TEST (3). Giving both masks and split is an error.
      num_nodes   N. Default: the length of the node arrays, or max id + 1 without them. It is
                  always written, so nodes without edges after the last id are kept.
      compress    False: members stored (like np.savez); True: deflated (np.savez_compressed).

    The archive is written to a temporary file in the same directory and renamed to `path`
    (exactly that name: no ".npz" is appended), so `path` never holds a partial archive.
    halogen names the dataset after the file name without ".npz".

    Raises ValueError, naming the array, for a wrong shape, type or value; nothing is written
    then. Returns `path`.

    A graph that `halogen train` would refuse (no x, no y, fewer than 2 classes or no target
    column, no labelled
    node in the training or in the validation split) is written all the same, then a
    TrainabilityWarning names the dataset and each missing array: labels or a split may be
    added later, and such a dataset still converts, partitions and can be inspected.
    """
    path, message = _save(path, edge_index, x, y, train_mask, val_mask, test_mask, split, num_nodes, compress,
                          y_mask)
    if message:
        warnings.warn(message, TrainabilityWarning, stacklevel=2)
    return path


def _save(path, edge_index, x=None, y=None, train_mask=None, val_mask=None, test_mask=None, split=None,
          num_nodes=None, compress=False, y_mask=None):
    """`save`'s work: returns `path` and the trainability warning (None when it can train)."""
    ei = _check_edge_index(edge_index)
    arrays = {}
    n = None if num_nodes is None else _check_num_nodes(num_nodes)

    def settle(name, length):
        nonlocal n
        if n is None:
            n = length
        elif length != n:
            source = "num_nodes says" if num_nodes is not None else "the arrays before it have"
            _fail(f"{name}: length {length}, but {source} {n} nodes ({name} needs one entry per node)")

    if x is not None:
        x = _check_x(x)
        settle("x", x.shape[0])
        arrays["x"] = x
    if y is not None:
        y, y_mask, _ = check_y(y, y_mask)
        settle("y", y.shape[0])
        arrays["y"] = y
        if y_mask is not None:
            arrays["y_mask"] = y_mask
    elif y_mask is not None:
        _fail("y_mask: given without y (it marks y's unlabelled nodes or entries)")
    given_masks = {name: m for name, m in zip(_MASKS, (train_mask, val_mask, test_mask)) if m is not None}
    if given_masks and split is not None:
        _fail(f"split and {', '.join(given_masks)}: give either the masks or split, not both")
    if given_masks:
        checked = {}
        for name, m in given_masks.items():
            m = _check_mask(name, m)
            settle(name, m.shape[0])
            checked[name] = m
        seen = np.zeros(n, dtype=np.int8)
        for name, m in checked.items():
            seen += m
        if (seen > 1).any():
            i = int(np.argmax(seen > 1))
            holders = [name for name, m in checked.items() if m[i]]
            _fail(f"{' and '.join(holders)}: node {i} is in both; a node may have one role only (masks overlap)")
        for name in _MASKS:
            arrays[name] = checked.get(name, np.zeros(n, dtype=np.bool_))
    if split is not None:
        split = _check_split(split)
        settle("split", split.shape[0])
        arrays["split"] = split

    if ei.size:
        high = int(ei.max())
        if n is None:
            n = high + 1
        elif high >= n:
            _fail(f"edge_index: node id {high} is not below the node count {n}")
    elif n is None:
        n = 0
    if n > MAX_NODES:
        _fail(f"edge_index: {n} nodes exceed halogen's maximum of {MAX_NODES}")

    with _NpzWriter(path, compress) as out:
        out.add("edge_index", ei)
        for name, array in arrays.items():
            out.add(name, array)
        out.add("num_nodes", np.array(n, dtype=np.int64))
    roles = None
    if "split" in arrays:
        roles = arrays["split"]
    elif "train_mask" in arrays:
        roles = np.zeros(n, dtype=np.int64)
        for name, role in zip(_MASKS, (SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST)):
            roles[arrays[name]] = role
    return path, trainability_message(path, n, arrays.get("x"), arrays.get("y"), roles, arrays.get("y_mask"))


def _save_warning(path, found):
    """`save` of the arguments in `found`, its warning pointing at the caller's caller."""
    path, message = _save(path, **found)
    if message:
        warnings.warn(message, TrainabilityWarning, stacklevel=3)
    return path


def _to_numpy(value):
    """A torch tensor (on any device, any autograd state) or array-like as a NumPy array."""
    if value is None:
        return None
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":  # NumPy has no bfloat16
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _first_column(value):
    array = _to_numpy(value)
    if array is not None and array.ndim == 2:
        array = array[:, 0]
    return array


def _merge(found, kw):
    """Keyword arguments override what was found; split given by the caller drops found masks."""
    if kw.get("split") is not None:
        for name in _MASKS:
            if name not in kw:
                found.pop(name, None)
    found.update(kw)
    return found


def from_pyg(data, path, **kw):
    """Write a PyTorch Geometric `Data` object (one graph) with `save`.

    Takes data.edge_index (or, without it, data.adj_t: its columns are the sources), data.x,
    data.y, data.train_mask, data.val_mask, data.test_mask and data.num_nodes, whichever
    exist. Tensors may live on any device. bfloat16 features are written as float32. y of
    any label kind passes through (PPI's and Yelp's (N, C) float 0/1 and ogbn-proteins' int64
    are multilabel; halogen_labels.check_y); pass y_mask=... to mark unlabelled entries.

    Masks of shape (N, k) - several splits side by side, as in WikiCS or the heterophilous
    benchmarks (Chameleon, Squirrel, ...) - are cut to their first column, i.e. split 0; pass
    train_mask=data.train_mask[:, j] (and the same for val/test) to pick another one.

    Keyword arguments go to `save` and override what is taken from `data` (for example
    compress=True, or y=None to leave the labels out; split=... replaces the masks).
    Importing this module does not import torch.
    """
    def field(name):
        try:
            return getattr(data, name)
        except (AttributeError, KeyError):
            return None

    edge_index = field("edge_index")
    if edge_index is None:
        adj_t = field("adj_t")
        if adj_t is None:
            _fail("edge_index: the PyG Data object has neither edge_index nor adj_t")
        row, col, _ = adj_t.coo()  # adj_t rows are destinations, columns sources
        edge_index = np.stack([_to_numpy(col), _to_numpy(row)])
    found = {"edge_index": _to_numpy(edge_index), "x": _to_numpy(field("x")), "y": _to_numpy(field("y"))}
    for name in _MASKS:
        found[name] = _first_column(field(name))
    n = field("num_nodes")
    if n is not None:
        found["num_nodes"] = int(n)
    return _save_warning(path, _merge(found, kw))


def from_dgl(graph, path, **kw):
    """Write a DGL graph (one node type and one edge type) with `save`.

    Takes graph.edges() as (sources, destinations), graph.num_nodes(), and from graph.ndata
    'feat' (x), 'label' (y, of any label kind, (N, C) included) and 'train_mask', 'val_mask',
    'test_mask' where present. Masks may
    be bool or 0/1 integers; masks of shape (N, k) are cut to their first column. Keyword
    arguments go to `save` and override what is taken from the graph. Importing this module
    does not import dgl or torch.
    """
    ntypes = getattr(graph, "ntypes", ["_N"])
    etypes = getattr(graph, "etypes", ["_E"])
    if len(ntypes) != 1 or len(etypes) != 1:
        _fail(f"edge_index: a heterogeneous DGL graph ({len(ntypes)} node types, {len(etypes)} edge types) "
              "cannot be written; convert it with dgl.to_homogeneous first")
    src, dst = graph.edges()
    src, dst = _to_numpy(src), _to_numpy(dst)
    found = {"edge_index": np.stack([src, dst]), "num_nodes": int(graph.num_nodes())}
    ndata = graph.ndata
    for key, name in (("feat", "x"), ("label", "y")):
        if key in ndata:
            found[name] = _to_numpy(ndata[key])
    for name in _MASKS:
        if name in ndata:
            found[name] = _first_column(ndata[name])
    return _save_warning(path, _merge(found, kw))


# ----------------------------------------------------------------------------------------
# A random graph


def demo_graph(nodes=1000, edges=5000, features=16, classes=4, seed=0):
    """A random graph as keyword arguments for `save`: `edges` directed pairs (about 60% inside
    a class, duplicates and self loops possible), features = class centroid + noise (float32),
    labels in [0, classes), masks: 20% train, 20% valid, 40% test, 20% no role. features=0
    leaves x out, classes=0 leaves y out."""
    if nodes < 1 or edges < 0 or features < 0 or classes < 0:
        _fail("demo: need nodes >= 1 and non-negative edges, features and classes")
    rng = np.random.default_rng(seed)
    label = rng.integers(0, max(classes, 1), nodes)
    src = rng.integers(0, nodes, edges)
    dst = rng.integers(0, nodes, edges)
    inside = rng.random(edges) < 0.6
    order = np.argsort(label, kind="stable")
    counts = np.bincount(label, minlength=max(classes, 1))
    starts = np.cumsum(counts) - counts
    c = label[src[inside]]
    dst[inside] = order[starts[c] + (rng.random(c.size) * counts[c]).astype(np.int64)]
    graph = {"edge_index": np.stack([src, dst]).astype(np.int32), "num_nodes": nodes}
    if features:
        centroids = rng.normal(size=(max(classes, 1), features))
        graph["x"] = (centroids[label] + 2.0 * rng.normal(size=(nodes, features))).astype(np.float32)
    if classes:
        graph["y"] = label.astype(np.int64)
    perm = rng.permutation(nodes)
    cut = [int(round(nodes * f)) for f in (0.2, 0.4, 0.8)]
    for name, part in zip(_MASKS, (perm[:cut[0]], perm[cut[0]:cut[1]], perm[cut[1]:cut[2]])):
        mask = np.zeros(nodes, dtype=np.bool_)
        mask[part] = True
        graph[name] = mask
    return graph


# ----------------------------------------------------------------------------------------
# Exporting a halogen binary dataset (partition/src/dataset_io.cpp)

_ARRAY_MAGIC = b"HLGNARR1"
_HEADER_BYTES = 64
_ELEMENT_TYPES = {1: np.dtype("<u1"), 2: np.dtype("<i4"), 3: np.dtype("<i8"), 4: np.dtype("<f4")}


def _read_halogen_array(directory, name, dtype, count):
    """Array NAME.bin of a halogen dataset as a read-only memory map, its header checked."""
    path = os.path.join(directory, name + ".bin")
    try:
        with open(path, "rb") as f:
            header = f.read(_HEADER_BYTES)
    except OSError as e:
        _fail(f"{path}: cannot read ({e.strerror})")
    if len(header) < _HEADER_BYTES or header[:8] != _ARRAY_MAGIC:
        _fail(f"{path}: not a halogen array file (no {_ARRAY_MAGIC.decode()} header)")
    version, element_type = struct.unpack_from("<II", header, 8)
    (stored_count,) = struct.unpack_from("<Q", header, 16)
    (element_bytes,) = struct.unpack_from("<I", header, 32)
    if version != 1:
        _fail(f"{path}: array format version {version} not supported (expected 1)")
    if _ELEMENT_TYPES.get(element_type) != dtype or element_bytes != dtype.itemsize:
        _fail(f"{path}: element type {element_type} ({element_bytes} bytes), expected {dtype}")
    if stored_count != count:
        _fail(f"{path}: {stored_count} elements, meta.json implies {count}")
    size = os.path.getsize(path)
    if size != _HEADER_BYTES + count * dtype.itemsize:
        _fail(f"{path}: {size} bytes, expected the 64-byte header + {count} x {dtype.itemsize} bytes")
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=_HEADER_BYTES, shape=(count,))


def open_halogen_dataset(directory):
    """The arrays of a halogen binary dataset directory, memory-mapped read-only (nothing is
    read into memory), their headers checked against meta.json: a dict with 'meta' (meta.json
    as a dict), 'offsets' (N+1 int64), 'indices' (E int32; row v of the CSR lists the sources
    of the edges into v), 'features' (N x F float32), 'label_kind' ("class", "multilabel" or
    "regression"; meta.json's, absent: class), 'labels' (N int32, -1 = none; class) or 'targets'
    (N x C float32, NaN = unlabelled; the other kinds, C = num_classes) and 'split' (N uint8,
    SPLIT_* values). Checksums are not verified (`halogen info` does that)."""
    meta_path = os.path.join(directory, "meta.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except OSError as e:
        _fail(f"{meta_path}: cannot read ({e.strerror}); not a halogen dataset directory")
    except ValueError as e:
        _fail(f"{meta_path}: not valid JSON ({e})")
    if not isinstance(meta, dict) or meta.get("format") != "halogen-dataset" or meta.get("version") != 1:
        _fail(f"{meta_path}: not a version 1 halogen dataset")
    try:
        n, e, f_dim = (int(meta[k]) for k in ("num_nodes", "num_edges", "feature_dim"))
    except (KeyError, TypeError, ValueError):
        _fail(f"{meta_path}: num_nodes, num_edges or feature_dim missing or not an integer")
    offsets = _read_halogen_array(directory, "offsets", _ELEMENT_TYPES[3], n + 1)
    if int(offsets[0]) != 0 or int(offsets[n]) != e:
        _fail(f"{os.path.join(directory, 'offsets.bin')}: offsets run from {int(offsets[0])} to "
              f"{int(offsets[n])}, expected 0 to {e}")
    kind = meta.get("label_kind", "class")
    if kind not in ("class", "multilabel", "regression"):
        _fail(f"{meta_path}: label_kind {kind!r}, expected \"class\", \"multilabel\" or \"regression\"")
    ds = {"meta": meta, "offsets": offsets, "label_kind": kind,
          "indices": _read_halogen_array(directory, "indices", _ELEMENT_TYPES[2], e),
          "features": _read_halogen_array(directory, "features", _ELEMENT_TYPES[4], n * f_dim).reshape(n, f_dim),
          "split": _read_halogen_array(directory, "split", _ELEMENT_TYPES[1], n)}
    if kind == "class":
        ds["labels"] = _read_halogen_array(directory, "labels", _ELEMENT_TYPES[2], n)
    else:
        c = int(meta.get("num_classes", 0))
        ds["targets"] = _read_halogen_array(directory, "targets", _ELEMENT_TYPES[4], n * c).reshape(n, c)
    return ds


def csr_destinations(offsets, e0, e1):
    """The row (destination node) of each CSR entry in [e0, e1), as int32."""
    v0 = int(np.searchsorted(offsets, e0, side="right")) - 1  # the row holding entry e0
    v1 = int(np.searchsorted(offsets, e1, side="left"))       # rows from v1 on start at or after e1
    bounds = np.clip(np.asarray(offsets[v0:v1 + 1]), e0, e1)
    return np.repeat(np.arange(v0, v1, dtype=np.int32), np.diff(bounds))


def export_halogen_dataset(directory, path, compress=False):
    """Write the halogen binary dataset in `directory` (meta.json + offsets/indices/features/
    labels or targets/split .bin) as an archive: edge_index int32 with one column per stored CSR
    entry (rows are in-neighbour lists, so entry u in row v is the edge u -> v), x float32 when
    the dataset has features, y (class: (N,) int32; multilabel: (N, C) int8, -1 unlabelled;
    regression: (N, C) float32 with y_mask (N, C) False where a target is NaN), the three
    masks, num_nodes. The arrays are memory-mapped and copied in chunks; the largest piece held
    in memory is about 32 MiB. A regression dataset whose every target is 0 or 1 converts back
    as multilabel unless `halogen convert --label-kind regression` says otherwise. Returns
    `path`."""
    ds = open_halogen_dataset(directory)
    offsets, indices, features, split = ds["offsets"], ds["indices"], ds["features"], ds["split"]
    n, f_dim = features.shape
    e = indices.shape[0]
    edge_chunk = max(1, _CHUNK_BYTES // 4)
    row_chunk = max(1, _CHUNK_BYTES // max(1, 4 * f_dim))

    def sources():
        for e0 in range(0, e, edge_chunk):
            yield indices[e0:e0 + edge_chunk]

    def destinations():
        for e0 in range(0, e, edge_chunk):
            yield csr_destinations(offsets, e0, min(e, e0 + edge_chunk))

    def edge_rows():
        yield from sources()
        yield from destinations()

    def feature_rows():
        for r0 in range(0, n, row_chunk):
            yield np.asarray(features[r0:r0 + row_chunk])

    roles = np.asarray(split)
    if roles.size and roles.max() > SPLIT_TEST:
        _fail(f"{os.path.join(directory, 'split.bin')}: role {int(roles.max())} outside 0..3")
    with _NpzWriter(path, compress) as out:
        out.add_chunks("edge_index", np.int32, (2, e), edge_rows())
        if f_dim:
            out.add_chunks("x", np.float32, (n, f_dim), feature_rows())
        if ds["label_kind"] == "class":
            out.add("y", np.asarray(ds["labels"]))
        else:
            targets = ds["targets"]
            c = targets.shape[1]
            target_chunk = max(1, _CHUNK_BYTES // max(1, 4 * c))

            def target_rows(convert):
                for r0 in range(0, n, target_chunk):
                    yield convert(np.asarray(targets[r0:r0 + target_chunk]))

            if ds["label_kind"] == "multilabel":
                out.add_chunks("y", np.int8, (n, c), target_rows(lambda t: np.where(np.isnan(t), -1, t)))
            else:
                out.add_chunks("y", np.float32, (n, c), target_rows(lambda t: t))
                out.add_chunks("y_mask", np.bool_, (n, c), target_rows(lambda t: ~np.isnan(t)))
        for name, role in zip(_MASKS, (SPLIT_TRAIN, SPLIT_VALID, SPLIT_TEST)):
            out.add(name, roles == role)
        out.add("num_nodes", np.array(n, dtype=np.int64))
    return path


# ----------------------------------------------------------------------------------------
# Command line


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Write a graph as a .npz archive for `halogen convert --format npz`.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--demo", metavar="OUT.npz", help="write a random graph")
    what.add_argument("--from-halogen", nargs=2, metavar=("DATASET_DIR", "OUT.npz"),
                      help="export a halogen binary dataset directory")
    parser.add_argument("--nodes", type=int, default=1000, help="--demo: node count (1000)")
    parser.add_argument("--edges", type=int, default=5000, help="--demo: directed edge count (5000)")
    parser.add_argument("--features", type=int, default=16, help="--demo: feature dimension, 0 = none (16)")
    parser.add_argument("--classes", type=int, default=4, help="--demo: class count, 0 = no labels (4)")
    parser.add_argument("--seed", type=int, default=0, help="--demo: random seed (0)")
    parser.add_argument("--compress", action="store_true", help="deflate the members (default: stored)")
    args = parser.parse_args(argv)
    try:
        if args.demo:
            graph = demo_graph(args.nodes, args.edges, args.features, args.classes, args.seed)
            save(args.demo, compress=args.compress, **graph)
            print(f"wrote {args.demo}: {args.nodes} nodes, {args.edges} edges, {args.features} features, "
                  f"{args.classes} classes")
        else:
            directory, out = args.from_halogen
            export_halogen_dataset(directory, out, compress=args.compress)
            print(f"wrote {out} from {directory}")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

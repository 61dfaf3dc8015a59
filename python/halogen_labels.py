"""The labels of a graph for halogen_npz: which kind `y` is, and whether the graph can train.

halogen reads `y` as one of three kinds (partition/include/halogen/partition/readers.hpp has
the reader's rules, which `check_y` follows so that a bad `y` fails before anything is written):

  class       (N,) or (N, 1) integer (or bool): a class per node, -1 = no label.
  multilabel  (N, C), C > 1, every value 0 or 1 (any integer, bool or float dtype); in an
              integer y, -1 marks an unlabelled entry.
  regression  (N,) or (N, 1) float, or (N, C) float with values other than 0 and 1.

An optional bool `y_mask`, (N,) or y's shape, marks unlabelled nodes or entries False, for
every kind; halogen does not look at y where the mask is False. NumPy only.
"""

import os

import numpy as np

__all__ = ["CLASS", "MULTILABEL", "REGRESSION", "check_y", "labelled_nodes", "trainability_problems",
           "trainability_message"]

# The kinds, named as halogen names them (`halogen convert --label-kind`, meta.json "label_kind").
CLASS, MULTILABEL, REGRESSION = "class", "multilabel", "regression"

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _fail(message):
    raise ValueError(message)


def _index(y, flat):
    """The index of entry `flat` of y, as halogen's messages write it: [i] or [i, j]."""
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, y.shape)) + "]"


def _check_mask(y, y_mask):
    mask = np.asarray(y_mask)
    if mask.dtype != np.bool_:
        if not np.issubdtype(mask.dtype, np.integer) or (mask.size and not np.isin(mask, (0, 1)).all()):
            _fail(f"y_mask: expected a bool array (or integers 0 and 1), found {mask.dtype}")
        mask = mask.astype(np.bool_)
    if mask.ndim == 2 and mask.shape[1] == 1 and y.ndim == 1:
        mask = mask[:, 0]
    if mask.shape != (y.shape[0],) and mask.shape != y.shape:
        _fail(f"y_mask: expected shape ({y.shape[0]},) or y's shape {y.shape}, found {mask.shape}")
    return mask


def _entry_mask(y, mask):
    """The mask for each entry of y (True = labelled), or None without one."""
    if mask is None:
        return None
    return np.broadcast_to(mask.reshape(-1, 1), y.shape) if mask.shape != y.shape else mask


def check_y(y, y_mask=None):
    """`y` and `y_mask` as save writes them, and y's kind (CLASS, MULTILABEL or REGRESSION).

    y (N,) or (N, 1) of integers becomes (N,) int32/int64; (N, 1) floats become (N,); (N, C)
    stays as given. NaN in a float y becomes an unlabelled entry: y_mask is made (or narrowed)
    so that it is False there. Raises ValueError, naming the array and the entry, for a shape
    or dtype halogen does not read, an infinite value, a float too large for float32, a class
    label below -1, or an integer (N, C) y with values other than -1, 0 and 1 (pass float
    values for integer regression targets)."""
    try:
        y = np.asarray(y)
    except Exception as e:  # an object NumPy cannot take
        _fail(f"y: cannot be read as a NumPy array ({e})")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim not in (1, 2):
        _fail(f"y: expected shape (N,), (N, 1) or (N, C), found {y.shape}")
    floating = np.issubdtype(y.dtype, np.floating) and y.dtype.itemsize in (2, 4, 8)
    integral = y.dtype == np.bool_ or np.issubdtype(y.dtype, np.integer)
    if not (floating or integral):
        _fail(f"y: expected integer, bool or float values, found {y.dtype}")
    mask = None if y_mask is None else _check_mask(y, y_mask)
    if floating:
        inf = np.isinf(y)
        if inf.any():
            _fail(f"y: entry {_index(y, int(np.argmax(inf)))} is infinite (halogen targets are finite)")
        nan = np.isnan(y)
        if nan.any():
            keep = ~nan if mask is None else _entry_mask(y, mask) & ~nan
            mask = keep
        big = np.abs(np.where(np.isnan(y), 0, y))
        if big.size and float(big.max()) > _FLOAT32_MAX:
            _fail(f"y: entry {_index(y, int(np.argmax(big)))} = {float(big.max())} does not fit a float32")
    given = np.ones(y.shape, dtype=np.bool_) if mask is None else _entry_mask(y, mask)
    values = y[given]
    if y.ndim == 1:
        if floating:
            return y, mask, REGRESSION
        if values.size:
            low, high = int(values.min()), int(values.max())
            if low < -1:
                _fail(f"y: labels must be >= 0, or -1 for a node without a label; found {low}")
            if high >= 2**31 - 1:
                _fail(f"y: label {high} is too large (halogen labels are 32-bit)")
        if y.dtype not in (np.int32, np.int64):
            y = y.astype(np.int64)
        return y, mask, CLASS
    if floating:
        return y, mask, (MULTILABEL if np.isin(values, (0, 1)).all() else REGRESSION)
    if y.dtype != np.bool_:
        bad = given & ~np.isin(y, (-1, 0, 1))
        if bad.any():
            flat = int(np.argmax(bad))
            _fail(f"y: entry {_index(y, flat)} = {y.reshape(-1)[flat]}: an integer y of {y.shape[1]} columns is read "
                  "as multilabel (0 or 1, -1 = unlabelled); for integer regression targets pass "
                  "y.astype(np.float32)")
    return y, mask, MULTILABEL


def labelled_nodes(y, y_mask, kind):
    """(N,) bool: the nodes with a label (a class >= 0, or an entry neither masked, NaN nor -1)."""
    y = np.asarray(y)
    if kind == CLASS:
        labelled = y.reshape(-1) >= 0
        return labelled if y_mask is None else labelled & np.asarray(y_mask).reshape(-1)
    entries = np.ones(y.shape, dtype=np.bool_) if y_mask is None else _entry_mask(y, np.asarray(y_mask)).copy()
    if np.issubdtype(y.dtype, np.floating):
        entries &= ~np.isnan(y)
    elif kind == MULTILABEL and y.dtype != np.bool_:
        entries &= y != -1
    return entries.reshape(y.shape[0], -1).any(axis=1)


# ----------------------------------------------------------------------------------------
# Whether the graph can train (the wording of halogen's own check, partition/src/trainability.cpp)


def trainability_problems(num_nodes, x=None, y=None, train=None, valid=None, y_mask=None):
    """Why a graph cannot train, one sentence per reason naming the array (empty: it can).

    `x` the (N, F) features or None, `y` the labels of any kind (check_y) or None, `y_mask` its
    mask or None, `train` and `valid` (N,) bool arrays of the training and validation nodes or
    None. The sentences are those of `halogen convert`'s warning and `halogen train`'s
    refusal."""
    n = int(num_nodes)
    kind, columns = CLASS, 0
    if y is None:
        has_label = np.zeros(n, dtype=np.bool_)
        classes = 0
    else:
        y, y_mask, kind = check_y(y, y_mask)
        has_label = labelled_nodes(y, y_mask, kind)
        columns = 1 if y.ndim == 1 else y.shape[1]
        classes = int(y[has_label].max()) + 1 if kind == CLASS and has_label.any() else 0
    labelled = int(has_label.sum())
    word = "label" if kind == MULTILABEL else "target"
    problems = []
    if x is None or np.asarray(x).ndim != 2 or np.asarray(x).shape[1] < 1:
        problems.append(f"there are no node features (x is missing: expected {n} rows of F >= 1 features)")
    if kind != CLASS and columns < 1:
        problems.append(f"y has no {word} column (expected at least 1 per node)")
    elif labelled == 0 and kind == CLASS:
        problems.append(f"no node has a label (y is missing or all {n} of its values are -1: expected a class >= 0 "
                        "for the training and validation nodes)")
    elif labelled == 0:
        problems.append(f"no node has a label (y is missing or every entry of its {n} rows is NaN: expected a "
                        f"{'0 or 1' if kind == MULTILABEL else 'finite'} value for the training and validation nodes)")
    elif kind == CLASS and classes < 2:
        problems.append(f"y has {classes} class (every label is 0 or -1: expected at least 2 classes)")
    for role, members, array in (("training", train, "train_mask/split"), ("validation", valid, "val_mask/split")):
        members = np.zeros(n, dtype=np.bool_) if members is None else np.asarray(members, dtype=np.bool_)
        count = int(members.sum())
        if count == 0:
            problems.append(f"no node is in the {role} split ({array} holds none of the {n} nodes)")
        elif labelled > 0 and not (has_label & members).any():
            problems.append(f"no node is in the {role} split with a label (y has 0 labelled nodes among the {count} "
                            f"in {array})")
    return problems


def trainability_message(path, n, x, y, roles, y_mask=None):
    """The warning halogen_npz.save gives for the archive at `path`, or None. `roles` is the
    (N,) split or None."""
    train = None if roles is None else roles == 1  # halogen_npz.SPLIT_TRAIN
    valid = None if roles is None else roles == 2  # SPLIT_VALID
    problems = trainability_problems(n, x, y, train, valid, y_mask)
    if not problems:
        return None
    unlabelled = y is None or not labelled_nodes(*check_y(y, y_mask)).any()
    if x is None and unlabelled and (roles is None or not roles.any()):
        return (f"dataset '{os.fspath(path)}' holds a graph's structure only (no x, no y, no train_mask/split): it "
                "can be partitioned and inspected, but not trained")
    return (f"dataset '{os.fspath(path)}' cannot train: {'; '.join(problems)}. It is written all the same: "
            "halogen convert, partition and info take it, halogen train refuses it")

"""Reader and writer for the Planetoid ``ind.<name>.*`` files (Yang et al. 2016), and the full-graph assembly.

The files are Python-2 pickles (csr float32 features, int32 one-hot labels, a ``defaultdict(list)`` adjacency)
plus a text ``test.index``. Every file is sha256-checked before it is unpickled, and unpickling may only build
the handful of numpy/scipy/collections objects these files contain.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from genlab.errors import DataError
from genlab.utils import atomic_write, sha256_file

PICKLED = ("x", "y", "tx", "ty", "allx", "ally", "graph")
SUFFIXES = PICKLED + ("test.index",)
SUMS_FILE = "SHA256SUMS"

# sha256 of the files released in kimiyoung/planetoid/data. Pubmed's allx was not in the snapshot
# we hashed; its public record is the repository's own tree (KNOWN_GIT_BLOB below).
KNOWN_SHA256: dict[str, str | None] = {
    "ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
    "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
    "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
    "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
    "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
    "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
    "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
    "ind.cora.test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    "ind.citeseer.x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
    "ind.citeseer.y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
    "ind.citeseer.tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
    "ind.citeseer.ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
    "ind.citeseer.allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
    "ind.citeseer.ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
    "ind.citeseer.graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
    "ind.citeseer.test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    "ind.pubmed.x": "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
    "ind.pubmed.y": "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
    "ind.pubmed.tx": "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
    "ind.pubmed.ty": "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
    "ind.pubmed.allx": None,
    "ind.pubmed.ally": "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
    "ind.pubmed.graph": "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
    "ind.pubmed.test.index": "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
}


# Git blob ids (sha1 of b"blob <size>\0" + content) from the kimiyoung/planetoid tree at commit af6abf4
# (data/ folder, unchanged since the release): the public record for files whose sha256 no source lists.
KNOWN_GIT_BLOB: dict[str, str] = {
    "ind.pubmed.allx": "3b86bccf08111c37c632a9dd8ab63db25ea76361",
}


def git_blob_id(data: bytes) -> str:
    """The id git (and GitHub's tree listing) gives a file with these bytes."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def file_names(name: str) -> tuple[str, ...]:
    return tuple(f"ind.{name}.{s}" for s in SUFFIXES)


# ----------------------------------------------------------------------------------------------- unpickling
def _allowed() -> dict[tuple[str, str], object]:
    import scipy.sparse as sp

    from genlab.safe_pickle import numpy_arrays

    table = {**numpy_arrays(), ("collections", "defaultdict"): defaultdict, ("__builtin__", "list"): list,
             ("builtins", "list"): list}
    for mod in ("scipy.sparse.csr", "scipy.sparse._csr"):
        table[(mod, "csr_matrix")] = sp.csr_matrix
    return table


def restricted_load(data: bytes, shown_as: str) -> object:
    from genlab.safe_pickle import RefusedGlobal, loads, refusal

    try:
        return loads(data, _allowed(), encoding="latin1")
    except RefusedGlobal as err:
        raise DataError(refusal(err, shown_as, "a Planetoid file", "Delete it and fetch it again.")) from err
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise DataError(f"{shown_as} is not a valid Planetoid pickle ({err}); delete it and fetch it again.") from err


def _expected_sums(root: Path) -> dict[str, str]:
    sums = root / SUMS_FILE
    if not sums.is_file():
        return {}
    out = {}
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[1].lstrip("*")] = parts[0]
    return out


def _read_verified(path: Path, listed: dict[str, str]) -> bytes:
    expected = KNOWN_SHA256.get(path.name) or listed.get(path.name)
    blob_id = KNOWN_GIT_BLOB.get(path.name)
    if expected is None and blob_id is None:
        raise DataError(
            f"{path}: no sha256 known for this file, so it will not be unpickled. Add a line "
            f"'<sha256>  {path.name}' to {path.parent / SUMS_FILE} (sha256sum output) once you trust the file."
        )
    data = path.read_bytes()
    if expected is not None:
        import hashlib

        actual, kind = hashlib.sha256(data).hexdigest(), "sha256"
    else:
        actual, expected, kind = git_blob_id(data), blob_id, "git blob id"
    if actual != expected:
        raise DataError(
            f"checksum mismatch for {path}: {kind} {actual}, expected {expected}. The file is corrupt or a "
            "different version; delete it and fetch it again (data.source=download) or fix data.path."
        )
    return data


@dataclass
class RawPlanetoid:
    """The eight ``ind.<name>.*`` objects as stored."""

    x: object
    y: np.ndarray
    tx: object
    ty: np.ndarray
    allx: object
    ally: np.ndarray
    graph: dict
    test_index: np.ndarray  # graph node id of each tx row, in tx row order


def read_raw(root: str | Path, name: str) -> RawPlanetoid:
    root = Path(root)
    listed = _expected_sums(root)
    objs: dict[str, object] = {}
    for suffix in PICKLED:
        path = root / f"ind.{name}.{suffix}"
        if not path.is_file():
            raise DataError(f"{path} is missing; expected files: {', '.join(file_names(name))} (set data.path=).")
        objs[suffix] = restricted_load(_read_verified(path, listed), str(path))
    idx_path = root / f"ind.{name}.test.index"
    if not idx_path.is_file():
        raise DataError(f"{idx_path} is missing; expected files: {', '.join(file_names(name))} (set data.path=).")
    text = _read_verified(idx_path, listed).decode()
    try:
        test_index = np.array([int(t) for t in text.split()], dtype=np.int64)
    except ValueError as err:
        raise DataError(f"{idx_path}: every line must be one integer node id ({err}).") from err
    return RawPlanetoid(test_index=test_index, **objs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ assembly
@dataclass
class PlanetoidGraph:
    """Full-graph view in the ``ind`` node ids: ``0..n_train-1`` are ``allx`` rows (``0..n_labeled-1`` labelled).

    ``labels`` is -1 where unknown (Citeseer's feature-less nodes). ``labels`` of unlabelled training nodes are the
    ``ally`` rows: use them only for validation, never for training. ``adj_lists`` keeps duplicates and self-loops.
    """

    features: np.ndarray  # [N, F] float32 (dense; zeros for nodes without features)
    labels: np.ndarray  # [N] int64
    n_labeled: int
    n_train: int
    test_idx: np.ndarray  # node id of each tx row, in tx order
    indptr: np.ndarray  # CSR of the raw adjacency lists [N + 1]
    indices: np.ndarray
    n_classes: int

    @property
    def num_nodes(self) -> int:
        return len(self.labels)

    @property
    def train_idx(self) -> np.ndarray:
        return np.arange(self.n_labeled)

    def val_idx(self, size: int = 500) -> np.ndarray:
        """GCN convention (the thesis has no validation split): the first ``size`` unlabelled ``allx`` nodes."""
        return np.arange(self.n_labeled, min(self.n_labeled + size, self.n_train))


def _dense(m) -> np.ndarray:
    return np.asarray(m.todense() if hasattr(m, "todense") else m, dtype=np.float32)


def _onehot_to_index(y: np.ndarray, shown_as: str) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 2:
        raise DataError(f"{shown_as}: labels must be a one-hot [rows, classes] array, got shape {y.shape}.")
    lab = y.argmax(1).astype(np.int64)
    lab[y.sum(1) == 0] = -1
    return lab


def assemble(raw: RawPlanetoid, name: str = "planetoid") -> PlanetoidGraph:
    """Place every row at its graph node id (tx rows follow ``test.index``, which is not sorted)."""
    allx, tx = _dense(raw.allx), _dense(raw.tx)
    ally = _onehot_to_index(raw.ally, f"ind.{name}.ally")
    ty = _onehot_to_index(raw.ty, f"ind.{name}.ty")
    n_labeled, n_train = np.asarray(raw.y).shape[0], allx.shape[0]
    if len(raw.test_index) != tx.shape[0] or ty.shape[0] != tx.shape[0]:
        raise DataError(f"ind.{name}: test.index has {len(raw.test_index)} ids for {tx.shape[0]} tx rows.")
    if len(raw.test_index) and raw.test_index.min() < n_train:
        raise DataError(f"ind.{name}.test.index: ids must be >= {n_train} (the allx rows).")
    max_id = max([n_train - 1, int(raw.test_index.max(initial=-1))] + [int(k) for k in raw.graph])
    max_id = max([max_id] + [int(v) for vs in raw.graph.values() for v in vs])
    n = max_id + 1
    feats = np.zeros((n, allx.shape[1]), np.float32)
    labels = np.full(n, -1, np.int64)
    feats[:n_train], labels[:n_train] = allx, ally
    feats[raw.test_index], labels[raw.test_index] = tx, ty  # k-th tx row belongs to node test_index[k]
    deg = np.zeros(n, np.int64)
    for k, vs in raw.graph.items():
        deg[int(k)] = len(vs)
    indptr = np.concatenate([[0], np.cumsum(deg)])
    indices = np.empty(indptr[-1], np.int64)
    for k, vs in raw.graph.items():
        indices[indptr[int(k)] : indptr[int(k) + 1]] = vs
    return PlanetoidGraph(
        features=feats,
        labels=labels,
        n_labeled=n_labeled,
        n_train=n_train,
        test_idx=raw.test_index.copy(),
        indptr=indptr,
        indices=indices,
        n_classes=int(np.asarray(raw.ally).shape[1]),
    )


def load(root: str | Path, name: str) -> PlanetoidGraph:
    return assemble(read_raw(root, name), name)


def trans_order(g: PlanetoidGraph) -> np.ndarray:
    """Old id of each ``trans`` node: labelled ``0..L-1``, then test nodes in tx order, then the rest (the file format's
    order)."""
    rest = np.setdiff1d(np.arange(g.num_nodes), np.concatenate([g.train_idx, g.test_idx]))
    return np.concatenate([g.train_idx, g.test_idx, rest])


# ------------------------------------------------------------------------------------------------- writing
def write_ind(
    root: str | Path,
    name: str,
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    n_labeled: int,
    n_train: int,
    test_ids: np.ndarray,
    graph: dict[int, list[int]],
) -> None:
    """Write ``ind.<name>.*`` exactly as released (pickle protocol 2, csr float32, int32 one-hot, defaultdict)
    plus a SHA256SUMS file. Node ids ``0..n_train-1`` go to allx; ``test_ids`` (in the given order) to tx."""
    import scipy.sparse as sp

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    onehot = np.eye(n_classes, dtype=np.int32)
    lab = np.where(labels[:, None] >= 0, onehot[np.clip(labels, 0, None)], 0).astype(np.int32)
    objs = {
        "x": sp.csr_matrix(features[:n_labeled].astype(np.float32)),
        "y": lab[:n_labeled],
        "allx": sp.csr_matrix(features[:n_train].astype(np.float32)),
        "ally": lab[:n_train],
        "tx": sp.csr_matrix(features[test_ids].astype(np.float32)),
        "ty": lab[test_ids],
        "graph": defaultdict(list, {int(k): [int(v) for v in vs] for k, vs in graph.items()}),
    }
    for suffix, obj in objs.items():
        with atomic_write(root / f"ind.{name}.{suffix}") as f:
            pickle.dump(obj, f, protocol=2)
    with atomic_write(root / f"ind.{name}.test.index", "w") as f:
        f.write("".join(f"{int(i)}\n" for i in test_ids))
    sums = "".join(f"{sha256_file(root / fn)}  {fn}\n" for fn in file_names(name))
    with atomic_write(root / SUMS_FILE, "w") as f:
        f.write(sums)

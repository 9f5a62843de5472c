"""Planetoid ind.* reader, split assembly, minis and DataModule (the released file format of Yang et al., 2016, and the
splits of Yang's thesis §3.3.4). A file set written by the test in that format covers the reader; the checks on the
real files run when GENLAB_PLANETOID_DIR names a folder holding the authors' released ind.* files."""

from __future__ import annotations

import os
import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from genlab.data.graphs.planetoid import (
    PlanetoidDataModule,
    dataset_spec,
    synthetic_planetoid,
)
from genlab.data.graphs.planetoid_format import (
    SUMS_FILE,
    file_names,
    load,
    read_raw,
    restricted_load,
    trans_order,
    write_ind,
)
from genlab.errors import ConfigError, DataError
from genlab.utils import sha256_file
from helpers import TouchPayload

REAL_ENV = "GENLAB_PLANETOID_DIR"
REAL = Path(os.environ[REAL_ENV]) if os.environ.get(REAL_ENV) else None
NO_REAL = (f"{REAL_ENV} is not set (a folder with the released Planetoid ind.* files)" if REAL is None
           else f"the released Planetoid ind.* files are not all in {REAL} ({REAL_ENV})")


def _have(name: str) -> bool:
    return REAL is not None and all((REAL / f).is_file() for f in file_names(name))


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    data = synthetic_planetoid(seed=3)
    write_ind(root, "synth", **data)
    return root, data


def _edges(indptr, indices):
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return rows, indices


def test_round_trip_reproduces_features_labels_graph_and_test_ids(synth):
    root, data = synth
    raw = read_raw(root, "synth")
    assert isinstance(raw.graph, defaultdict)
    g = load(root, "synth")
    n = len(data["labels"])
    assert g.num_nodes == n and g.n_labeled == data["n_labeled"] and g.n_train == data["n_train"]
    np.testing.assert_array_equal(g.features, data["features"])
    np.testing.assert_array_equal(g.labels, data["labels"])
    np.testing.assert_array_equal(g.test_idx, data["test_ids"])
    for k in range(n):
        assert list(g.indices[g.indptr[k] : g.indptr[k + 1]]) == data["graph"][k]


def test_loader_reads_latin1_python2_style_pickles():  # protocol-2 pickle of str bytes
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    blob = pickle.dumps(arr, protocol=2)
    np.testing.assert_array_equal(restricted_load(blob, "mem"), arr)
    graph = restricted_load(pickle.dumps(defaultdict(list, {0: [1]}), protocol=2), "mem")
    assert graph == {0: [1]} and isinstance(graph, defaultdict)


def test_a_trusted_file_carrying_code_is_refused_without_running_it(tmp_path, synth):
    """Even a file the user vouched for (its sha256 in SHA256SUMS) only builds numpy/scipy/defaultdict objects."""
    root, _ = synth
    for f in file_names("synth"):
        (tmp_path / f).write_bytes((root / f).read_bytes())
    evil, marker = tmp_path / "ind.synth.graph", tmp_path / "pwned"
    evil.write_bytes(pickle.dumps({0: [TouchPayload(marker)]}, protocol=2))
    (tmp_path / SUMS_FILE).write_text("".join(f"{sha256_file(tmp_path / f)}  {f}\n" for f in file_names("synth")))
    with pytest.raises(DataError, match=r"ind\.synth\.graph refers to \S+, which a Planetoid file never holds.*fetch it again"):
        read_raw(tmp_path, "synth")
    assert not marker.exists()


def test_checksum_is_verified_before_unpickling(tmp_path, synth):
    root, _ = synth
    for f in file_names("synth") + (SUMS_FILE,):
        (tmp_path / f).write_bytes((root / f).read_bytes())
    (tmp_path / "ind.synth.ty").write_bytes(b"garbage")
    with pytest.raises(DataError, match="checksum mismatch.*ind.synth.ty"):
        read_raw(tmp_path, "synth")
    (tmp_path / SUMS_FILE).unlink()
    with pytest.raises(DataError, match="no sha256 known"):
        read_raw(tmp_path, "synth")


def test_file_without_sha256_is_checked_by_its_public_git_blob_id(tmp_path, synth, monkeypatch):
    """Pubmed's allx has no published sha256; the kimiyoung/planetoid tree's git blob id stands in for it."""
    from genlab.data.graphs import planetoid_format as fmt

    root, _ = synth
    for f in file_names("synth"):
        (tmp_path / f).write_bytes((root / f).read_bytes())
    sums = {f: sha256_file(root / f) for f in file_names("synth") if f != "ind.synth.allx"}
    (tmp_path / SUMS_FILE).write_text("".join(f"{h}  {f}\n" for f, h in sums.items()))
    allx = (root / "ind.synth.allx").read_bytes()
    monkeypatch.setitem(fmt.KNOWN_GIT_BLOB, "ind.synth.allx", fmt.git_blob_id(allx))
    assert read_raw(tmp_path, "synth").allx.shape == read_raw(root, "synth").allx.shape
    (tmp_path / "ind.synth.allx").write_bytes(allx[:-1] + bytes([allx[-1] ^ 1]))
    with pytest.raises(DataError, match="git blob id .* expected"):
        read_raw(tmp_path, "synth")


def test_pubmed_allx_has_a_public_digest():
    from genlab.data.graphs.planetoid_format import KNOWN_GIT_BLOB, KNOWN_SHA256

    unverifiable = [f for f in file_names("pubmed") if KNOWN_SHA256.get(f) is None and f not in KNOWN_GIT_BLOB]
    assert unverifiable == []


@pytest.mark.skipif(not _have("cora"), reason=NO_REAL)
def test_git_blob_id_matches_the_released_tree():
    """Ids as listed by `git ls-tree` of kimiyoung/planetoid (af6abf4) for three real files."""
    from genlab.data.graphs.planetoid_format import git_blob_id

    listed = {
        "ind.cora.x": "c4a91d008245403e7f26aa616b437191509793c0",
        "ind.cora.allx": "44d53b1fece343538e45592caac521d73c6f98d6",
        "ind.cora.test.index": "ded8092db4cd767a367eebe09003b954a5316f24",
    }
    assert {f: git_blob_id((REAL / f).read_bytes()) for f in listed} == listed


def test_test_index_order_attaches_kth_tx_row_to_test_index_k(synth):
    root, data = synth
    raw, g = read_raw(root, "synth"), load(root, "synth")
    assert not np.all(np.diff(raw.test_index) > 0), "the writer must shuffle test.index"
    tx, ty = np.asarray(raw.tx.todense()), raw.ty.argmax(1)
    for k, node in enumerate(raw.test_index):
        np.testing.assert_array_equal(g.features[node], tx[k])
        assert g.labels[node] == ty[k] == data["labels"][node]


def test_citeseer_style_gaps_have_no_features_no_label_and_stay_walkable(synth):
    root, data = synth
    g = load(root, "synth")
    gaps = np.setdiff1d(np.arange(g.n_train, g.num_nodes), g.test_idx)
    assert len(gaps) == 3
    assert np.all(g.features[gaps] == 0) and np.all(g.labels[gaps] == -1)
    assert not np.isin(gaps, g.test_idx).any()
    assert np.all(np.diff(g.indptr)[gaps] > 0)


@pytest.mark.skipif(not (_have("cora") and _have("citeseer")), reason=NO_REAL)
@pytest.mark.parametrize(
    "name, C, F, L, ntr, n, featureless, adj_len, dups, loops, uniq, only_self, ty_counts",
    [
        ("cora", 7, 1433, 140, 1708, 2708, 0, 10858, 302, 0, 5278, 0, [130, 91, 144, 319, 149, 103, 64]),
        ("citeseer", 6, 3703, 120, 2312, 3327, 15, 9464, 236, 124, 4552, 48, [77, 182, 181, 231, 169, 160]),
    ],
)
def test_real_files_shapes_counts_edges_and_sha256(
    name, C, F, L, ntr, n, featureless, adj_len, dups, loops, uniq, only_self, ty_counts
):
    from genlab.data.graphs.planetoid_format import KNOWN_SHA256

    for f in file_names(name):
        assert sha256_file(REAL / f) == KNOWN_SHA256[f]
    g = load(REAL, name)
    assert (g.n_classes, g.features.shape, g.n_labeled, g.n_train, g.num_nodes) == (C, (n, F), L, ntr, n)
    assert len(g.test_idx) == 1000 and g.test_idx.min() == ntr and g.test_idx.max() == n - 1
    assert np.count_nonzero(g.labels < 0) == featureless
    assert np.bincount(g.labels[g.test_idx], minlength=C).tolist() == ty_counts
    assert np.bincount(g.labels[:L]).tolist() == [20] * C
    rows, cols = _edges(g.indptr, g.indices)
    assert len(cols) == adj_len
    assert len(cols) - len(np.unique(rows * n + cols)) == dups
    # Citeseer: 124 nodes carry a self-loop, each listing itself twice
    assert len(np.unique(rows[rows == cols])) == loops
    und = np.unique(np.stack([np.minimum(rows, cols), np.maximum(rows, cols)], 1)[rows != cols], axis=0)
    assert len(und) == uniq
    deg = np.diff(g.indptr)
    self_only = [k for k in range(n) if deg[k] and np.all(g.indices[g.indptr[k] : g.indptr[k + 1]] == k)]
    assert len(self_only) == only_self


def _check_trans(g):
    order = trans_order(g)  # old id of each trans id
    L, nt = g.n_labeled, len(g.test_idx)
    assert sorted(order.tolist()) == list(range(g.num_nodes))
    np.testing.assert_array_equal(order[:L], np.arange(L))
    np.testing.assert_array_equal(order[L : L + nt], g.test_idx)
    new = np.empty_like(order)
    new[order] = np.arange(len(order))
    rows, cols = _edges(g.indptr, g.indices)
    nr, nc = new[rows], new[cols]
    known = L + nt  # edges among labelled + test nodes equal the ind edges under the mapping
    sub_old = {(int(a), int(b)) for a, b in zip(rows, cols) if new[a] < known and new[b] < known}
    sub_new = {(int(order[a]), int(order[b])) for a, b in zip(nr, nc) if a < known and b < known}
    assert sub_old == sub_new
    deg_old = np.bincount(rows, minlength=g.num_nodes)
    deg_new = np.bincount(nr, minlength=g.num_nodes)
    assert sorted(deg_old) == sorted(deg_new)
    assert len(np.unique(rows * g.num_nodes + cols)) == len(np.unique(nr * g.num_nodes + nc))
    np.testing.assert_array_equal(g.features[order][L : L + nt], g.features[g.test_idx])


def test_trans_reindexing_synthetic(synth):
    _check_trans(load(synth[0], "synth"))


@pytest.mark.skipif(not _have("cora"), reason=NO_REAL)
def test_trans_reindexing_real():  # the same on the real files
    _check_trans(load(REAL, "cora"))


def test_unlabelled_training_labels_do_not_leak_into_supervised_batches(tmp_path):
    dm = PlanetoidDataModule(name="synth", source="mini", cache_dir=str(tmp_path), steps=20, batch_size=4)
    dm.prepare_data()
    dm.setup("fit")
    seen = set()
    for b in dm.train_dataloader():
        for s in b["subs"]:
            seen.update(s["nodes"].tolist())
    assert seen == set(range(dm.graph.n_labeled))
    assert set(dm.val_idx.tolist()).isdisjoint(seen) and len(dm.val_idx) == dm.graph.n_train - dm.graph.n_labeled


def test_karate_mini_layout(tmp_path):
    dm = PlanetoidDataModule(name="karate", source="mini", cache_dir=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    g = dm.graph
    assert g.num_nodes == 34 and g.n_labeled == 2 and g.labels[0] != g.labels[1]
    assert len(g.indices) == 2 * 78 and dm.model_overrides() == {"n_features": 1, "n_classes": 2, "num_nodes": 34}


def test_errors_name_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="data.name"):
        dataset_spec("nope")
    dm = PlanetoidDataModule(name="cora", source="path", path=str(tmp_path))
    with pytest.raises(DataError, match="ind.cora.x"):
        dm.prepare_data()
    with pytest.raises(ConfigError, match="r1_coin"):
        PlanetoidDataModule(sampler="reference", neg_mode="r1_coin")


def test_download_spec_points_at_the_planetoid_repo():
    spec = dataset_spec("citeseer")
    assert len(spec.downloads) == 8
    for r in spec.downloads:
        assert r.url.startswith("https://raw.githubusercontent.com/kimiyoung/planetoid/") and r.sha256

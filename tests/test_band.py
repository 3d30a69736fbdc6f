"""brefine.band: properties of the near-boundary band (hypothesis), the Canny construction checked on every small binary
map, agreement of the Canny and torch paths, and the band of an augmented training batch (brefine.data)."""
import itertools, math, time
import numpy as np
import cv2
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from hypothesis.extra.numpy import arrays

from brefine.band import near_boundary_mask, batch_band, disk, _plane_edges

torch.set_num_threads(1)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def edges_by_definition(lab):
    "Pixels whose label differs from one of their 4 neighbours (slow and obvious)."
    lab = np.asarray(lab); H, W = lab.shape
    e = np.zeros((H, W), bool)
    for y, x in itertools.product(range(H), range(W)):
        for dy, dx in ((0, 1), (1, 0), (0, -1), (-1, 0)):
            if 0 <= y+dy < H and 0 <= x+dx < W and lab[y+dy, x+dx] != lab[y, x]: e[y, x] = True
    return e

def band_by_definition(lab, r, ignore=None):
    "Pixels within Euclidean distance r of an edge pixel, never void (slow and obvious)."
    e = edges_by_definition(lab); H, W = e.shape
    ys, xs = np.nonzero(e)
    yy, xx = np.mgrid[0:H, 0:W]
    band = np.zeros((H, W), bool)
    for y, x in zip(ys, xs): band |= (yy - y)**2 + (xx - x)**2 <= r*r
    if ignore is not None: band &= lab != ignore
    return band

@st.composite
def label_maps(draw, max_side=20, max_classes=6):
    "Random label maps: pixel noise (worst case) or blocky maps (nearest-upsampled noise)."
    h, w = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    k = draw(st.integers(1, max_classes))
    lab = draw(arrays(np.int64, (h, w), elements=st.integers(-2, k - 3)))
    if draw(st.booleans()):
        fy, fx = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        lab = np.repeat(np.repeat(lab, fy, 0), fx, 1)[:max_side, :max_side]
    return lab

radii = st.integers(0, 6)


# ---------------------------------------------------------------- the Canny construction
def test_canny_construction_on_every_small_binary_map():
    "Exhaustive: the 3x Canny of a binary plane is its edge set, for all binary maps of sizes {1,2,4}x{1,2,4}."
    n = 0
    for H, W in itertools.product((1, 2, 4), repeat=2):
        bits = np.arange(H * W)
        for code in range(2 ** (H * W)):
            P = ((code >> bits) & 1).reshape(H, W).astype(np.uint8)
            e = cv2.resize(_plane_edges(P * np.uint8(255)), (W, H), interpolation=cv2.INTER_AREA) > 0
            assert (e == edges_by_definition(P)).all(), P
            n += 1
    assert n == 66106

def test_plain_canny_misses_changes():
    "Why the construction is needed: plain Canny on the label map misses a 2x2 object and ramp steps."
    blob = np.zeros((8, 8), np.uint8); blob[3:5, 3:5] = 255
    assert not cv2.Canny(blob, 0, 0).any()
    assert near_boundary_mask(blob, 0).sum() == 12


# ---------------------------------------------------------------- properties
@FAST
@given(label_maps(), radii)
def test_band_is_the_definition(lab, r):
    np.testing.assert_array_equal(near_boundary_mask(lab, r), band_by_definition(lab, r))

@FAST
@given(label_maps(), radii, st.booleans())
def test_torch_path_equals_canny_path(lab, r, use_ignore):
    ignore = int(lab.flat[0]) if use_ignore else None
    expected = near_boundary_mask(lab, r, ignore)
    np.testing.assert_array_equal(batch_band(torch.from_numpy(lab), r, ignore).numpy(), expected)
    np.testing.assert_array_equal(batch_band(lab, r, ignore), expected)

@FAST
@given(label_maps(), radii, st.integers(-2, 3))
def test_band_never_holds_ignore_pixels(lab, r, ignore):
    for band in (near_boundary_mask(lab, r, ignore), batch_band(torch.from_numpy(lab), r, ignore).numpy()):
        assert not band[lab == ignore].any()
    # and ignoring a label only removes its own pixels: the band of the other pixels is unchanged
    np.testing.assert_array_equal(near_boundary_mask(lab, r, ignore), near_boundary_mask(lab, r) & (lab != ignore))

@FAST
@given(label_maps(), st.integers(0, 5))
def test_radius_monotonic(lab, r):
    small, big = near_boundary_mask(lab, r), near_boundary_mask(lab, r + 1)
    assert not (small & ~big).any()
    tsmall, tbig = (batch_band(torch.from_numpy(lab), k) for k in (r, r + 1))
    assert not (tsmall & ~tbig).any()

@FAST
@given(label_maps(), radii, st.randoms(use_true_random=False))
def test_band_depends_only_on_the_partition(lab, r, rnd):
    "Renaming the classes (any injective map, here to large random values) does not move the band."
    vals = np.unique(lab)
    new = np.array(rnd.sample(range(-10**12, 10**12), len(vals)), np.int64)
    relabelled = new[np.searchsorted(vals, lab)]
    np.testing.assert_array_equal(near_boundary_mask(relabelled, r), near_boundary_mask(lab, r))

@FAST
@given(label_maps())
def test_empty_band_iff_single_class(lab):
    has_edges = len(np.unique(lab)) > 1
    assert near_boundary_mask(lab, 0).any() == has_edges
    assert bool(batch_band(torch.from_numpy(lab), 0).any()) == has_edges
    const = np.full_like(lab, 7)                                       # one class, or void only: no band at all
    assert not near_boundary_mask(const, 3).any() and not near_boundary_mask(const, 3, ignore_index=7).any()


# ---------------------------------------------------------------- many classes, batches, devices, errors
def test_300_classes():
    rng = np.random.default_rng(0)
    coarse = rng.permutation(300)[rng.integers(0, 300, (30, 40))]     # 300 classes (most present), blocky
    lab = np.repeat(np.repeat(coarse, 3, 0), 3, 1)
    assert len(np.unique(lab)) > 255
    for r in (0, 2, 4):
        band = near_boundary_mask(lab, r, ignore_index=int(lab[0, 0]))
        np.testing.assert_array_equal(band, band_by_definition(lab, r, int(lab[0, 0])))
        np.testing.assert_array_equal(batch_band(torch.from_numpy(lab), r, int(lab[0, 0])).numpy(), band)
    stripes = np.repeat(np.arange(300)[None], 3, 0)                   # 300 one-pixel stripes: every pixel is an edge
    assert near_boundary_mask(stripes, 0).all() and batch_band(torch.from_numpy(stripes), 0).all()

def test_batches_kinds_and_devices():
    rng = np.random.default_rng(1)
    labs = np.repeat(np.repeat(rng.integers(0, 5, (3, 8, 10)), 4, 1), 4, 2)
    t = torch.from_numpy(labs)
    out = near_boundary_mask(t, 3, 0)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool and out.shape == t.shape
    assert isinstance(near_boundary_mask(labs), np.ndarray)
    for i in range(3): np.testing.assert_array_equal(out[i].numpy(), near_boundary_mask(labs[i], 3, 0))
    np.testing.assert_array_equal(batch_band(t, 3, 0), out)
    np.testing.assert_array_equal(batch_band(t.to(torch.uint8), 3, 0), out)
    if torch.cuda.is_available():
        assert batch_band(t.cuda(), 3, 0).device.type == 'cuda'
        np.testing.assert_array_equal(batch_band(t.cuda(), 3, 0).cpu(), out)
        assert near_boundary_mask(t.cuda(), 3, 0).device.type == 'cuda'

def test_disk():
    for r in range(10):
        y, x = np.mgrid[-r:r+1, -r:r+1]
        np.testing.assert_array_equal(disk(r), (x*x + y*y <= r*r).astype(np.uint8))

def test_disk_of_fractional():
    "One disk for any real radius: offsets within Euclidean distance r; whole radii give `disk`; the rectangles rebuild it."
    from brefine.band import _disk_of, _disk_rects
    for r in [0, 0.2, 0.5, 1, 1.5, math.sqrt(2), 2, 2.5, 3.7, math.sqrt(50), 9, 9.99]:
        R = math.floor(r)
        y, x = np.mgrid[-R:R+1, -R:R+1]
        np.testing.assert_array_equal(_disk_of(r), (x*x + y*y <= r*r).astype(np.uint8))
        k = np.zeros((2*R+1, 2*R+1), np.uint8)
        for h, w in _disk_rects(r): k[R-h:R+h+1, R-w:R+w+1] = 1
        np.testing.assert_array_equal(k, _disk_of(r))
        if r == int(r): np.testing.assert_array_equal(_disk_of(r), disk(int(r)))

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrays(np.int64, st.tuples(st.integers(1, 30), st.integers(1, 30)), elements=st.integers(-2, 3)),
       st.sampled_from([0, 0.5, 1, 1.5, 2, 2.5, 3.2, 5, 100]), st.sampled_from([None, 0]))
def test_band_any_radius_is_the_distance_definition(lab, r, ig):
    "_band_t (numpy or torch, cv2 or max-pooling) is the pixels within Euclidean distance r of an edge pixel, never void."
    from brefine.band import _band_t, _dilate_t, _edges_t
    e = _edges_t(lab)
    want = (cv2.distanceTransform((~e).view(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE) <= r) & e.any()
    if ig is not None: want &= lab != ig
    np.testing.assert_array_equal(_band_t(lab, r, ig), want)
    np.testing.assert_array_equal(_band_t(torch.from_numpy(lab), r, ig).numpy(), want)
    np.testing.assert_array_equal(_dilate_t(torch.from_numpy(e), r, use_cv2=False).numpy(), _dilate_t(e, r))
    if r == int(r): np.testing.assert_array_equal(batch_band(lab, int(r), ig), want)

@pytest.mark.parametrize('f', [near_boundary_mask, batch_band])
def test_bad_input(f):
    lab = torch.zeros(4, 5, dtype=torch.long)
    with pytest.raises(TypeError, match='integer class indices'): f(lab.float())
    with pytest.raises(TypeError, match='integer class indices'): f(np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r'\(B,H,W\)'): f(lab[None, None])
    with pytest.raises(ValueError, match=r'\(B,H,W\)'): f(lab[0])
    with pytest.raises(ValueError, match='radius must be >= 0'): f(lab, -1)
    with pytest.raises(TypeError, match='whole number'): f(lab, 2.0)
    with pytest.raises(TypeError, match='ignore_index'): f(lab, 1, 'void')
    with pytest.raises(TypeError, match='whole number'): f(lab, True)
    with pytest.raises(TypeError, match='whole number'): f(lab, np.bool_(True))
    with pytest.raises(ValueError, match='radius must be >= 0'): f(lab, np.int64(-1))
    np.testing.assert_array_equal(f(lab, np.int64(2)), f(lab, 2))


# ---------------------------------------------------------------- radii beyond the image
@FAST
@given(label_maps(max_side=12), st.sampled_from([10**3, 10**6, 10**12]), st.booleans())
def test_radius_beyond_the_diagonal_is_the_diagonal(lab, r, use_ignore):
    "No two pixels are farther apart than the diagonal: a larger radius gives the band of the diagonal, by definition."
    ignore = int(lab.flat[0]) if use_ignore else None
    h, w = lab.shape
    diag = math.ceil(math.hypot(h - 1, w - 1))
    expected = band_by_definition(lab, diag, ignore)
    np.testing.assert_array_equal(near_boundary_mask(lab, r, ignore), expected)
    np.testing.assert_array_equal(batch_band(torch.from_numpy(lab), r, ignore).numpy(), expected)

@pytest.mark.parametrize('f', [near_boundary_mask, batch_band])
def test_huge_radius_is_fast(f):
    "A radius of 10**6 would be a disk of 4*10**12 entries; it is answered from the image's diagonal instead."
    lab = np.zeros((600, 800), np.uint8); lab[200:300, 300:420] = 3
    t = time.perf_counter()
    band = f(lab, 10**6, 3)
    assert time.perf_counter() - t < 5
    np.testing.assert_array_equal(band, lab != 3)


# ---------------------------------------------------------------- the band of an augmented training batch
def test_band_of_augmented_batch_is_band_of_its_mask(tmp_path):
    from fastai.vision.all import set_seed
    from brefine.data import make_synthetic_folder, dls_from_folders, SYNTH_CODES, TensorBand
    path = make_synthetic_folder(tmp_path, n_train=8, n_valid=4, size=(64, 80))
    set_seed(0)
    dls = dls_from_folders(path, SYNTH_CODES, ignore_index=5, radius=2, bs=4, num_workers=0, max_zoom=2., p_zoom=1.)
    for dl in (dls.train, dls.valid):
        for xb, mb, bb in dl:
            assert isinstance(bb, TensorBand) and bb.dtype == torch.bool
            assert torch.equal(bb, batch_band(mb, 2, ignore_index=5))
            np.testing.assert_array_equal(bb.cpu().numpy(), near_boundary_mask(mb.cpu().numpy(), 2, ignore_index=5))

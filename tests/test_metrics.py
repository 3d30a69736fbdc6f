"""brefine.metrics against slow, loop-based reference implementations written from the definitions, plus properties
(perfect prediction, void invariance, absent classes, input forms) and input validation."""
import math, sys, time
import numpy as np
import cv2
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from hypothesis.extra.numpy import arrays

from brefine.metrics import confusion_matrix, mean_iou, boundary_iou, boundary_f1, trimap_iou, trimap_mask, mask_boundary
from brefine.evaluation import evaluate, Evaluation

torch.set_num_threads(1)
VOID = 255
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- slow references (pure Python loops, from the definitions)
def _prep(p, g, ignore):
    p, g = np.asarray(p, np.int64).copy(), np.asarray(g, np.int64).copy()
    if ignore is not None:
        ign = g == ignore
        p[ign] = -1; g[ign] = -1
    return p, g

def _pairs(preds, gts):
    preds, gts = np.asarray(preds), np.asarray(gts)
    return (list(zip(preds, gts)) if gts.ndim == 3 else [(preds, gts)])

def _nanmean(x):
    x = [v for v in x if not math.isnan(v)]
    return sum(x) / len(x) if x else float('nan')

def ref_cm(preds, gts, n, ignore=None):
    cm = [[0]*n for _ in range(n)]
    for p, g in _pairs(preds, gts):
        p, g = _prep(p, g, ignore)
        for y in range(g.shape[0]):
            for x in range(g.shape[1]):
                if g[y, x] >= 0: cm[g[y, x]][p[y, x]] += 1
    return np.array(cm)

def ref_miou_from_cm(cm, keep):
    out = []
    for c in range(len(cm)):
        tp = cm[c][c]; union = sum(cm[c]) + sum(row[c] for row in cm) - tp
        out.append(tp / union if union and keep[c] else float('nan'))
    return _nanmean(out), out

def ref_keep(n, ignore):
    return [not (ignore is not None and c == ignore) for c in range(n)]

def ref_band_cheng(m, d):
    "Inner band: mask pixels whose (2d+1) window holds a non-mask pixel or leaves the image (zero padding)."
    h, w = m.shape
    out = np.zeros_like(m, bool)
    for y in range(h):
        for x in range(w):
            if not m[y, x]: continue
            for dy in range(-d, d + 1):
                for dx in range(-d, d + 1):
                    yy, xx = y + dy, x + dx
                    if not (0 <= yy < h and 0 <= xx < w) or not m[yy, xx]: out[y, x] = True
    return out

def ref_boundary_iou(preds, gts, n, ratio, ignore=None):
    inter, union = [0]*n, [0]*n
    for p, g in _pairs(preds, gts):
        p, g = _prep(p, g, ignore)
        h, w = g.shape
        d = max(1, int(round(ratio * math.sqrt(h*h + w*w))))
        for c in range(n):
            bp, bg = ref_band_cheng(p == c, d), ref_band_cheng(g == c, d)
            inter[c] += int((bp & bg).sum()); union[c] += int((bp | bg).sum())
    keep = ref_keep(n, ignore)
    return _nanmean([inter[c] / union[c] if union[c] and keep[c] else float('nan') for c in range(n)])

def ref_contour(m):
    "Mask pixels with an 8-neighbour inside the image that is not in the mask (the frame is no contour)."
    h, w = m.shape
    pts = []
    for y in range(h):
        for x in range(w):
            if m[y, x] and any(0 <= y+dy < h and 0 <= x+dx < w and not m[y+dy, x+dx]
                               for dy in (-1, 0, 1) for dx in (-1, 0, 1)):
                pts.append((y, x))
    return pts

def ref_boundary_f1(preds, gts, n, tol, ignore=None):
    fs = []
    keep = ref_keep(n, ignore)
    for p, g in _pairs(preds, gts):
        p, g = _prep(p, g, ignore)
        h, w = g.shape
        t = tol if tol >= 1 else math.ceil(tol * math.sqrt(h*h + w*w))
        for c in range(n):
            pm, gm = p == c, g == c
            if not keep[c] or not (pm.any() or gm.any()): continue
            cp, cg = ref_contour(pm), ref_contour(gm)
            if not cp or not cg:
                fs.append(1.0 if (not cp and not cg and pm.any() and gm.any()) else 0.0); continue
            near = lambda a, B: any((a[0]-b[0])**2 + (a[1]-b[1])**2 <= t*t for b in B)
            prec = sum(near(a, cg) for a in cp) / len(cp)
            rec = sum(near(b, cp) for b in cg) / len(cg)
            fs.append(2*prec*rec / (prec + rec) if prec + rec else 0.0)
    return sum(fs) / len(fs) if fs else float('nan')

def ref_trimap_iou(preds, gts, n, width, ignore=None):
    cm = [[0]*n for _ in range(n)]
    for p, g in _pairs(preds, gts):
        p, g = _prep(p, g, ignore)
        h, w = g.shape
        edge = [(y, x) for y in range(h) for x in range(w)
                if any(0 <= y+dy < h and 0 <= x+dx < w and g[y+dy, x+dx] != g[y, x] for dy, dx in ((0, 1), (1, 0), (0, -1), (-1, 0)))]
        for y in range(h):
            for x in range(w):
                if g[y, x] >= 0 and any((y-a)**2 + (x-b)**2 <= width*width for a, b in edge): cm[g[y, x]][p[y, x]] += 1
    return ref_miou_from_cm(cm, ref_keep(n, ignore))[0]


def paper_mask_to_boundary(mask, dilation_ratio):
    "The band as written in the Boundary IoU reference code: pad by one zero pixel, erode by 3x3 `dilation` times, crop."
    h, w = mask.shape
    dilation = max(1, int(round(dilation_ratio * np.sqrt(h**2 + w**2))))
    padded = cv2.copyMakeBorder(mask, 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=0)
    eroded = cv2.erode(padded, np.ones((3, 3), np.uint8), iterations=dilation)[1:h+1, 1:w+1]
    return (mask - eroded).astype(bool)


# ---------------------------------------------------------------- strategies
@st.composite
def label_data(draw, max_side=10, max_b=3):
    "(preds, gts, n_classes, ignore) with batches (B,H,W); gts optionally with VOID pixels; blocky or noisy maps."
    n = draw(st.integers(1, 4))
    b, h, w = draw(st.integers(1, max_b)), draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    def lab():
        a = draw(arrays(np.uint8, (b, h, w), elements=st.integers(0, n - 1)))
        if draw(st.booleans()):                               # blocky: upsample a coarse map, closer to real labels
            small = a[:, ::3, ::3]
            a = np.ascontiguousarray(np.repeat(np.repeat(small, 3, 1), 3, 2)[:, :h, :w])
        return a
    g, p = lab(), lab()
    ignore = None
    if draw(st.booleans()):
        ignore = VOID
        g = g.copy(); g[draw(arrays(np.bool_, (b, h, w)))] = VOID
    return p, g, n, ignore


# ---------------------------------------------------------------- agreement with the references
@FAST
@given(label_data())
def test_confusion_and_miou_match_reference(data):
    p, g, n, ig = data
    np.testing.assert_array_equal(confusion_matrix(p, g, n, ignore_index=ig), ref_cm(p, g, n, ig))
    np.testing.assert_allclose(mean_iou(p, g, n, ignore_index=ig), ref_miou_from_cm(ref_cm(p, g, n, ig), ref_keep(n, ig))[0], equal_nan=True)

@FAST
@given(label_data(max_side=12), st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3]))
def test_boundary_iou_matches_loop_reference(data, ratio):
    p, g, n, ig = data
    np.testing.assert_allclose(boundary_iou(p, g, n, dilation_ratio=ratio, ignore_index=ig),
                               ref_boundary_iou(p, g, n, ratio, ig), equal_nan=True)

@FAST
@given(arrays(np.uint8, st.tuples(st.integers(1, 20), st.integers(1, 20)), elements=st.integers(0, 1)),
       st.sampled_from([0.0, 0.02, 0.08, 0.15, 0.3]))
def test_band_matches_boundary_iou_reference_code(mask, ratio):
    h, w = mask.shape
    d = max(1, int(round(ratio * math.hypot(h, w))))
    np.testing.assert_array_equal(mask_boundary(mask, d), paper_mask_to_boundary(mask, ratio))

@FAST
@given(label_data(max_side=9), st.sampled_from([0, 1, 1.5, 2, 3, 0.1, 0.3]))
def test_boundary_f1_matches_loop_reference(data, tol):
    p, g, n, ig = data
    np.testing.assert_allclose(boundary_f1(p, g, n, tolerance=tol, ignore_index=ig),
                               ref_boundary_f1(p, g, n, tol, ig), equal_nan=True)

@FAST
@given(label_data(max_side=9), st.sampled_from([0, 1, 2, 2.5, 4]))
def test_trimap_iou_matches_loop_reference(data, width):
    p, g, n, ig = data
    np.testing.assert_allclose(trimap_iou(p, g, n, width, ignore_index=ig), ref_trimap_iou(p, g, n, width, ig), equal_nan=True)

@FAST
@given(arrays(np.uint8, st.tuples(st.integers(2, 40), st.integers(2, 40)), elements=st.integers(0, 2)), st.integers(0, 9))
def test_trimap_distance_transform_equals_disk_dilation(g, width):
    "The exact distance transform used for the trimap gives the same band as dilating the edge map by a disk."
    e = trimap_mask(g, 0)
    yy, xx = np.ogrid[-width:width+1, -width:width+1]
    disk = (yy*yy + xx*xx <= width*width).astype(np.uint8)
    np.testing.assert_array_equal(trimap_mask(g, width), cv2.dilate(e.astype(np.uint8), disk) > 0)


def dt_trimap(g, width, ignore=None):
    "The trimap by its former definition: non-void pixels within Euclidean distance `width` of a 4-neighbour edge, by an exact distance transform."
    g = np.asarray(g, np.int64).copy()
    valid = np.ones(g.shape, bool) if ignore is None else g != ignore
    if ignore is not None: g[~valid] = -1
    e = ref_edges(g)
    if not e.any(): return np.zeros(g.shape, bool)
    return (cv2.distanceTransform((~e).view(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE) <= width) & valid

WIDTHS = [0, 0.3, 0.5, 1, 1.2, 1.5, 2, 2.5, 2.9, 3, 3.7, 5, 6.25, 8, 1e9]   # not float-close to a sqrt(k), where float32 distances decide

@FAST
@given(arrays(np.uint8, st.tuples(st.integers(1, 40), st.integers(1, 40)), elements=st.integers(0, 4)),
       st.lists(st.sampled_from(WIDTHS), min_size=1, max_size=4), st.sampled_from([None, 0, 4]))
def test_trimap_band_equals_distance_transform(g, widths, ig):
    "trimap_mask (the band of brefine.band: edges dilated by a disk) equals the distance-transform definition, fractional widths included."
    for w in widths: np.testing.assert_array_equal(trimap_mask(g, w, ignore_index=ig), dt_trimap(g, w, ig))

@FAST
@given(label_data(max_side=14), st.lists(st.sampled_from(WIDTHS + [math.sqrt(5), math.sqrt(13)]), min_size=1, max_size=5))
def test_trimap_iou_counts_the_trimap_mask(data, widths):
    "Several widths at once (one edge map, one count) score exactly the pixels of trimap_mask for each width (both: dy²+dx² <= width²)."
    p, g, n, ig = data
    many = trimap_iou(p, g, n, widths, ignore_index=ig, per_class=True)
    for w in widths:
        band = np.stack([trimap_mask(gi, w, ignore_index=ig) for gi in g])
        m, per = (mean_iou(p[band][None], g[band][None], n, ignore_index=ig, per_class=True) if band.any()
                  else (float('nan'), np.full(n, np.nan)))     # (1, N) maps of the band pixels of all images
        np.testing.assert_array_equal(many[w][1], per); np.testing.assert_array_equal(many[w][0], m)

def test_trimap_random_maps_fractional_widths():
    "Random label maps (noise and blocky), several radii including fractional ones: the band path equals the distance transform."
    rng = np.random.default_rng(0)
    for i in range(30):
        h, w = (int(v) for v in rng.integers(1, 60, 2))
        g = rng.integers(0, 1 + i % 6, (h, w))
        if i % 2: g = cv2.resize(g[:max(1, h//6), :max(1, w//6)].astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST)
        ig = None if i % 3 else int(g.flat[0])
        for width in (0, 0.5, 1, 1.5, 2, 2.5, math.sqrt(8), 3.3, 4, 7.5, 20):
            np.testing.assert_array_equal(trimap_mask(g, width, ignore_index=ig), dt_trimap(g, width, ig))

@FAST
@given(label_data(max_side=12), st.lists(st.sampled_from([0, 1, 1.5, 2, 3, 5, 8]), min_size=1, max_size=5))
def test_trimap_many_widths_equal_one_at_a_time(data, widths):
    p, g, n, ig = data
    many = trimap_iou(p, g, n, widths, ignore_index=ig, per_class=True)
    assert list(many) == list(dict.fromkeys(widths))
    for w in widths:
        m, per = trimap_iou(p, g, n, w, ignore_index=ig, per_class=True)
        np.testing.assert_array_equal(many[w][1], per)
        np.testing.assert_array_equal(many[w][0], m)


# ---------------------------------------------------------------- properties
ALL = lambda p, g, n, ig: [mean_iou(p, g, n, ignore_index=ig), boundary_iou(p, g, n, ignore_index=ig),
                           boundary_iou(p, g, n, dilation_ratio=0.1, ignore_index=ig),
                           boundary_f1(p, g, n, ignore_index=ig), boundary_f1(p, g, n, tolerance=0, ignore_index=ig),
                           *trimap_iou(p, g, n, (0, 1, 3), ignore_index=ig).values()]

@FAST
@given(label_data(max_side=16))
def test_perfect_prediction_scores_one(data):
    _, g, n, ig = data
    p = np.where(g == VOID, 0, g)
    vals = ALL(p, g, n, ig)
    if ig is None or (g != VOID).any(): assert all(v == 1.0 for v in vals if not math.isnan(v)), vals
    assert not math.isnan(vals[0]) or (ig is not None and (g == VOID).all())

@FAST
@given(label_data(max_side=16), st.data())
def test_prediction_on_void_changes_nothing(data, more):
    p, g, n, ig = data
    if ig is None: return
    p2 = p.copy(); void = g == VOID
    p2[void] = more.draw(arrays(np.uint8, p.shape, elements=st.integers(0, 255)))[void]   # anything, even junk labels
    np.testing.assert_array_equal(ALL(p2, g, n, ig), ALL(p, g, n, ig))

@FAST
@given(label_data(max_side=12), st.integers(1, 3))
def test_absent_classes_do_not_count(data, extra):
    p, g, n, ig = data
    np.testing.assert_array_equal(ALL(p, g, n + extra, ig), ALL(p, g, n, ig))

def test_single_batch_list_numpy_torch_agree():
    rng = np.random.default_rng(0)
    g = rng.integers(0, 3, (3, 6, 8)).repeat(4, 1).repeat(4, 2).astype(np.uint8)   # (3, 24, 32) blocky
    p = np.roll(g, 2, axis=2); g[:, :, :3] = VOID
    ref = ALL(p, g, 3, VOID)
    forms = [(list(p), list(g)), (torch.from_numpy(p), torch.from_numpy(g)), (torch.from_numpy(p).long()[:, None], g),
             ([torch.from_numpy(p[:1]), p[1:]], [g[0], torch.from_numpy(g[1:]).int()]), (p.astype(np.int32), g.astype(np.int64))]
    for pp, gg in forms: np.testing.assert_array_equal(ALL(pp, gg, 3, VOID), ref)
    assert boundary_f1((x for x in p), (x for x in g), 3, ignore_index=VOID) == ref[3]     # generators are read once
    single = ALL(p[0], g[0], 3, VOID)
    np.testing.assert_array_equal(ALL(p[:1], g[:1], 3, VOID), single)
    np.testing.assert_array_equal(ALL(torch.from_numpy(p[0]), g[0].tolist(), 3, VOID), single)   # nested lists work too

@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA')
def test_cuda_tensors():
    g = torch.randint(0, 3, (2, 20, 24))
    assert mean_iou(g.cuda(), g.cuda(), 3) == 1.0 and boundary_f1(g.cuda(), g, 3) == 1.0


# ---------------------------------------------------------------- hand-made cases
def square_pair(shift, size=40, lo=10, side=10):
    gt = np.zeros((size, size), np.uint8); gt[lo:lo+side, lo:lo+side] = 1
    pred = np.zeros_like(gt); pred[lo:lo+side, lo+shift:lo+side+shift] = 1
    return pred, gt

@pytest.mark.parametrize('k', [1, 2, 3, 4])
def test_shifted_square(k):
    pred, gt = square_pair(k)
    inter = 10 * (10 - k)
    np.testing.assert_allclose(mean_iou(pred, gt, 2, per_class=True)[1], [(1600 - (200 - inter)) / (1600 - inter), inter / (200 - inter)])
    # d = 1: the rings share the top and bottom rows from column 10+k on
    ring_i = 2 * (10 - k)
    np.testing.assert_allclose(boundary_iou(pred, gt, 2, dilation_ratio=0.001, per_class=True)[1][1], ring_i / (72 - ring_i))
    f = lambda s, t: 1.0 if t >= k else (2*s - 2*k + 4*t) / (4*(s - 1))     # see the notebook for the count
    for t in range(0, 7):
        _, per = boundary_f1(pred, gt, 2, tolerance=t, per_class=True)
        np.testing.assert_allclose(per, [f(12, t), f(10, t)])
        assert (per == 1).all() == (t >= k)

def test_boundary_f1_lower_below_shift_and_one_at_shift():
    pred, gt = square_pair(3)
    vals = [boundary_f1(pred, gt, 2, tolerance=t) for t in range(5)]
    assert vals[0] < vals[1] < vals[2] < vals[3] == vals[4] == 1.0

def test_tolerance_fraction_is_ceil_of_diagonal():
    pred, gt = square_pair(3, size=60)          # diagonal 84.85
    assert boundary_f1(pred, gt, 2, tolerance=0.03) == boundary_f1(pred, gt, 2, tolerance=3)   # ceil(2.55) = 3
    assert boundary_f1(pred, gt, 2, tolerance=0.02) == boundary_f1(pred, gt, 2, tolerance=2)   # ceil(1.70) = 2

def test_contour_free_masks():
    one, zero = np.ones((6, 6), int), np.zeros((6, 6), int)
    assert boundary_f1(one, one, 2) == 1.0
    assert boundary_f1(zero, one, 2) == 0.0        # class 1 everywhere in gt, nowhere in pred: F = 0, not 1
    assert boundary_iou(zero, one, 2) == 0.0

def test_ignore_index_inside_class_range_is_not_scored():
    g = np.array([[0, 0, 1, 1], [0, 0, 1, 1]]); p = np.array([[0, 1, 1, 1], [0, 0, 1, 1]])
    m, per = mean_iou(p, g, 2, ignore_index=0, per_class=True)     # class 0 is void: only class 1 is scored
    assert math.isnan(per[0]) and m == per[1] == 1.0


# ---------------------------------------------------------------- evaluate
def test_evaluate_table_matches_metrics(monkeypatch):
    rng = np.random.default_rng(1)
    g = rng.integers(0, 4, (4, 8, 10)).repeat(4, 1).repeat(4, 2).astype(np.uint8); g[:, :2] = VOID
    base, ref = np.roll(g, 3, 2), np.roll(g, 1, 2)
    base[g == VOID] = 0; ref[g == VOID] = 0
    ev = evaluate(g, base, ref, n_classes=4, ignore_index=VOID, trimap_widths=(1, 4), plot=False)
    assert isinstance(ev, Evaluation) and ev.figures == {}
    t = ev.table
    for col, p in (('base', base), ('refined', ref)):
        assert t.loc['mIoU', col] == mean_iou(p, g, 4, ignore_index=VOID)
        assert t.loc['boundary IoU', col] == boundary_iou(p, g, 4, ignore_index=VOID)
        assert t.loc['boundary F1 (3 px)', col] == boundary_f1(p, g, 4, ignore_index=VOID)
        assert t.loc['trimap IoU (4 px)', col] == trimap_iou(p, g, 4, 4, ignore_index=VOID)
        np.testing.assert_array_equal(ev.per_class[f'boundary F1 {col}'].values, boundary_f1(p, g, 4, ignore_index=VOID, per_class=True)[1])
    np.testing.assert_allclose(t['delta'], t['refined'] - t['base'])
    only = evaluate(g, base, n_classes=4, ignore_index=VOID, plot=False)
    assert list(only.table.columns) == ['base']
    monkeypatch.setitem(sys.modules, 'pandas', None)                 # without pandas: dicts of dicts
    d = evaluate(g, base, ref, n_classes=4, ignore_index=VOID, plot=False).table
    assert isinstance(d, dict) and d['base']['mIoU'] == t.loc['mIoU', 'base']

def test_evaluate_figures():
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    g = np.zeros((2, 20, 30), np.uint8); g[:, 5:15, 8:20] = 1
    ev = evaluate(g, np.roll(g, 2, 2), np.roll(g, 1, 2), class_names=['bg', 'box'])
    assert set(ev.figures) == {'boundary_f1', 'trimap', 'errors'}
    assert all(isinstance(f, plt.Figure) for f in ev.figures.values())
    assert list(ev.per_class.index) == ['bg', 'box']
    ev2 = evaluate(g, np.roll(g, 2, 2), n_classes=2, show_index=1)
    assert len(ev2.figures['errors'].axes) == 2
    plt.close('all')


# ---------------------------------------------------------------- validation
def test_bad_inputs_say_what_to_do():
    g = np.zeros((2, 5, 6), np.uint8)
    with pytest.raises(ValueError, match=r'preds\[1\] has shape \(5, 7\) but gts\[1\] has shape \(5, 6\)'):
        mean_iou([g[0], np.zeros((5, 7), int)], g, 2)
    with pytest.raises(ValueError, match='preds has shape'): boundary_f1(np.zeros((5, 7), int), g[0], 2)
    with pytest.raises(ValueError, match='holds 1 label maps but gts holds 2'): mean_iou(g[0], g, 2)
    with pytest.raises(TypeError, match='integer class indices'): boundary_iou(g.astype(np.float32), g, 2)
    with pytest.raises(ValueError, match=r'argmax\(1\)'): mean_iou(np.zeros((2, 3, 5, 6), int), g, 2)
    with pytest.raises(ValueError, match=r'gts\[0\] holds label 11.*pass ignore_index=11'): mean_iou(g, g + 11, 11)
    with pytest.raises(ValueError, match=r'gts\[0\] holds label -1'): mean_iou(g.astype(int), g.astype(int) - 1, 2)
    with pytest.raises(ValueError, match=r'preds\[0\] holds label 3 at a pixel that is not ignored'): trimap_iou(g + 3, g, 3, 2)
    with pytest.raises(ValueError, match='n_classes must be between 1 and 16384, got 0'): mean_iou(g, g, 0)
    with pytest.raises(ValueError, match='tolerance must be >= 0'): boundary_f1(g, g, 2, tolerance=-1)
    with pytest.raises(ValueError, match='dilation_ratio must be >= 0'): boundary_iou(g, g, 2, dilation_ratio=-0.1)
    with pytest.raises(ValueError, match='width must be >= 0'): trimap_iou(g, g, 2, -1)
    with pytest.raises(ValueError, match='empty'): mean_iou([], [], 2)
    with pytest.raises(ValueError, match='class_names has 3 names but n_classes=2'): evaluate(g, g, n_classes=2, class_names='abc', plot=False)
    assert math.isnan(mean_iou(g + 3, np.full_like(g, VOID), 2, ignore_index=VOID))   # all void: NaN, no error


# ---------------------------------------------------------------- settings of the wrong kind, and huge ones
@pytest.mark.parametrize('call, exc, msg', [
    (lambda g: boundary_f1(g, g, 2, tolerance=float('nan')), ValueError, 'tolerance is NaN'),
    (lambda g: boundary_f1(g, g, 2, tolerance=True), TypeError, 'tolerance must be a number'),
    (lambda g: boundary_f1(g, g, 2, tolerance='3'), TypeError, 'tolerance must be a number'),
    (lambda g: boundary_iou(g, g, 2, dilation_ratio=float('nan')), ValueError, 'dilation_ratio is NaN'),
    (lambda g: boundary_iou(g, g, 2, dilation_ratio=None), TypeError, 'dilation_ratio must be a number'),
    (lambda g: trimap_iou(g, g, 2, float('nan')), ValueError, 'width is NaN'),
    (lambda g: trimap_iou(g, g, 2, (1, 'x')), TypeError, 'width must be a number'),
    (lambda g: trimap_iou(g, g, 2, ()), ValueError, 'width is an empty sequence'),
    (lambda g: trimap_mask(g[0], -1), ValueError, 'width must be >= 0'),
    (lambda g: trimap_mask(g[0], float('nan')), ValueError, 'width is NaN'),
    (lambda g: trimap_mask(g[0], True), TypeError, 'width must be a number'),
    (lambda g: mask_boundary(g[0], 0), ValueError, 'width must be >= 1'),
    (lambda g: mask_boundary(g[0], 1.5), TypeError, 'width must be a whole number'),
    (lambda g: mask_boundary(g[0], True), TypeError, 'width must be a whole number'),
    (lambda g: mean_iou(g, g, 2.0), TypeError, 'n_classes must be a whole number'),
    (lambda g: mean_iou(g, g, True), TypeError, 'n_classes must be a whole number'),
    (lambda g: mean_iou(g, g, 10**6), ValueError, 'n_classes must be between 1 and'),
    (lambda g: mean_iou(g, g, 2, ignore_index=255.0), TypeError, 'ignore_index must be a whole number'),
    (lambda g: evaluate(g, g, n_classes=2, plot=False, trimap_widths=(1, -1)), ValueError, 'trimap_widths must be >= 0'),
    (lambda g: evaluate(g, g, n_classes=2, plot=False, tolerance=float('nan')), ValueError, 'tolerance is NaN'),
    (lambda g: evaluate(g, g, n_classes=2.5, plot=False), TypeError, 'n_classes must be a whole number'),
    (lambda g: evaluate(g, g[:1], n_classes=2, plot=False), ValueError, 'base holds 1 label maps but gts holds 2'),
    (lambda g: evaluate(g, g, g[:1], n_classes=2, plot=False), ValueError, 'refined holds 1 label maps but gts holds 2'),
    (lambda g: evaluate(g[:1], g, g, n_classes=2, plot=False), ValueError, 'base holds 2 label maps but gts holds 1'),
    (lambda g: evaluate(g, g, n_classes=2, show_index=2), ValueError, 'show_index must be between 0 and 1'),
    (lambda g: evaluate(g, [g[0], g[1][:, :-1]], n_classes=2, plot=False), ValueError, r'base\[1\] has shape \(5, 5\) but gts\[1\] has shape \(5, 6\)'),
])
def test_bad_settings_say_what_to_do(call, exc, msg):
    g = np.zeros((2, 5, 6), np.uint8); g[:, 1:4, 2:5] = 1
    with pytest.raises(exc, match=msg): call(g)

def test_numpy_numbers_are_settings_like_any_other():
    rng = np.random.default_rng(0)
    g = np.repeat(np.repeat(rng.integers(0, 3, (2, 4, 5)), 4, 1), 4, 2).astype(np.uint8); g[:, :2] = VOID
    p = np.roll(g, 1, 2); p[p == VOID] = 0
    kw, nkw = dict(n_classes=3, ignore_index=VOID), dict(n_classes=np.int64(3), ignore_index=np.int64(VOID))
    assert mean_iou(p, g, **nkw) == mean_iou(p, g, **kw)
    assert boundary_f1(p, g, tolerance=np.float32(2), **nkw) == boundary_f1(p, g, tolerance=2, **kw)
    assert boundary_iou(p, g, dilation_ratio=np.float64(0.05), **nkw) == boundary_iou(p, g, dilation_ratio=0.05, **kw)
    assert trimap_iou(p, g, width=np.int32(2), **nkw) == trimap_iou(p, g, width=2, **kw)
    np.testing.assert_array_equal(trimap_mask(g[0], np.float32(1.5), np.uint8(VOID)), trimap_mask(g[0], 1.5, VOID))
    np.testing.assert_array_equal(mask_boundary(g[0] == 1, np.int64(2)), mask_boundary(g[0] == 1, 2))

@FAST
@given(label_data(max_side=9), st.sampled_from([1e3, 1e9, float('inf')]))
def test_tolerance_beyond_the_diagonal_matches_everything(data, tol):
    "No contour pixel is farther than the diagonal from another: the reference at the diagonal, at no extra cost."
    p, g, n, ig = data
    diag = math.ceil(math.hypot(g.shape[-2] - 1, g.shape[-1] - 1))
    np.testing.assert_allclose(boundary_f1(p, g, n, tolerance=tol, ignore_index=ig), ref_boundary_f1(p, g, n, diag, ig), equal_nan=True)

@FAST
@given(label_data(max_side=12), st.sampled_from([2.0, 1e3, 1e9, float('inf')]))
def test_dilation_ratio_beyond_the_image_is_the_whole_mask(data, ratio):
    "A band wider than the image is the whole mask, so Boundary IoU becomes mIoU."
    p, g, n, ig = data
    np.testing.assert_allclose(boundary_iou(p, g, n, dilation_ratio=ratio, ignore_index=ig), mean_iou(p, g, n, ignore_index=ig), equal_nan=True)

@FAST
@given(arrays(np.uint8, st.tuples(st.integers(1, 15), st.integers(1, 15)), elements=st.integers(0, 1)), st.booleans())
def test_mask_boundary_wider_than_the_mask(mask, border):
    h, w = mask.shape
    kw = dict(borderType=cv2.BORDER_CONSTANT, borderValue=0) if border else {}
    eroded = cv2.erode(mask, np.ones((3, 3), np.uint8), iterations=max(h, w), **kw)
    np.testing.assert_array_equal(mask_boundary(mask, 10**9, border), mask.astype(bool) & ~eroded.astype(bool))

def test_huge_settings_are_fast():
    "Settings that would mean disks or squares of 10**18 entries cost no more than the whole image."
    g = np.zeros((2, 300, 400), np.uint8); g[:, 100:200, 150:260] = 1
    p = np.roll(g, 3, 2)
    t = time.perf_counter()
    assert boundary_f1(p, g, 2, tolerance=1e9) == 1.0
    assert boundary_iou(p, g, 2, dilation_ratio=1e9) == mean_iou(p, g, 2)
    assert trimap_iou(p, g, 2, 1e9) == mean_iou(p, g, 2)
    assert mask_boundary(g[0], 10**9).sum() == g[0].sum()
    evaluate(g, p, p, n_classes=2, tolerance=1e9, dilation_ratio=1e9, trimap_widths=(1e9,), plot=False)
    assert time.perf_counter() - t < 10

@FAST
@given(arrays(np.int64, st.tuples(st.integers(1, 12), st.integers(1, 12)), elements=st.integers(-3, 3)))
def test_metric_edges_are_the_band_edges(g):
    "The metrics' edge pixels (trimap) are those of brefine.band, and of the definition."
    from brefine.band import _edges_t, near_boundary_mask
    np.testing.assert_array_equal(_edges_t(g), ref_edges(g))
    np.testing.assert_array_equal(_edges_t(g[::-1, ::-1].astype(np.int32)), ref_edges(g[::-1, ::-1]))
    np.testing.assert_array_equal(trimap_mask(g, 0), near_boundary_mask(g, 0))

def ref_edges(g):
    h, w = g.shape
    return np.array([[any(0 <= y+dy < h and 0 <= x+dx < w and g[y+dy, x+dx] != g[y, x] for dy, dx in ((0, 1), (1, 0), (0, -1), (-1, 0)))
                      for x in range(w)] for y in range(h)], bool).reshape(h, w)

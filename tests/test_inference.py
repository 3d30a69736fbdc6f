"""Property tests of refine_predict (hypothesis): random label maps, scores and embedders."""
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from hypothesis import given, settings, strategies as st, HealthCheck
from brefine import refine_predict, Prototypes, batch_band, extract_prototypes

torch.set_num_threads(1)
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def _case(seed, M, H, W, stride, C=6):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    emb = nn.Conv2d(3, C, 3, stride=stride, padding=1).eval()
    imgs = torch.randn(2, 3, H, W, generator=g)
    logits = torch.randn(2, M, max(1, H // 4), max(1, W // 4), generator=g) * 3
    counts = torch.randint(0, 3, (M,), generator=g); counts[:2] = 1
    protos = Prototypes(torch.randn(M, C, generator=g), counts)
    return emb, imgs, logits, protos

cases = st.tuples(st.integers(0, 10_000), st.integers(2, 7), st.integers(8, 40), st.integers(8, 40), st.sampled_from([1, 2, 4]))

@settings(**SETTINGS)
@given(cases, st.integers(1, 7), st.integers(0, 4), st.sampled_from([None, 0.8, 0.5]), st.sampled_from([0., 0.3, 3.]),
       st.sampled_from([0, 3, 5, 9]), st.sampled_from([None, 10., 40.]))
def test_band_only_and_topn(case, top_n, radius, tau, alpha, vote, grey):
    seed, M, H, W, stride = case
    top_n, grey = min(top_n, M), grey if vote else None
    emb, imgs, logits, protos = _case(seed, M, H, W, stride)
    out = refine_predict(imgs, logits, emb, protos, top_n=top_n, radius=radius, tau=tau, alpha=alpha, vote=vote, grey=grey)
    probs = F.interpolate(logits.softmax(1), size=(H, W), mode='bilinear', align_corners=False)
    base = probs.argmax(1)
    band = batch_band(base, radius)
    assert out.dtype == torch.int64 and out.shape == (2, H, W)
    assert torch.equal(out[~band], base[~band])                       # only band pixels change
    assert (probs.topk(top_n, 1).indices == out[:, None]).any(1).all()  # always one of the top-N
    changed = out != base
    assert protos.present[out[changed]].all()                         # missing prototypes never win
    if tau is not None: assert not changed[probs.max(1).values >= tau].any()   # the gate keeps confident pixels

@settings(**SETTINGS)
@given(cases)
def test_heavy_base_weight_is_the_base_answer(case):
    seed, M, H, W, stride = case
    emb, imgs, logits, protos = _case(seed, M, H, W, stride)
    probs = F.interpolate(logits.softmax(1), size=(H, W), mode='bilinear', align_corners=False)
    top2 = probs.topk(2, 1).values
    clear = (top2[:, 0] - top2[:, 1]) > 1e-3                          # no near-tie between the two best classes
    base = probs.argmax(1)
    clear &= protos.present[base]                                     # a class without a prototype never wins, whatever alpha
    out = refine_predict(imgs, logits, emb, protos, top_n=min(3, M), radius=3, alpha=1e6)
    assert torch.equal(out[clear], base[clear])

@settings(**SETTINGS)
@given(cases)
def test_probs_logits_numpy_batch_agree(case):
    seed, M, H, W, stride = case
    emb, imgs, logits, protos = _case(seed, M, H, W, stride)
    a = refine_predict(imgs, logits, emb, protos, top_n=3 if M >= 3 else M)
    b = refine_predict(imgs, logits.softmax(1).numpy(), emb, protos, top_n=3 if M >= 3 else M)
    c = torch.stack([refine_predict(imgs[i], logits[i], emb, protos, top_n=3 if M >= 3 else M) for i in range(2)])
    d = refine_predict(imgs.flip(0), logits.flip(0), emb, protos, top_n=3 if M >= 3 else M).flip(0)   # batch composition
    assert isinstance(b, np.ndarray) and b.dtype == np.int64
    assert torch.equal(a, torch.from_numpy(b)) and torch.equal(a, c) and torch.equal(a, d)

def test_deterministic():
    emb, imgs, logits, protos = _case(3, 5, 30, 33, 4)
    assert torch.equal(refine_predict(imgs, logits, emb, protos), refine_predict(imgs, logits, emb, protos))

def test_shifted_boundary_is_restored_with_colour_embedder():
    "Colour-coded classes, an embedder that returns pixel colours: a base boundary shifted by k px is put back."
    class Colour(nn.Module):
        def forward(self, x): return x
    H, W = 48, 64
    colours = torch.tensor([[1., 0, 0], [0, 1., 0], [0, 0, 1.], [1., 1., 0]])
    gt = torch.zeros(H, W, dtype=torch.long); gt[:, 20:] = 1; gt[12:36, 36:56] = 2; gt[30:, :12] = 3
    img = colours[gt].permute(2, 0, 1)
    protos = extract_prototypes(Colour(), [(img[None], gt[None])], 4, train_radius=3, progress=False)
    for k in (1, 2, 3):
        shifted = torch.roll(gt, shifts=(k, k), dims=(0, 1))
        probs = F.one_hot(shifted, 4).permute(2, 0, 1).float() * 0.5 + 0.125
        out = refine_predict(img, probs, Colour(), protos, top_n=4, radius=2 * k)
        inner = (slice(k + 1, H - k - 1), slice(k + 1, W - k - 1))     # roll wraps around the border
        assert torch.equal(out[inner], gt[inner]), k

@settings(**SETTINGS)
@given(cases, st.sampled_from([3, 5, 9, 11]), st.sampled_from([1., 10., 1e6]))
def test_grey_vote_batch_agrees(case, vote, grey):
    "The vote with a grey-level weight gives each image of a batch the answer it gets alone."
    seed, M, H, W, stride = case
    emb, imgs, logits, protos = _case(seed, M, H, W, stride)
    kw = dict(top_n=min(3, M), radius=3, vote=vote, grey=grey)
    a = refine_predict(imgs, logits, emb, protos, **kw)
    assert torch.equal(a, torch.stack([refine_predict(imgs[i], logits[i], emb, protos, **kw) for i in range(2)]))


def test_pil_and_read_only_images_warn_nothing():
    "A PIL image, or a read-only numpy view of one, is only read: no PyTorch warning about non-writable arrays (in a fresh process, where it would show once)."
    import subprocess, sys
    code = ("import warnings, numpy as np, PIL.Image\n"
            "from brefine.inputs import prepare_image\n"
            "warnings.simplefilter('error', UserWarning)\n"
            "im = PIL.Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3))\n"
            "a = np.asarray(im); a.setflags(write=False)\n"
            "for x in (im, a): assert prepare_image(x)[0].shape == (1, 3, 8, 8)\n")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]

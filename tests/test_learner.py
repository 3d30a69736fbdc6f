"Integration and property tests for brefine.learner (EmbeddingNet, band features, triplets, refine_learner)."
import importlib.util, urllib.error, warnings
from pathlib import Path
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st, HealthCheck
from fastai.callback.core import CancelBatchException
from fastai.learner import load_learner
from fastai.torch_core import set_seed
from brefine.backbones import TORCHVISION_BACKBONES
from brefine.embedder import EmbeddingNet
from brefine.triplets import sample_features, band_features, triplet_losses, sample_triplets, TripletLoss, TripletCallback
from brefine.learner import refine_learner, embedding_splitter

torch.set_num_threads(1)
WEIGHTS = Path(__file__).resolve().parents[2]/'shared'/'weights'/'mobilenet_v2-b0353104.pth'

# --- EmbeddingNet ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name', TORCHVISION_BACKBONES)
@pytest.mark.parametrize('os_', [16, 8])
def test_backbone_shapes(name, os_):
    net = EmbeddingNet(name, emb_dim=8, pretrained=False, output_stride=os_).eval()
    with torch.no_grad(): e = net(torch.randn(2, 3, 37, 50))
    assert e.shape == (2, 8, 10, 13)
    assert torch.allclose(e.norm(dim=1), torch.ones(()), atol=1e-5)

def test_train_mode_and_unnormalized():
    net = EmbeddingNet('mobilenet_v3_large', emb_dim=4, pretrained=False, normalize=False, aspp_dim=16, decoder_dim=16)
    e = net(torch.randn(2, 3, 32, 32))
    assert e.shape == (2, 4, 8, 8) and not torch.allclose(e.norm(dim=1), torch.ones(()))
    e.sum().backward()
    assert all(p.grad is not None for p in net.parameters() if p.requires_grad)

def test_config_rebuilds():
    net = EmbeddingNet('mobilenet_v2', emb_dim=12, pretrained=False, output_stride=8, aspp_dim=32, decoder_dim=24).eval()
    net2 = EmbeddingNet(**net.config).eval()
    net2.load_state_dict(net.state_dict())
    x = torch.randn(2, 3, 40, 40)
    with torch.no_grad(): assert torch.allclose(net(x), net2(x))
    assert net.config['pretrained'] is False and net.emb_dim == 12 and net.stride == 4

def test_bad_arguments():
    with pytest.raises(ValueError, match='8 or 16'): EmbeddingNet('resnet18', pretrained=False, output_stride=4)
    with pytest.raises(ValueError, match='emb_dim'): EmbeddingNet('resnet18', emb_dim=0, pretrained=False)
    with pytest.raises(TypeError, match='model name'): EmbeddingNet(torch.nn.Conv2d(3, 3, 1))
    with pytest.raises(ValueError, match='batch axis'): EmbeddingNet('resnet18', pretrained=False)(torch.randn(3, 32, 32))

def test_timm_missing_or_present():
    if importlib.util.find_spec('timm') is None:
        with pytest.raises(ImportError, match='pip install timm'): EmbeddingNet('xception65', pretrained=False)
    else:
        with pytest.raises(ValueError, match='Unknown backbone'): EmbeddingNet('no_such_net_xyz', pretrained=False)

@pytest.fixture
def hub_dir(tmp_path):
    old = torch.hub.get_dir(); torch.hub.set_dir(str(tmp_path))
    yield tmp_path
    torch.hub.set_dir(old)

def test_pretrained_missing_file_error(hub_dir, monkeypatch):
    def offline(*a, **k): raise urllib.error.URLError('no network')
    monkeypatch.setattr(torch.hub, 'load_state_dict_from_url', offline)
    with pytest.raises(RuntimeError, match='pretrained=False') as e: EmbeddingNet('resnet18', pretrained=True)
    assert 'resnet18-f37072fd.pth' in str(e.value) and str(hub_dir/'checkpoints') in str(e.value)

@pytest.mark.skipif(not WEIGHTS.exists(), reason='offline MobileNetV2 weights not available')
def test_pretrained_from_cache(hub_dir):
    (hub_dir/'checkpoints').mkdir()
    (hub_dir/'checkpoints'/WEIGHTS.name).symlink_to(WEIGHTS)
    net = EmbeddingNet('mobilenet_v2', pretrained=True)
    sd = torch.load(WEIGHTS, weights_only=True)
    assert torch.equal(net.backbone['0'][0].weight, sd['features.0.0.weight'])

def test_splitter_covers_all_params():
    net = EmbeddingNet('resnet18', pretrained=False)
    groups = embedding_splitter(net)
    assert len(groups) == 2 and sum(map(len, groups)) == len(list(net.parameters()))

# --- band features --------------------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(0, 3), st.integers(0, 3), st.integers(0, 10**6))
def test_sample_features_equals_interpolate(B, h, w, dh, dw, seed):
    g = torch.Generator().manual_seed(seed)
    H, W = 4 * h - dh if 4 * h - dh > 0 else 1, 4 * w - dw if 4 * w - dw > 0 else 1   # sizes not multiples of 4 too
    emb = torch.randn(B, 5, h, w, generator=g, dtype=torch.float64)
    n = 60
    b, y, x = torch.randint(B, (n,), generator=g), torch.randint(H, (n,), generator=g), torch.randint(W, (n,), generator=g)
    corners = torch.tensor([(i, yy, xx) for i in range(B) for yy in (0, H - 1) for xx in (0, W - 1)]).T
    b, y, x = torch.cat([b, corners[0]]), torch.cat([y, corners[1]]), torch.cat([x, corners[2]])
    ref = F.interpolate(emb, (H, W), mode='bilinear', align_corners=False)[b, :, y, x]
    assert torch.allclose(sample_features(emb, b, y, x, (H, W)), ref, atol=1e-10)

def test_band_features_and_grad():
    emb = torch.randn(2, 3, 6, 7, requires_grad=True)
    band = torch.rand(2, 23, 27) < 0.3
    feats, b, y, x = band_features(emb, band)
    ref = F.interpolate(emb, (23, 27), mode='bilinear', align_corners=False)[b, :, y, x]
    assert torch.allclose(feats, ref, atol=1e-5)
    g1, = torch.autograd.grad(feats.pow(2).sum(), emb)
    g2, = torch.autograd.grad(ref.pow(2).sum(), emb)
    assert torch.allclose(g1, g2, atol=1e-4)
    f1, *_ = band_features(emb[:1], band[:1])                       # one-image fast path
    assert torch.allclose(f1, ref[b == 0], atol=1e-5)
    assert torch.allclose(band_features(emb, band, normalize=True)[0].norm(dim=1), torch.ones(()), atol=1e-5)
    with pytest.raises(ValueError, match='batch index'): sample_features(emb, torch.tensor([2]), y[:1], x[:1], (23, 27))

# --- triplets -------------------------------------------------------------------------------------------------------

def test_triplet_loss_hand_made():
    a, p = torch.tensor([[0., 0.], [0., 0.]]), torch.tensor([[0.1, 0.], [0.1, 0.]])
    n = torch.tensor([[0., 1.], [0., 0.3]])
    assert torch.allclose(triplet_losses(a, p, n, 0.5), torch.tensor([0., 0.3]))
    assert torch.allclose(triplet_losses(a, p, n, 0.1), torch.tensor([0., 0.]))

def _two_class(B=2, H=32, W=48):
    mask = torch.zeros(B, H, W, dtype=torch.long); mask[:, :, W // 2:] = 1
    band = torch.zeros_like(mask, dtype=torch.bool); band[:, :, W // 2 - 4:W // 2 + 4] = True
    return mask, band

def test_triplet_loss_zero_when_satisfied_positive_otherwise():
    mask, band = _two_class()
    good = torch.zeros(2, 2, 8, 12); good[:, 0, :, :6] = 1; good[:, 1, :, 6:] = 1
    band_ok = torch.zeros_like(band); band_ok[:, :, 18:22] = True; band_ok[:, :, 26:30] = True
    lf = TripletLoss(margin=0.5)
    assert lf(good, mask, band_ok).item() == 0 and lf.last['active'] == 0
    assert TripletLoss(margin=1.5)(good, mask, band_ok).item() > 0             # margin beyond sqrt(2): violated
    rnd = torch.randn(2, 2, 8, 12)
    assert lf(rnd, mask, band).item() > 0 and 0 < lf.last['active'] <= lf.last['n']

def test_active_fraction_matches_recomputation():
    mask, band = _two_class()
    emb = torch.randn(2, 4, 8, 12)
    lf = TripletLoss(margin=0.4, n_triplets=300, distance='cosine', negatives='uniform')
    set_seed(7); loss = lf(emb, mask, band)
    set_seed(7); tb, ty, tx = sample_triplets(mask, band, 300, 'uniform')
    f = F.interpolate(emb, (32, 48), mode='bilinear', align_corners=False)
    fa, fp, fn = (f[tb[i], :, ty[i], tx[i]] for i in range(3))
    d_pos, d_neg = 1 - F.cosine_similarity(fa, fp), 1 - F.cosine_similarity(fa, fn)
    assert int(lf.last['active']) == int((d_neg - d_pos < 0.4).sum())
    assert torch.allclose(loss, F.relu(d_pos - d_neg + 0.4).mean(), atol=1e-5)

@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(['nearby', 'uniform']))
def test_void_never_sampled_and_labels_right(seed, negatives):
    g = torch.Generator().manual_seed(seed)
    mask = torch.randint(0, 4, (2, 6, 8), generator=g).repeat_interleave(4, 1).repeat_interleave(4, 2)
    mask[torch.rand(mask.shape, generator=g) < 0.2] = 11                     # void specks
    band = torch.rand(mask.shape, generator=g) < 0.5
    t = sample_triplets(mask, band, 200, negatives, ignore_index=11)
    usable = torch.unique(mask[band & (mask != 11)])
    if len(usable) < 2: assert t is None; return
    b, y, x = t
    lab = mask[b, y, x]
    assert (lab != 11).all() and band[b, y, x].all()
    assert (lab[0] == lab[1]).all() and (lab[0] != lab[2]).all()

def test_single_class_batch_is_skipped_and_counted():
    mask, band = _two_class()
    cb = TripletCallback()
    class FakeLearn:
        training, yb = True, (torch.zeros_like(mask), band)
    cb.learn = FakeLearn()
    with pytest.raises(CancelBatchException): cb.before_batch()
    assert cb.n_skipped == 1
    cb.learn.yb = (torch.where(mask == 1, 255, mask), band)                  # one class + void
    cb.loss_func.ignore_index = 255
    with pytest.raises(CancelBatchException): cb.before_batch()
    cb.learn.yb = (mask, band)
    cb.before_batch()                                                        # two classes: trains
    assert cb.n_skipped == 2
    cb.learn.training = False; cb.learn.yb = (torch.zeros_like(mask), band)
    cb.before_batch()                                                        # validation batches are never skipped

# --- the learner ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def dls(tmp_path_factory):
    from brefine.data import make_synthetic_folder, dls_from_folders, SYNTH_CODES
    path = make_synthetic_folder(tmp_path_factory.mktemp('synth'), n_train=8, n_valid=4, seed=0, size=(64, 80))
    return dls_from_folders(path, SYNTH_CODES, bs=4, num_workers=0)

def test_learner_round_trip(dls, tmp_path):
    set_seed(0)
    learn = refine_learner(dls, backbone='resnet18', emb_dim=8, pretrained=False, n_triplets=256, path=tmp_path,
                           net_kwargs=dict(aspp_dim=16, decoder_dim=16))
    assert isinstance(learn.loss_func, TripletLoss) and learn.loss_func is learn.triplet.loss_func
    with learn.no_bar(), learn.no_logging():
        learn.fit_one_cycle(1, 1e-3)
        val = learn.validate()
        assert len(val) == 2 and 0 <= val[1] <= 1                            # valid loss, active triplets
        preds, (mask, band), losses = learn.get_preds(with_loss=True)
        assert preds.shape == (4, 8, 16, 20) and mask.shape == band.shape == (4, 64, 80) and losses.shape == (4,)
        learn.save('m')
        learn2 = refine_learner(dls, backbone='resnet18', emb_dim=8, pretrained=False, path=tmp_path,
                                net_kwargs=dict(aspp_dim=16, decoder_dim=16)).load('m')
        x = dls.valid.one_batch()[0]
        learn.model.eval(); learn2.model.to(x.device).eval()                # fastai moves a model to the batches' device in fit
        with torch.no_grad(): assert torch.allclose(learn.model(x), learn2.model(x))
        learn.export('l.pkl')
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            learn3 = load_learner(tmp_path/'l.pkl')
        tol = 1e-6 if x.device.type == 'cpu' else 1e-2                      # a GPU's TF32 convolutions round at ~1e-3
        with torch.no_grad(): assert torch.allclose(learn3.model.eval()(x.cpu()), learn.model(x).cpu(), atol=tol)
        assert learn3.loss_func is learn3.triplet.loss_func
        res = learn2.lr_find(num_it=6, show_plot=False)
        assert res.valley > 0

def test_skipped_batches_in_a_real_fit(dls, tmp_path):
    from fastai.callback.core import Callback
    class OneClassFirst(Callback):
        "Turn the first training batch of each epoch into a single-class batch."
        order = -8
        def before_batch(self):
            if self.training and self.iter == 0: self.learn.yb = (torch.zeros_like(self.yb[0]), self.yb[1])
    learn = refine_learner(dls, backbone='resnet18', emb_dim=8, pretrained=False, n_triplets=128, path=tmp_path,
                           net_kwargs=dict(aspp_dim=16, decoder_dim=16), cbs=OneClassFirst())
    with learn.no_bar(), learn.no_logging():
        learn.fit(1, 1e-3)
        assert learn.triplet.n_skipped == 1 and len(learn.recorder.losses) == len(dls.train) - 1
        learn.lr_find(num_it=6, show_plot=False, suggest_funcs=None)         # first batch of each epoch skipped: still fine
        assert len(learn.recorder.lrs) == 6 - 3 and learn.triplet.n_skipped == 1 + 3

def test_refine_learner_needs_one_input():
    class D: n_inp = 2
    with pytest.raises(ValueError, match='n_inp'): refine_learner(D(), backbone='resnet18', pretrained=False)

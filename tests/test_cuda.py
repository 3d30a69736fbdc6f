"""brefine on a CUDA GPU: the same answers as on the CPU, training and calibration on the GPU, bundles moved between them.
Runs where CUDA is present and is skipped elsewhere."""
import copy
import numpy as np, pytest, torch, torch.nn.functional as F
from fastai.torch_core import set_seed
from brefine import (refine_predict, relabel, grey_levels, calibrate, Prototypes, Refiner, extract_prototypes, refine_learner,
                     EmbeddingNet, DeepLabV3MobileNetV2, SharedEmbeddingNet, make_synthetic_folder, dls_from_folders, SYNTH_CODES)
from brefine.calibration import _timed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA')
DEV = 'cuda'                         # the device compared with the CPU

@pytest.fixture(autouse=True)
def exact_float32():
    "No TF32 in convolutions and matrix products: float32 on the GPU then differs from the CPU only in rounding."
    if not torch.cuda.is_available(): yield; return
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old

def _scene(seed=0, B=2, M=6, C=8, H=96, W=128):
    "Images in [0, 1], smooth base logits (B,M,H/8,W/8) with real regions and boundaries, and random prototypes."
    g = torch.Generator().manual_seed(seed)
    imgs = torch.rand(B, 3, H, W, generator=g)
    logits = torch.randn(B, M, H // 8, W // 8, generator=g) * 3
    return imgs, logits, Prototypes(F.normalize(torch.randn(M, C, generator=g), dim=1), torch.ones(M, dtype=torch.long))

def _agree(a, b) -> float: return (a.cpu() == b.cpu()).float().mean().item()

SETTINGS = [dict(top_n=3, radius=6), dict(top_n=2, radius=10, tau=0.7, alpha=0.1),
            dict(top_n=3, radius=18, alpha=0.1, vote=11, grey=10.), dict(top_n=2, radius=4, vote=5)]

def test_timed_waits_for_the_gpu():
    "A calibration's time budget compares real times: `_timed` reads the clock after the GPU has run the work, not after its launch."
    a = (torch.randn(4096, 4096, device=DEV) / 64)
    f = lambda a: [a @ a for _ in range(20)][-1]
    f(a); torch.cuda.synchronize()                                   # warm-up: cuBLAS set up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); f(a); end.record(); torch.cuda.synchronize()
    gpu_s = start.elapsed_time(end) / 1e3
    _, s = _timed(f, a)
    assert s >= 0.8 * gpu_s, (s, gpu_s)

@pytest.mark.parametrize('s', SETTINGS)
def test_relabel_on_the_gpu_is_the_cpu_answer(s):
    "The band pass on the same embeddings and scores: the same labels on the GPU, every setting kind (gate, base weight, votes)."
    for seed in range(3):
        imgs, logits, protos = _scene(seed)
        emb = F.normalize(torch.randn(2, 8, 24, 32, generator=torch.Generator().manual_seed(seed)), dim=1)
        probs = F.interpolate(logits.softmax(1), size=(96, 128), mode='bilinear', align_corners=False)
        lv = grey_levels(imgs) if s.get('grey') else None
        cpu = relabel(emb, probs, protos, levels=lv, **s)
        gpu = relabel(emb.to(DEV), probs.to(DEV), protos, levels=None if lv is None else lv.to(DEV), **s)
        assert gpu.device.type == 'cuda' and gpu.dtype == torch.int64
        assert torch.equal(gpu.cpu(), cpu), (seed, _agree(gpu, cpu))
        assert not torch.equal(cpu, probs.argmax(1))                 # the pass changed something: the comparison means something

def test_grey_levels_on_the_gpu():
    imgs = torch.rand(2, 3, 64, 80)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    x = (imgs - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    assert torch.equal(grey_levels(x.to(DEV), mean, std).cpu(), grey_levels(x, mean, std))

@pytest.mark.parametrize('s', SETTINGS)
def test_refine_predict_with_an_embedder_on_the_gpu(s):
    "An `EmbeddingNet` moved to the GPU: outputs on the GPU, and the CPU's labels up to float rounding at near-ties."
    torch.manual_seed(0)
    net = EmbeddingNet('resnet18', emb_dim=8, pretrained=False, aspp_dim=16, decoder_dim=16).eval()
    imgs, logits, protos = _scene()
    cpu = refine_predict(imgs, logits, net, protos, **s)
    gpu = refine_predict(imgs, logits, net.to(DEV), protos, **s)            # scores on the CPU, embedder on the GPU
    assert gpu.device.type == 'cuda' and _agree(gpu, cpu) > 0.999
    one = refine_predict(imgs[0], logits[0].numpy(), net, protos, **s)      # numpy scores in, numpy labels out
    assert isinstance(one, np.ndarray) and (one == gpu[0].cpu().numpy()).mean() > 0.999

def _shared_pair(M=6):
    "A tiny base model with a `SharedEmbeddingNet` on it, and a CPU copy of the base model."
    torch.manual_seed(0)
    base = DeepLabV3MobileNetV2(M, pretrained=False).eval()
    return base, SharedEmbeddingNet(base, emb_dim=8, aspp_dim=16, low_level_dim=8, decoder_dim=16).eval(), copy.deepcopy(base)

def test_shared_embedder_on_the_gpu(tmp_path):
    "The embedder that reads the base model's features moves the base model with it; a bundle saved on the GPU loads on either."
    base, shared, base_cpu = _shared_pair()
    imgs, _, protos = _scene()
    s = dict(top_n=3, radius=10, alpha=0.1, vote=5, grey=10.)
    cpu, sig = refine_predict(imgs, base, shared, protos, **s), shared.weights_signature()
    shared.to(DEV)
    assert next(base.parameters()).device.type == 'cuda'
    gpu = refine_predict(imgs, base, shared, protos, **s)
    assert gpu.device.type == 'cuda' and _agree(gpu, cpu) > 0.999
    assert shared.weights_signature() == sig                             # the same weights, wherever they are
    Refiner(shared, protos, **s).save(tmp_path/'b')
    on_cpu = Refiner.load(tmp_path/'b', base=base_cpu)
    assert next(on_cpu.embedder.head.parameters()).device.type == 'cpu' and torch.equal(on_cpu(imgs, base_cpu), cpu)
    on_gpu = Refiner.load(tmp_path/'b', device=DEV, base=base)
    assert _agree(on_gpu(imgs, base), gpu) > 0.999

def test_calibrate_on_the_gpu():
    "`calibrate` with the embedder and the base model on the GPU scores every setting as on the CPU and times them."
    base, shared, base_cpu = _shared_pair()
    imgs, _, protos = _scene(1, B=3)
    with torch.no_grad(): gts = [base(x[None]).argmax(1)[0].roll(2, 1) for x in imgs]   # the base answer, shifted: room to gain
    grid = dict(radii=(4, 8), top_ns=(2, 3), taus=(None,), alphas=(0., 0.1), votes=(0, 5), greys=(None, 10.), progress=False)
    cpu = calibrate(shared, protos, list(imgs), base, gts, **grid)
    gpu = calibrate(shared.to(DEV), protos, list(imgs), base, gts, **grid)
    assert len(gpu['table']) == len(cpu['table']) > 1
    for a, b in zip(cpu['table'], gpu['table']):
        assert abs(a['miou'] - b['miou']) < 0.01 and abs(a['boundary_f1'] - b['boundary_f1']) < 0.01
        assert b['seconds'] > 0
    assert gpu['miou'] == pytest.approx(cpu['miou'], abs=0.01)

@pytest.fixture(scope='module')
def dls(tmp_path_factory):
    path = make_synthetic_folder(tmp_path_factory.mktemp('synth'), n_train=8, n_valid=4, seed=0, size=(64, 80))
    return dls_from_folders(path, SYNTH_CODES, bs=4, num_workers=0, device=DEV)

@pytest.mark.parametrize('kind', ['own backbone', 'shared head bf16'])
def test_training_on_the_gpu(dls, tmp_path, kind):
    "A `refine_learner` on GPU batches trains on the GPU (its own backbone, or the head on a base model in bfloat16), and its prototypes come from there."
    set_seed(0)
    kw = (dict(backbone='resnet18', pretrained=False, net_kwargs=dict(aspp_dim=16, decoder_dim=16)) if kind == 'own backbone' else
          dict(base=DeepLabV3MobileNetV2(len(SYNTH_CODES), pretrained=False).to(DEV).eval(), train_blocks=0, bf16=True, aspp_dim=16, decoder_dim=16))
    learn = refine_learner(dls, emb_dim=8, n_triplets=256, path=tmp_path, **kw)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)
    assert torch.device(dls.device).type == 'cuda' and next(learn.model.parameters()).device.type == 'cuda'
    losses = torch.stack([torch.as_tensor(l) for l in learn.recorder.losses])
    assert len(losses) > 0 and torch.isfinite(losses).all()
    protos = extract_prototypes(learn, dls.valid, len(SYNTH_CODES), progress=False)
    assert protos.vectors.shape == (len(SYNTH_CODES), 8) and torch.isfinite(protos.vectors).all() and protos.present.any()

def test_embedder_follows_its_base_model_onto_the_gpu(tmp_path):
    "Built, or loaded, on a base model that lives on the GPU, a shared embedder is made there: no `.to` needed; a base moved away alone is refused clearly."
    base, _, _ = _shared_pair()
    base.to(DEV)
    net = SharedEmbeddingNet(base, emb_dim=8, aspp_dim=16, low_level_dim=8, decoder_dim=16, train_blocks=1).eval()
    assert {p.device.type for p in net.parameters()} == {'cuda'}
    imgs, _, protos = _scene()
    out = refine_predict(imgs, base, net, protos, top_n=3, radius=8)
    Refiner(net, protos, top_n=3, radius=8).save(tmp_path/'b')
    again = Refiner.load(tmp_path/'b', base=base)                       # as after training on a GPU: the base is there
    assert {p.device.type for p in again.embedder.parameters()} == {'cuda'}
    assert _agree(again(imgs, base), out) > 0.999
    base.cpu()
    with pytest.raises(RuntimeError, match='move them together'): again(imgs, base)

def test_resume_on_the_gpu(dls, tmp_path):
    "A checkpoint's optimiser moments go where the weights train: resuming a GPU run trains on."
    from brefine.checkpoints import save_checkpoint, resume_learner
    kw = dict(backbone='resnet18', emb_dim=8, pretrained=False, n_triplets=128, path=tmp_path, net_kwargs=dict(aspp_dim=16, decoder_dim=16))
    set_seed(0); learn = refine_learner(dls, **kw)
    with learn.no_bar(), learn.no_logging(): learn.fit_one_cycle(1, 1e-3)
    assert {v.device.type for st in learn.opt.state.values() for v in st.values() if torch.is_tensor(v)} == {'cuda'}
    save_checkpoint(learn, tmp_path/'ck.pt', 1, 2, dict(codes=SYNTH_CODES, void=None, radius=3))
    again = refine_learner(dls, **kw)
    assert resume_learner(again, tmp_path/'ck.pt') == 1
    with again.no_bar(), again.no_logging(): again.fit_one_cycle(2, 1e-3, start_epoch=1)
    assert next(again.model.parameters()).device.type == 'cuda' and len(again.recorder.losses) > 0

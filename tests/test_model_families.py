"""The recipe with no layer names on tiny random-init models of each family: torchvision, smp, timm features_only, transformers.

Each test fits a few batches, extracts prototypes, calibrates on a small grid, refines, and saves and loads a bundle. A test
skips where its library is not installed, except on CI (`CI` set), where a missing library is a failure."""
import os, importlib
import numpy as np, pytest, torch, torch.nn as nn, torch.nn.functional as F
from PIL import Image
from brefine import refine_learner, extract_prototypes, Refiner, feature_layers
from brefine.calibration import OBJECTIVES
from brefine.data import make_synthetic_folder, dls_from_folders, SYNTH_CODES

torch.set_num_threads(1)
N = len(SYNTH_CODES)

def _need(name: str):
    "The module `name`, or a skip where it is not installed (a failure on CI)."
    try: return importlib.import_module(name)
    except ImportError:
        if os.environ.get('CI'): raise
        pytest.skip(f"{name} is not installed")

@pytest.fixture(scope='module')
def data(tmp_path_factory):
    path = make_synthetic_folder(tmp_path_factory.mktemp('families')/'synth', n_train=4, n_valid=2, seed=0, size=(64, 64))
    return path, dls_from_folders(path, SYNTH_CODES, bs=2, num_workers=0)

def _val(path):
    files = sorted((path/'val').iterdir())
    return [np.array(Image.open(f).convert('RGB')) for f in files], [np.array(Image.open(path/'valannot'/f'{f.stem}.png')) for f in files]

def _recipe(model, data, tmp_path, low: str, high: str, blocks: int):
    "The recipe end to end on `model`, whose layers must be found as `low` and `high`, with `blocks` trained block copies."
    path, dls = data
    model = model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    found = feature_layers(model)
    assert found == (low, high), found
    learn = refine_learner(dls, base=model, emb_dim=8, aspp_dim=16, decoder_dim=16, n_triplets=256, path=tmp_path)
    assert (learn.model.low, learn.model.high, learn.model.config['train_blocks']) == (low, high, blocks)
    with learn.no_bar(), learn.no_logging(): learn.fit(1, 1e-3)           # two batches of two images
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())   # the base model never trains
    protos = extract_prototypes(learn, dls.test_dl(dls.train.items, with_labels=True), N, progress=False)
    refiner = Refiner(learn, protos)
    images, gts = _val(path)
    res = refiner.calibrate(images, model, gts, radii=(4,), top_ns=(2,), taus=(None,), alphas=(0.,), votes=(0, 5),
                            greys=(None,), progress=False)
    mean = OBJECTIVES['mean']                                              # calibrate's promise: never below the base by its objective
    assert mean(res['boundary_f1'], res['miou']) >= mean(res['base_boundary_f1'], res['base_miou']) and len(res['table']) == 3
    labels = refiner(images[0], model)
    assert labels.shape == images[0].shape[:2] and labels.dtype == torch.int64 and int(labels.max()) < N
    refiner.save(tmp_path/'bundle')
    back = Refiner.load(tmp_path/'bundle', base=model)
    assert back.settings == refiner.settings and torch.equal(back(images[0], model), labels)
    return learn

def test_torchvision(data, tmp_path):
    tv = _need('torchvision')
    m = tv.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=N)
    _recipe(m, data, tmp_path, 'backbone.3', 'backbone.16', 2)

def test_smp_unet_resnet(data, tmp_path):
    smp = _need('segmentation_models_pytorch')
    _recipe(smp.Unet('resnet18', encoder_weights=None, classes=N), data, tmp_path, 'encoder.layer1', 'encoder.layer4', 2)

def test_smp_deeplabv3plus_efficientnet(data, tmp_path):
    smp = _need('segmentation_models_pytorch')
    m = smp.DeepLabV3Plus('efficientnet-b0', encoder_weights=None, classes=N)
    _recipe(m, data, tmp_path, 'encoder._blocks.2', 'encoder._blocks.15', 2)

def test_smp_fpn_timm_encoder(data, tmp_path):
    smp = _need('segmentation_models_pytorch')
    m = smp.FPN('tu-mobilenetv3_small_050', encoder_weights=None, classes=N)
    _recipe(m, data, tmp_path, 'encoder.model.blocks.0', 'encoder.model.blocks.5', 2)

class TimmSeg(nn.Module):
    "A hand-written model on a timm features_only backbone: a 1x1 head on its deepest map."
    def __init__(self, name: str, n: int = N):
        super().__init__()
        self.backbone = _need('timm').create_model(name, features_only=True, pretrained=False)
        self.head = nn.Conv2d(self.backbone.feature_info.channels()[-1], n, 1)
    def forward(self, x): return F.interpolate(self.head(self.backbone(x)[-1]), x.shape[-2:], mode='bilinear')

@pytest.mark.parametrize('name, low, high', [('mobilenetv3_small_050', 'backbone.blocks.0', 'backbone.blocks.5'),
                                             ('efficientnet_b0', 'backbone.blocks.1', 'backbone.blocks.6'),
                                             ('mobilenetv4_conv_small', 'backbone.blocks.0', 'backbone.blocks.4')])
def test_timm_features_only(data, tmp_path, name, low, high):
    learn = _recipe(TimmSeg(name), data, tmp_path, low, high, 2)
    assert [type(b).__name__ for b in learn.model.blocks] == ['Sequential'] * 2     # copies of the last two stages

def test_transformers_segformer(data, tmp_path):
    tf = _need('transformers')
    cfg = tf.SegformerConfig(num_labels=N, hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1], num_attention_heads=[1, 1, 2, 2],
                             decoder_hidden_size=32)
    _recipe(tf.SegformerForSemanticSegmentation(cfg), data, tmp_path, 'segformer.stages.0', 'segformer.stages.3', 2)

def test_unreadable_output_refused(data):
    "A model whose output holds no scores is refused when the embedder is built, before any training."
    class Features(nn.Module):
        def __init__(self): super().__init__(); self.body = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.Conv2d(8, 16, 3, 4, 1))
        def forward(self, x): return [self.body(x)]
    with pytest.raises(TypeError, match="The base model returned a list of 1 items: expected its per-class scores"):
        refine_learner(data[1], base=Features(), emb_dim=8)

def test_cli_train_on_families(data, tmp_path):
    "`brefine train --learner` on exported Learners of smp models (a ResNet and a timm encoder), no layer names: the layers are found as in Python."
    import subprocess, sys
    from fastai.data.core import Datasets
    from fastai.learner import Learner
    smp = _need('segmentation_models_pytorch')
    path, _ = data
    (path/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    ds = Datasets([0, 1], tfms=[[lambda o: torch.zeros(3, 8, 8)], [lambda o: torch.zeros(8, 8, dtype=torch.long)]], splits=[[0], [1]])
    for name, model, want in [('unet', smp.Unet('resnet18', encoder_weights=None, classes=N), ('encoder.layer1', 'encoder.layer4')),
                              ('fpn', smp.FPN('tu-mobilenetv3_small_050', encoder_weights=None, classes=N),
                               ('encoder.model.blocks.0', 'encoder.model.blocks.5'))]:
        Learner(ds.dataloaders(bs=1), model, loss_func=nn.CrossEntropyLoss()).export(tmp_path/f'{name}.pkl')
        ck = tmp_path/f'{name}.pt'
        r = subprocess.run([sys.executable, '-c', 'import sys; from brefine.cli import main; sys.exit(main())', 'train', str(path),
                            '--out', str(ck), '--learner', str(tmp_path/f'{name}.pkl'), '--emb_dim', '8', '--epochs', '1', '--bs', '2'],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        saved = torch.load(ck, weights_only=True)
        assert (saved['kind'], saved['config']['low'], saved['config']['high']) == ('shared', *want), saved['config']

FACTORIES = f'''"Factories for `brefine --model`: tiny, randomly initialised models of {N} classes."
def segformer():
    import transformers
    cfg = transformers.SegformerConfig(num_labels={N}, hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                                       num_attention_heads=[1, 1, 2, 2], decoder_hidden_size=32)
    return transformers.SegformerForSemanticSegmentation(cfg)

def lraspp():
    import torchvision
    return torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes={N})
'''

@pytest.mark.parametrize('factory, library', [('segformer', 'transformers'), ('lraspp', 'torchvision')])
def test_cli_model_factory(data, tmp_path, factory, library):
    "`--model MODULE:FACTORY --weights FILE` through `train`, `prototypes` and `refine`, as subprocesses: the maps are the Python API's with that model and those weights; without --weights the embedder refuses the model."
    import subprocess, sys, importlib.util
    from brefine.embedder_io import load_embedder
    from brefine.prototypes import Prototypes
    _need(library)
    path, _ = data
    (path/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    (tmp_path/'seg_factories.py').write_text(FACTORIES)
    spec = importlib.util.spec_from_file_location('seg_factories', tmp_path/'seg_factories.py')
    factories = importlib.util.module_from_spec(spec); spec.loader.exec_module(factories)
    torch.manual_seed(1)
    model = getattr(factories, factory)().eval()
    torch.save(model.state_dict(), tmp_path/'weights.pt')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get('PYTHONPATH')])), OMP_NUM_THREADS='1')
    def brefine(*args, ok=True):
        r = subprocess.run([sys.executable, '-c', 'import sys; from brefine.cli import main; sys.exit(main())', *map(str, args)],
                           capture_output=True, text=True, timeout=600, env=env)
        assert (r.returncode == 0) == ok, r.stderr[-3000:]
        return r
    as_code = ['--model', f'seg_factories:{factory}', '--weights', tmp_path/'weights.pt']
    ck, pf, out = tmp_path/'emb.pt', tmp_path/'protos.pt', tmp_path/'refined'
    brefine('train', path, '--out', ck, *as_code, '--emb_dim', 8, '--epochs', 1, '--bs', 2)
    brefine('prototypes', ck, path, '--out', pf, '--bs', 2, *as_code)
    brefine('refine', path/'val', '-', out, '--checkpoint', ck, '--protos', pf, '--top_n', 2, *as_code)
    protos = Prototypes.load(pf)
    np.testing.assert_allclose(protos.mean, (0.485, 0.456, 0.406), rtol=1e-5)        # no Learner: ImageNet's statistics, recorded
    ref = Refiner(load_embedder(ck, base=model), protos, top_n=2)
    files = sorted((path/'val').iterdir())
    assert [f.name for f in sorted(out.iterdir())] == [f.name for f in files]
    for f in files:
        got, want = np.asarray(Image.open(out/f.name)), ref(np.asarray(Image.open(f).convert('RGB')), model).numpy()
        assert (got == want).mean() > 0.999, f.name                                  # the same model, weights and normalisation
    r = brefine('prototypes', ck, path, '--out', tmp_path/'p2.pt', '--model', f'seg_factories:{factory}', ok=False)
    assert 'with other weights' in r.stderr and 'Traceback' not in r.stderr and not (tmp_path/'p2.pt').exists()

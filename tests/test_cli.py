"""The `brefine` command end to end, through real subprocesses, on a tiny synthetic data set."""
import os, subprocess, sys
import numpy as np
import pytest, torch
from PIL import Image
from brefine.data import make_synthetic_folder, SYNTH_CODES

BREFINE = [sys.executable, '-c', 'import sys; from brefine.cli import main; sys.exit(main())']
ENV = dict(os.environ, OMP_NUM_THREADS='2', MPLBACKEND='Agg')

def run(*args, ok=True):
    r = subprocess.run(BREFINE + [str(a) for a in args], capture_output=True, text=True, env=ENV, timeout=600)
    if ok: assert r.returncode == 0, r.stderr[-3000:]
    return r

@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp('cli')
    data = make_synthetic_folder(d/'data', n_train=8, n_valid=4, seed=1, size=(64, 80))
    (data/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    ck = d/'emb.pt'
    run('train', data, '--out', ck, '--backbone', 'mobilenet_v2', '--emb_dim', 16, '--epochs', 1, '--bs', 4)
    return d, data, ck

def test_help_and_unknown():
    r = run('--help')
    assert 'train' in r.stdout and 'calibrate' in r.stdout
    assert 'Warning' not in r.stderr, r.stderr                        # no deprecation noise from the libraries' imports
    r = run('frobnicate', ok=False)
    assert r.returncode == 2 and 'unknown command' in r.stderr

def test_chain(trained):
    d, data, ck = trained
    assert ck.exists()
    protos = d/'protos.pt'
    run('prototypes', ck, data, '--out', protos)
    # refusing to overwrite without --force
    r = run('prototypes', ck, data, '--out', protos, ok=False)
    assert r.returncode == 2 and '--force' in r.stderr
    # base scores: noisy one-hot of the truth, saved as .npy next to each image name
    scores = d/'scores'; scores.mkdir()
    rng = np.random.default_rng(0)
    for f in sorted((data/'val').iterdir()):
        gt = np.asarray(Image.open(data/'valannot'/f.name)).astype(np.int64)
        p = np.eye(len(SYNTH_CODES))[gt].transpose(2, 0, 1) + rng.random((len(SYNTH_CODES),) + gt.shape)
        np.save(scores/(f.stem + '.npy'), (p / p.sum(0)).astype(np.float32))
    out = d/'refined'
    run('refine', data/'val', scores, out, '--checkpoint', ck, '--protos', protos, '--top_n', 3)
    outs = sorted(out.iterdir())
    assert [o.name for o in outs] == sorted(f.name for f in (data/'val').iterdir())
    lab = np.asarray(Image.open(outs[0]))
    assert lab.shape == (64, 80) and lab.max() < len(SYNTH_CODES)
    # the same folder through a DataLoader with 2 worker processes and batches of 3: the same maps (up to float near-ties)
    out2 = d/'refined_batched'
    run('refine', data/'val', scores, out2, '--checkpoint', ck, '--protos', protos, '--top_n', 3, '--bs', 3, '--workers', 2)
    a = np.stack([np.asarray(Image.open(o)) for o in outs])
    b = np.stack([np.asarray(Image.open(o)) for o in sorted(out2.iterdir())])
    assert a.shape == b.shape and (a != b).mean() <= (1e-3 if not torch.cuda.is_available() else 1e-2)   # a GPU's TF32 convolutions: more near-ties
    r = run('refine', data/'val', scores, out2, '--checkpoint', ck, '--protos', protos, ok=False)
    assert r.returncode == 2 and '--skip_existing' in r.stderr
    r = run('evaluate', out, data/'valannot', '--n_classes', len(SYNTH_CODES))
    assert 'boundary' in r.stdout.lower()
    # settings chosen on the validation images and their ground truth, written as a bundle that refine then reads
    bundle = d/'calibrated'
    r = run('calibrate', data/'val', scores, data/'valannot', bundle, '--checkpoint', ck, '--protos', protos)
    assert 'chose RefineSettings(' in r.stdout and f'wrote {bundle}' in r.stdout
    from brefine.refiner import Refiner
    settings = Refiner.load(bundle).settings
    assert f'chose {settings} on 4 images' in r.stdout
    run('refine', data/'val', scores, d/'refined_calibrated', '--bundle', bundle)
    assert sorted(o.name for o in (d/'refined_calibrated').iterdir()) == [o.name for o in outs]
    r = run('calibrate', data/'val', scores, data/'valannot', bundle, '--checkpoint', ck, '--protos', protos, ok=False)
    assert r.returncode == 2 and '--force' in r.stderr

def test_clear_errors(tmp_path, trained):
    d, data, ck = trained
    r = run('train', tmp_path/'nope', ok=False)
    assert r.returncode == 2 and 'not found' in r.stderr and 'Traceback' not in r.stderr
    bad = tmp_path/'bad.pt'; bad.write_bytes(b'not a checkpoint')
    r = run('prototypes', bad, data, '--out', tmp_path/'p.pt', ok=False)
    assert r.returncode == 2 and 'corrupt' in r.stderr
    r = run('train', data, '--out', ck, ok=False)
    assert r.returncode == 2 and '--force' in r.stderr

def test_train_init_from(tmp_path, trained):
    "`--init_from` starts the backbone from a weights file (here fastai's learn.save layout, {'model': state dict})."
    import torch, torchvision
    d, data, _ = trained
    src = torchvision.models.resnet18(weights=None).state_dict()
    torch.save({'model': {'backbone.' + k: v for k, v in src.items()}}, tmp_path/'base.pth')
    ck = tmp_path/'emb.pt'
    run('train', data, '--out', ck, '--backbone', 'resnet18', '--emb_dim', 8, '--epochs', 1, '--bs', 4, '--lr', 0,
        '--init_from', tmp_path/'base.pth')
    got = torch.load(ck, weights_only=True)['state_dict']
    assert torch.equal(got['backbone.conv1.weight'], src['conv1.weight'])          # lr 0: the copied weights, untouched
    assert torch.equal(got['backbone.layer4.1.conv2.weight'], src['layer4.1.conv2.weight'])
    torch.save(torchvision.models.mobilenet_v2(weights=None).state_dict(), tmp_path/'other.pth')
    r = run('train', data, '--out', tmp_path/'e2.pt', '--backbone', 'resnet18', '--init_from', tmp_path/'other.pth', ok=False)
    assert r.returncode == 2 and 'same architecture' in r.stderr


def test_train_on_learner_features(tmp_path, trained):
    "`train --learner`: an embedder on an exported Learner's model's features; `prototypes` and `refine` take the same file; the maps are the Python API's."
    import torch
    from fastai.data.core import Datasets
    from fastai.learner import Learner, load_learner
    from brefine.refiner import Refiner
    from brefine.backbones import DeepLabV3MobileNetV2
    from brefine.embedder_io import load_embedder
    from brefine.prototypes import Prototypes
    _, data, own = trained
    torch.manual_seed(0)
    ds = Datasets([0, 1], tfms=[[lambda o: torch.zeros(3, 8, 8)], [lambda o: torch.zeros(8, 8, dtype=torch.long)]], splits=[[0], [1]])
    Learner(ds.dataloaders(bs=1), DeepLabV3MobileNetV2(len(SYNTH_CODES), pretrained=False), loss_func=torch.nn.CrossEntropyLoss()).export(tmp_path/'seg.pkl')
    ck, pf = tmp_path/'shared.pt', tmp_path/'protos.pt'
    help_ = ' '.join(run('train', '--help').stdout.split())
    assert '--learner' in help_ and '--low' in help_ and 'feature_candidates(model) lists the names' in help_
    r = run('train', data, '--out', ck, '--learner', tmp_path/'seg.pkl', '--low', 'backbone.14', '--high', 'backbone.3', ok=False)
    assert r.returncode == 2 and "they look swapped" in r.stderr and not ck.exists()
    run('train', data, '--out', ck, '--learner', tmp_path/'seg.pkl', '--train_blocks', 0, '--emb_dim', 8, '--epochs', 1, '--bs', 4,
        '--low', 'backbone.3', '--high', 'backbone.14')
    saved = torch.load(ck, weights_only=True)
    assert (saved['kind'], saved['config']['low'], saved['config']['high']) == ('shared', 'backbone.3', 'backbone.14')
    r = run('prototypes', ck, data, '--out', pf, ok=False)
    assert r.returncode == 2 and 'pass --learner FILE' in r.stderr and not pf.exists()
    run('prototypes', ck, data, '--out', pf, '--learner', tmp_path/'seg.pkl')
    run('refine', data/'val', '-', tmp_path/'out', '--checkpoint', ck, '--protos', pf, '--learner', tmp_path/'seg.pkl', '--top_n', 3)
    model = load_learner(tmp_path/'seg.pkl', cpu=not torch.cuda.is_available()).model.eval()
    ref = Refiner(load_embedder(ck, base=model), Prototypes.load(pf), top_n=3)
    for f in sorted((data/'val').iterdir()):
        assert (np.asarray(Image.open(tmp_path/'out'/f.name)) == ref(np.asarray(Image.open(f).convert('RGB')), model).numpy()).all()
    r = run('prototypes', own, data, '--out', tmp_path/'p2.pt', '--learner', tmp_path/'seg.pkl', ok=False)
    assert r.returncode == 2 and 'drop --learner FILE' in r.stderr
    r = run('train', data, '--out', tmp_path/'e2.pt', '--learner', tmp_path/'seg.pkl', '--pretrained', ok=False)
    assert r.returncode == 2 and '--pretrained does not apply with --learner FILE' in r.stderr

# ---- bad input, in-process (`main([...])`), with a bundle saved from an untrained embedder: fast, no training ----
import contextlib, errno, io, shutil
from unittest import mock


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    "A 4-class bundle, a 300-class bundle, images img/a.png, img/b.png with scores sc/a.npy, sc/b.npy (4, 32, 40)."
    import torch
    from brefine.refiner import Refiner
    from brefine.embedder import EmbeddingNet
    from brefine.prototypes import Prototypes
    d = tmp_path_factory.mktemp('small')
    net = EmbeddingNet('mobilenet_v2', emb_dim=8, pretrained=False).eval()
    for name, m in (('bundle', 4), ('bundle300', 300)):
        Refiner(net, Prototypes(torch.randn(m, 8), torch.full((m,), 9), train_radius=2, mean=(0.5,) * 3, std=(0.25,) * 3)).save(d/name)
    (d/'img').mkdir(); (d/'sc').mkdir()
    rng = np.random.default_rng(0)
    for n in 'ab':
        Image.fromarray(rng.integers(0, 256, (32, 40, 3)).astype(np.uint8)).save(d/'img'/f'{n}.png')
        np.save(d/'sc'/f'{n}.npy', rng.random((4, 32, 40), dtype=np.float32))
    return d


def cli(*argv):
    "`brefine ARGV` in this process: (exit code, stdout, stderr)."
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err): rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def failed(*argv, expect=()):
    rc, _, err = cli(*argv)
    assert rc == 2 and err.startswith(f'brefine {argv[0]}: error:') and 'Traceback' not in err, err
    for e in [expect] if isinstance(expect, str) else expect: assert e in err, err
    return err


from brefine.cli import main  # noqa: E402


def read(f): return np.asarray(Image.open(f))


def test_single_score_file(small, tmp_path):
    "One image with one score file: the file is read as scores (it used to be opened as a pickled model)."
    rc, out, err = cli('refine', small/'img'/'a.png', small/'sc'/'a.npy', tmp_path/'out', '--bundle', small/'bundle')
    assert rc == 0, err
    assert read(tmp_path/'out'/'a.png').shape == (32, 40) and 'wrote 1 refined label maps' in out


def test_learner_opt_in(small, tmp_path):
    "--learner FILE with SCORES '-': the exported Learner's model computes the scores."
    import torch
    from fastai.data.core import Datasets
    from fastai.learner import Learner
    ds = Datasets([0, 1], tfms=[[lambda o: torch.zeros(3, 8, 8)], [lambda o: torch.zeros(8, 8, dtype=torch.long)]], splits=[[0], [1]])
    Learner(ds.dataloaders(bs=1), torch.nn.Conv2d(3, 4, 1), loss_func=torch.nn.CrossEntropyLoss()).export(tmp_path/'learner.pkl')
    rc, out, err = cli('refine', small/'img', '-', tmp_path/'out', '--bundle', small/'bundle', '--learner', tmp_path/'learner.pkl')
    assert rc == 0, err
    assert sorted(f.name for f in (tmp_path/'out').iterdir()) == ['a.png', 'b.png']
    failed('refine', small/'img', '-', tmp_path/'o2', '--bundle', small/'bundle', expect='no --learner or --model was given')
    failed('refine', small/'img', small/'sc', tmp_path/'o2', '--bundle', small/'bundle', '--learner', tmp_path/'learner.pkl',
           expect="pass '-' as SCORES")
    failed('refine', small/'img'/'a.png', tmp_path/'learner.pkl', tmp_path/'o2', '--bundle', small/'bundle', expect='--learner FILE')


def test_shared_bundle_with_learner(small, tmp_path):
    "A bundle whose embedder reads the base model's features: --learner gives the model, and the label maps are those of the Python API; saved scores alone, and a Learner that normalises otherwise than the embedder was trained, are refused."
    import torch
    from fastai.data.core import Datasets
    from fastai.data.transforms import Normalize
    from fastai.learner import Learner, load_learner
    from brefine.refiner import Refiner
    from brefine.backbones import DeepLabV3MobileNetV2
    from brefine.prototypes import Prototypes
    from brefine.shared_backbone import SharedEmbeddingNet
    torch.manual_seed(0)
    base = DeepLabV3MobileNetV2(4, pretrained=False).eval()
    net = SharedEmbeddingNet(base, emb_dim=8, aspp_dim=16, decoder_dim=16, train_blocks=0)
    Refiner(net, Prototypes(torch.randn(4, 8), torch.full((4,), 9), train_radius=2, mean=(0.5,) * 3, std=(0.25,) * 3),
            top_n=3, radius=4, vote=5, grey=10.).save(tmp_path/'bundle')
    ds = Datasets([0, 1], tfms=[[lambda o: torch.zeros(3, 8, 8)], [lambda o: torch.zeros(8, 8, dtype=torch.long)]], splits=[[0], [1]])
    odd = Normalize.from_stats((0.5,) * 3, (0.25,) * 3)                       # the model's Learner normalises as the embedder was trained
    Learner(ds.dataloaders(bs=1, after_batch=[odd]), base, loss_func=torch.nn.CrossEntropyLoss()).export(tmp_path/'learner.pkl')
    Learner(ds.dataloaders(bs=1), base, loss_func=torch.nn.CrossEntropyLoss()).export(tmp_path/'raw.pkl')
    failed('refine', small/'img', '-', tmp_path/'o2', '--bundle', tmp_path/'bundle', '--learner', tmp_path/'raw.pkl',
           expect="the Learner's model reads images not normalised")
    rc, out, err = cli('refine', small/'img', '-', tmp_path/'out', '--bundle', tmp_path/'bundle', '--learner', tmp_path/'learner.pkl')
    assert rc == 0, err
    model = load_learner(tmp_path/'learner.pkl', cpu=True).model.eval()
    ref = Refiner.load(tmp_path/'bundle', base=model)
    for n in 'ab':
        want = ref(np.asarray(Image.open(small/'img'/f'{n}.png')), model)
        assert (read(tmp_path/'out'/f'{n}.png') == want.numpy()).all()
    failed('refine', small/'img', small/'sc', tmp_path/'o2', '--bundle', tmp_path/'bundle',
           expect=("reads the features of your base model", "pass '-' as SCORES and the model as --learner FILE"))
    assert not (tmp_path/'o2').exists()


def test_never_overwrites_inputs(small, tmp_path):
    "OUT that would replace the images (by name or through a link), or two images with one output: refused before any work."
    img = tmp_path/'img'; shutil.copytree(small/'img', img)
    before = {f.name: f.read_bytes() for f in img.iterdir()}
    failed('refine', img, small/'sc', img, '--bundle', small/'bundle', '--force', expect=('would replace the input', 'a.png'))
    failed('refine', img, small/'sc', img, '--bundle', small/'bundle', '--skip_existing', expect='would replace the input')
    assert {f.name: f.read_bytes() for f in img.iterdir()} == before
    (tmp_path/'out').mkdir(); os.link(img/'a.png', tmp_path/'out'/'a.png')              # OUT/a.png is the input under another name
    failed('refine', img, small/'sc', tmp_path/'out', '--bundle', small/'bundle', '--force', expect='would replace the input')
    assert (img/'a.png').read_bytes() == before['a.png']
    Image.open(img/'a.png').save(img/'a.jpg')                                            # a.png and a.jpg both -> a.png
    err = failed('refine', img, small/'sc', tmp_path/'o2', '--bundle', small/'bundle', expect='would both be written to')
    assert 'a.jpg' in err and 'a.png' in err and not (tmp_path/'o2').exists()


def test_prototypes_out_is_not_its_checkpoint(trained):
    d, data, ck = trained
    before = ck.read_bytes()
    failed('prototypes', ck, data, '--out', ck, '--force', expect='is the input')
    assert ck.read_bytes() == before


def test_written_count(small, tmp_path):
    "The printed count is the number of files written: with --skip_existing, only the new ones."
    run = ('refine', small/'img', small/'sc', tmp_path/'out', '--bundle', small/'bundle')
    assert cli(*run)[1].rstrip().endswith(f"wrote 2 refined label maps to {tmp_path/'out'}")
    (tmp_path/'out'/'b.png').unlink()
    assert cli(*run, '--skip_existing')[1].rstrip().endswith(f"wrote 1 refined label maps to {tmp_path/'out'} (1 existing kept)")


def test_16bit_images(small, tmp_path):
    "16-bit images keep their range: grey I;16 and 16-bit RGB refine exactly like their 8-bit versions."
    import cv2
    (tmp_path/'img').mkdir()
    grey, rgb = np.asarray(Image.open(small/'img'/'a.png').convert('L')), np.asarray(Image.open(small/'img'/'b.png'))
    Image.fromarray(grey).save(tmp_path/'img'/'a.png'); Image.fromarray(rgb).save(tmp_path/'img'/'b.png')
    (tmp_path/'img16').mkdir()
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path/'img16'/'a.png')                 # mode I;16
    cv2.imwrite(str(tmp_path/'img16'/'b.png'), (rgb.astype(np.uint16) * 257)[..., ::-1])       # 48-bit RGB
    for k in ('img', 'img16'): assert cli('refine', tmp_path/k, small/'sc', tmp_path/f'out_{k}', '--bundle', small/'bundle')[0] == 0
    for n in ('a.png', 'b.png'): assert (read(tmp_path/'out_img'/n) == read(tmp_path/'out_img16'/n)).all(), n
    import torch
    from brefine.files import RefineItems
    from brefine.inputs import prepare_image
    for n in ('a.png', 'b.png'):                  # what the refiner receives: the full 16-bit range, scaled like 8 bits
        (_, i8, _), (_, i16, _) = RefineItems([tmp_path/'img'/n])[0], RefineItems([tmp_path/'img16'/n])[0]
        i8, i16 = np.asarray(i8), np.asarray(i16)
        assert i16.dtype == np.uint16 and np.array_equal(i16, i8.astype(np.uint16) * 257), n
        torch.testing.assert_close(prepare_image(i16)[0], prepare_image(i8)[0])


def test_corrupt_images_and_scores(small, tmp_path):
    "Empty or corrupt images and score files, class counts that differ in a batch or from the prototypes: errors name the file."
    img, sc = tmp_path/'img', tmp_path/'sc'
    shutil.copytree(small/'img', img); shutil.copytree(small/'sc', sc)
    run = ('refine', img, sc, tmp_path/'out', '--bundle', small/'bundle', '--force')
    (img/'b.png').write_bytes(b''); failed(*run, expect=('cannot read image', 'b.png', 'empty'))
    (img/'b.png').write_bytes(b'\x89PNG\r\n\x1a\n garbage'); failed(*run, expect=('cannot read image', 'b.png'))
    shutil.copy(small/'img'/'b.png', img/'b.png')
    (sc/'b.npy').write_bytes(b''); failed(*run, expect=('cannot read score file', 'b.npy'))
    np.save(sc/'b.npy', np.zeros((4, 31, 40), np.float32)); failed(*run, expect=('b.npy holds scores of shape (4, 31, 40)', "image's size"))
    np.save(sc/'b.npy', np.zeros((5, 32, 40), np.float32)); failed(*run, expect='b.npy holds scores for 5 classes but the prototypes have 4')
    np.save(sc/'b.npy', np.full((4, 32, 40), np.nan, np.float32)); failed(*run, expect='b.npy holds NaN or inf')
    from brefine.files import RefineItems
    np.save(sc/'b.npy', np.zeros((5, 32, 40), np.float32))
    items = RefineItems([img/'a.png', img/'b.png'], sc)
    with pytest.raises(ValueError, match='b.npy for 5'): items.collate([items[0], items[1]])


def test_palette(small, tmp_path):
    "A palette for more than 256 classes, or a palette folder without a palette PNG: refused before anything is written."
    pal = tmp_path/'pal'; pal.mkdir()
    run = ('refine', small/'img', small/'sc', tmp_path/'out', '--palette_from', pal)
    failed(*run, '--bundle', small/'bundle', expect='holds no PNG')
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(pal/'grey.png')
    failed(*run, '--bundle', small/'bundle', expect='has no palette')
    im = Image.fromarray(np.zeros((4, 4), np.uint8)).convert('P'); im.putpalette([0, 0, 0, 255, 0, 0]); im.save(pal/'a.png')
    failed(*run, '--bundle', small/'bundle300', expect=('at most 256 labels', '300 classes'))
    assert not (tmp_path/'out').exists()
    assert cli(*run, '--bundle', small/'bundle')[0] == 0
    assert Image.open(tmp_path/'out'/'a.png').mode == 'P'


@pytest.mark.parametrize('err, why', [(PermissionError(errno.EACCES, 'Permission denied'), 'permission denied'),
                                      (OSError(errno.ENOSPC, 'No space left on device'), 'disk is full')])
def test_unwritable_output(small, tmp_path, err, why):
    "A read-only folder or a full disk (simulated: tests may run as root): one line naming the file and the fix, exit code 2."
    with mock.patch('tempfile.mkstemp', side_effect=err):
        msg = failed('refine', small/'img', small/'sc', tmp_path/'out', '--bundle', small/'bundle', expect=why)
    assert str(tmp_path/'out'/'a.png') in msg
    (tmp_path/'gt').mkdir(); Image.fromarray(np.eye(8, dtype=np.uint8)).save(tmp_path/'gt'/'a.png')
    with mock.patch('os.fsync', side_effect=err):
        failed('evaluate', tmp_path/'gt', tmp_path/'gt', '--n_classes', 2, '--plots', tmp_path/'plots', expect=(why, 'plots'))


@pytest.mark.skipif(not hasattr(os, 'geteuid') or os.geteuid() == 0, reason='root writes to read-only folders')
def test_read_only_folder(small, tmp_path):
    (tmp_path/'out').mkdir(); os.chmod(tmp_path/'out', 0o555)
    try: failed('refine', small/'img', small/'sc', tmp_path/'out', '--bundle', small/'bundle', expect='permission denied')
    finally: os.chmod(tmp_path/'out', 0o755)


@pytest.mark.parametrize('opt, val', [('--top_n', 0), ('--top_n', 5), ('--radius', -1), ('--vote', 4), ('--vote', -1), ('--grey', 0.5), ('--bs', 0),
                                      ('--workers', -1)])
def test_bad_settings(small, tmp_path, opt, val):
    "Impossible settings are refused before any work, naming the option (--top_n 5: more than the bundle's 4 classes)."
    failed('refine', small/'img', small/'sc', tmp_path/'out', '--bundle', small/'bundle', opt, val, expect=opt)
    assert not (tmp_path/'out').exists()


def test_evaluate(small, tmp_path):
    "--plots writes the figures; 16-bit label PNGs load; sizes, labels and --n_classes are checked, naming the files."
    from brefine.cli import evaluate
    gt, pred = tmp_path/'gt', tmp_path/'pred'; gt.mkdir(); pred.mkdir()
    rng = np.random.default_rng(0)
    for n in ('a.png', 'b.png'):
        Image.fromarray((rng.integers(0, 3, (24, 32)) * 100).astype(np.uint16)).save(gt/n)      # 16-bit labels 0, 100, 200
        Image.fromarray(rng.integers(0, 3, (24, 32)).astype(np.uint8)).save(pred/n)
    rc, out, err = cli('evaluate', gt, gt, '--n_classes', 201, '--plots', tmp_path/'plots')
    assert rc == 0, err
    assert sorted(f.name for f in (tmp_path/'plots').iterdir()) == ['boundary_f1.png', 'errors.png', 'trimap.png']
    with contextlib.redirect_stdout(io.StringIO()): assert evaluate(gt, gt, n_classes=201).table.loc['mIoU', 'base'] == 1
    failed('evaluate', pred, gt, '--n_classes', 3, expect=('gt/a.png holds label', 'outside 0..2', '--void'))
    with pytest.raises(TypeError, match='--n_classes must be a whole number'): evaluate(pred, gt, n_classes='3')
    with pytest.raises(ValueError, match='--n_classes must be >= 1'): evaluate(pred, gt, n_classes=0)
    Image.fromarray(np.zeros((20, 32), np.uint8)).save(pred/'b.png')
    failed('evaluate', pred, gt, '--n_classes', 201, expect=('pred/b.png is 32x20 but its ground truth', 'gt/b.png is 32x24'))
    (gt/'b.png').unlink()
    failed('evaluate', pred, gt, '--n_classes', 201, expect='1 predictions have no ground truth')
    (pred/'b.png').write_bytes(b''); shutil.copy(gt/'a.png', gt/'b.png')
    failed('evaluate', pred, gt, '--n_classes', 201, expect=('cannot read label map', 'b.png'))
    Image.fromarray(np.zeros((24, 32, 3), np.uint8)).save(pred/'b.png')
    failed('evaluate', pred, gt, '--n_classes', 201, expect='is not a label map but a RGB image')

def test_foreign_layout(tmp_path):
    "A data set laid out as many are: JPEG images with PNG masks of the same names, images of several sizes, void 255, fewer training images than the default batch; every command of the chain runs on it."
    from brefine.data import synthetic_scene
    import cv2
    data = tmp_path/'data'
    for sub in ('train', 'trainannot', 'val', 'valannot', 'scores'): (data/sub).mkdir(parents=True)
    for i, hw in enumerate([(64, 80), (50, 70), (64, 80), (64, 80), (72, 56), (64, 80)]):
        split = 'train' if i < 4 else 'val'
        img, lab = synthetic_scene(i, hw); lab = lab.astype(np.uint8); lab[:2] = 255
        cv2.imwrite(str(data/split/f'{i}.jpg'), img); cv2.imwrite(str(data/f'{split}annot'/f'{i}.png'), lab)
        if split == 'val':
            p = np.eye(len(SYNTH_CODES), dtype=np.float32)[np.where(lab == 255, 0, lab)] + 0.2
            np.save(data/'scores'/f'{i}.npy', (p / p.sum(-1, keepdims=True)).transpose(2, 0, 1))
    (data/'codes.txt').write_text('\n'.join(SYNTH_CODES))
    ck, protos, bundle, out = tmp_path/'emb.pt', tmp_path/'protos.pt', tmp_path/'bundle', tmp_path/'refined'
    run('train', data, '--out', ck, '--backbone', 'mobilenet_v2', '--emb_dim', 8, '--epochs', 1, '--bs', 2, '--void', 255)
    run('prototypes', ck, data, '--out', protos)                       # the default --bs 8: more than the 4 training images
    run('calibrate', data/'val', data/'scores', data/'valannot', bundle, '--checkpoint', ck, '--protos', protos, '--void', 255)
    run('refine', data/'val', data/'scores', out, '--bundle', bundle)
    assert [np.asarray(Image.open(out/f'{i}.png')).shape for i in (4, 5)] == [(72, 56), (64, 80)]   # each at its own size
    assert 'boundary' in run('evaluate', out, data/'valannot', '--n_classes', len(SYNTH_CODES), '--void', 255).stdout.lower()
